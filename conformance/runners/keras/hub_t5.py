"""keras_hub's T5 attention: `T5MultiHeadAttention` (keras_hub 0.32,
keras_hub/src/models/t5/t5_multi_head_attention.py), in the Keras TensorFlow worker.

The layer T5Backbone stacks: q, k, v and output projections without bias (Dense,
kernels (E, H * d) and (H * d, E_o)), no 1/sqrt(d) scaling (the scores are
einsum("bqnd,bknd->bnqk") plus position_bias, #L277), and, with
use_relative_attention_bias=True, a learned (32, num_heads) table `embeddings` looked up
by the bucket of key - query (compute_bias, #L197; _relative_position_bucket, #L138), its
buckets unidirectional when is_decoder.  Its table size is fixed in __init__
(relative_attention_buckets = 32, relative_attention_max_distance = 128, #L84-85, no
argument), so another size is not expressible.  Self-attention only (one input, or one
key_value_states tensor for keys and values).  The mask (B, T, S), 1 = attend, is folded
into position_bias as (1 - mask) * -1e9 (#L302).  Keras and keras_hub are imported inside
the functions only.
"""
from __future__ import annotations

import numpy as np

from conformance.contract.api_facts import NA, ApiFact
from conformance.contract.runner import NotExpressible, Observation, Runner, Translation
from conformance.runners._export.keras_mha import tensor, worker_spec
from conformance.runners.keras.hub import SRC, missing_hub

T5_SRC = SRC + "models/t5/t5_multi_head_attention.py"
FIXED_TABLE = (32, 128)  # relative_attention_buckets, relative_attention_max_distance
LAYER = "keras_hub.src.models.t5.t5_multi_head_attention.T5MultiHeadAttention"


def layer_limits(case) -> str | None:
    """Why the case cannot run through T5MultiHeadAttention, or None."""
    a, rb = case.attention, case.attention.relative_bias
    if not case.inputs.self_attention:
        return ("query, key and value are three tensors here; T5MultiHeadAttention takes "
                "hidden_states and one key_value_states for keys and values")
    if a.bias:
        return f"bias=True: its projections are Dense(use_bias=False) ({T5_SRC}#L87)"
    if a.scale != 1.0:
        return (f"scale {'1/sqrt(d_k) (the default)' if a.scale is None else a.scale}: the "
                f"scores are not scaled (einsum of q and k plus position_bias, {T5_SRC}#L277) "
                "and no argument sets a scale")
    if a.num_kv_heads != a.num_heads or a.qk_head_dim != a.v_head_dim:
        return "one key_value_dim for q, k and v, one key/value head per query head"
    if rb is not None and (rb.num_buckets, rb.max_distance) != FIXED_TABLE:
        return (f"relative_bias num_buckets={rb.num_buckets}, max_distance={rb.max_distance}: "
                "T5MultiHeadAttention fixes relative_attention_buckets = 32 and "
                f"relative_attention_max_distance = 128 in __init__ ({T5_SRC}#L84), no argument")
    if rb is not None and rb.relative_position != "key_minus_query":
        return (f"relative_position={rb.relative_position}: compute_bias buckets "
                f"memory_position - context_position (key - query, {T5_SRC}#L206)")
    return None


class KerasHubT5(Runner):
    """keras_hub's T5MultiHeadAttention on the case, its bias on where the case asks."""

    name = "keras_hub.t5"
    framework = "keras"
    system = LAYER
    description = ("`keras_hub` T5's `T5MultiHeadAttention` (no scale, no biases; its 32 x H "
                   "relative bias where the case asks)")
    path = "use_relative_attention_bias where the case asks"
    backend = "tensorflow"
    # T5's three numbers (T5Config's d_model, num_heads, d_kv are the layer's hidden_dim,
    # num_heads, key_value_dim: it is adapted from transformers' TF T5, #L64)
    typed_system = "hf.t5"
    requires = ("keras", "tensorflow", "keras_hub")
    features = frozenset({"fill", "relative_bias", "position_offset"})
    sets_scale = True  # by having none: expressible exactly when the case asks for 1.0
    seconds = 0.3
    probe_needs = {"bias": False, "scale": 1.0}  # what the layer always is

    def __init__(self, **params):
        super().__init__(**params)
        self.worker = worker_spec(self.backend)

    def available(self) -> str | None:
        return missing_hub() or super().available()

    def translate(self, case):
        why = layer_limits(case)
        if why:
            return NotExpressible(why)
        a, rb = case.attention, case.attention.relative_bias
        kw = {"is_decoder": rb is not None and not rb.bidirectional,
              "hidden_dim": a.output_features, "key_value_dim": a.qk_head_dim,
              "num_heads": a.num_heads, "dropout": 0.0,
              "use_relative_attention_bias": rb is not None}
        args = ", ".join(f"{k}={v!r}" for k, v in kw.items())
        call = "layer(x, mask=mask)" if case.has_non_causal_mask or case.mask.causal != "none" \
            else "layer(x)"
        return Translation(f"T5MultiHeadAttention({args}); {call}", kw)

    def run(self, case, translation, data):
        import keras

        if keras.backend.backend() != self.backend:
            raise RuntimeError(f"worker runs Keras backend {keras.backend.backend()!r}, "
                               f"runner needs {self.backend!r}")
        layer, x = built(keras, case, translation.plan, data.weights, data.inputs.query)
        allowed = data.inputs.allowed
        mask = None if allowed is None else tensor(keras, allowed.astype(np.float32))
        out, bias, _ = layer(x, mask=mask)
        notes = ["no scale: the scores are q k^T plus position_bias"]
        if translation.plan["use_relative_attention_bias"]:
            notes.append("the canonical (32, H) table as the layer's `embeddings`; "
                         f"is_decoder={translation.plan['is_decoder']}")
        if mask is not None:
            notes.append("mask (B, T, S), 1 = attend: folded into position_bias as "
                         "(1 - mask) * -1e9")
        return Observation(
            output=np.asarray(keras.ops.convert_to_numpy(out), np.float64),
            parameters=int(layer.count_params()),
            weight_shapes={w.path: tuple(int(d) for d in w.shape) for w in layer.weights},
            notes=notes, extras={"backend": self.backend,
                                 "position_bias": tuple(int(d) for d in bias.shape)})

    def signatures(self):
        from keras_hub.src.models.t5.t5_multi_head_attention import T5MultiHeadAttention

        return "T5MultiHeadAttention", (T5MultiHeadAttention.__init__, T5MultiHeadAttention.call)

    def conventions(self) -> list[ApiFact]:
        """What the layer shows of its API (layer_facts): its call's position_bias is T5's
        learned relative bias, not ALiBi."""
        return layer_facts() + [ApiFact(
            "alibi_argument", NA, "T5MultiHeadAttention.call's position_bias is T5's learned "
            "relative bias (compute_bias looks a (32, num_heads) table up by bucketed "
            f"distance, {T5_SRC}#L197), reused by later layers; there are no slopes")]


def layer_facts() -> list[ApiFact]:
    """One layer (hidden_dim 8, key_value_dim 3, 2 heads) called on a (2, 5, 8) input: its
    query kernel's shape, its output's, and what its call takes and returns (inspect)."""
    import inspect

    import keras
    from keras_hub.src.models.t5.t5_multi_head_attention import T5MultiHeadAttention

    layer = T5MultiHeadAttention(is_decoder=False, hidden_dim=8, key_value_dim=3, num_heads=2,
                                 dropout=0.0, name="t5_attention")
    returned = layer(np.zeros((2, 5, 8), "float32"))
    kernel = tuple(int(d) for d in layer.query_projector.kernel.shape)
    out = tuple(int(d) for d in returned[0].shape)
    params = ", ".join(p for p in inspect.signature(T5MultiHeadAttention.call).parameters
                       if p != "self")
    call = f"T5MultiHeadAttention.call({params})"
    return [ApiFact("head_size_from", "per_head", "T5MultiHeadAttention(hidden_dim=8, "
                    f"key_value_dim=3, num_heads=2): query_projector kernel {kernel}: "
                    f"key_value_dim is per head ({T5_SRC}#L83)"),
            ApiFact("tensor_layout", "batch_first", f"a (2, 5, 8) input gives output {out}: "
                    "(batch, length, dim)"),
            ApiFact("inputs_order", "single_input", f"{call}: one input; keys and values "
                    "come from it or from one key_value_states tensor"),
            ApiFact("weights_returned", "none", f"{call} returns (attention_output, "
                    f"position_bias, cache): {len(returned)} items, no attention weights"),
            ApiFact("padding_argument", NA, f"{call} has no key-padding argument: padding "
                    "goes into mask (B, T, S)"),
            ApiFact("causal_argument", NA, f"{call} has no causal switch: the caller builds "
                    "the mask"),
            ApiFact("mask_on_tensor", "none", f"{call} reads its mask argument only "
                    f"(keras {keras.__version__})")]


def built(keras, case, plan: dict, weights, query: np.ndarray):
    """The layer, built by a first call on the case's input, with the canonical weights
    assigned and read back; and the input as the case's dtype."""
    from keras_hub.src.models.t5.t5_multi_head_attention import T5MultiHeadAttention

    dtype = case.inputs.dtype
    layer = T5MultiHeadAttention(**plan, dtype=dtype, name="t5_attention")
    x = tensor(keras, query, dtype)
    layer(x)  # builds the Dense kernels (the layer has no build of its own)
    h, e, d = weights.wq.shape
    kernel = {w: np.transpose(getattr(weights, w), (1, 0, 2)).reshape(e, h * d)
              for w in ("wq", "wk", "wv")}
    want = {"query_projector": kernel["wq"], "key_projector": kernel["wk"],
            "value_projector": kernel["wv"],
            "output_projector": weights.wo.reshape(h * d, weights.wo.shape[-1])}
    if plan["use_relative_attention_bias"]:
        want["embeddings"] = weights.relative_bias
    for var in layer.weights:
        owner = var.path.split("/")[-2] if var.path.endswith("kernel") else var.name
        if owner not in want or tuple(var.shape) != want[owner].shape:
            raise RuntimeError(f"variable {var.path} {tuple(var.shape)} has no canonical "
                               f"counterpart ({ {k: v.shape for k, v in want.items()} })")
        value = np.ascontiguousarray(want.pop(owner))  # already rounded to the case dtype
        var.assign(tensor(keras, value, dtype))
        back = np.asarray(keras.ops.convert_to_numpy(var.value)).astype(np.float64)
        if not np.array_equal(back, value):
            raise RuntimeError(f"readback of {var.path} differs from the canonical weight")
    if want:
        raise RuntimeError(f"the layer holds no variable for canonical {sorted(want)}")
    return layer, x
