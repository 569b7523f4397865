"""keras_hub's Qwen3.5: `Qwen3_5Attention`, the gated full-attention layer, in the Keras JAX
worker.

keras_hub 0.32 (ATTENTION below) builds the query projection as one EinsumDense
"bqm,muh->bquh" with output (None, H, 2 * head_dim) (#L150-L159) and splits it per head,
`query = qg[..., :head_dim]`, `gate = qg[..., head_dim:]` (#L280-L281): its kernel (E, H, 2d)
holds, head by head, the query then the gate.  Then: Qwen3_5LayerNorm on each head's q and k
(an RMSNorm scaling by (1 + scale), scale initialised to zeros: qwen3_5_layers.py#L92-L126,
so the canonical scale s loads as s - 1); RotaryEmbedding on the first int(head_dim *
partial_rotary_factor) dims, half-split, from `start_index` = cache_update_index (#L236-L264);
the attention with scale 1/sqrt(head_dim) and the boolean attention_mask (True attends); the
heads flattened and multiplied by ops.sigmoid(gate) (#L340), then attention_output.  No
projection has a bias.

The runner builds the layer at the case's widths and assigns the canonical weights to its
variables (query/kernel = [W_q | W_g] per head, convert/gate.py); positions P0.. are a call
with a zero cache of P0 + T slots written at cache_update_index P0, the mask allowing the
written slots causally, as keras_hub's generate does (hub_gemma3.py does the same).  The
ledger's gate_packing probe asks it with W_q and W_g packed each other way (RawCall
packed_gate): the kernel assigned as packed, or, for a separate gate, query/kernel given the
queries alone, which Keras's assign refuses in its own words.
"""
from __future__ import annotations

import numpy as np

from conformance.contract.runner import NotExpressible, Observation, Runner, Translation
from conformance.convert._core import ConversionError
from conformance.runners._export.keras_mha import worker_spec
from conformance.runners.keras.hub import SRC, missing_hub

ATTENTION = SRC + "models/qwen3_5/qwen3_5_attention.py"
LAYER = "Qwen3_5Attention"


def limits(case) -> str | None:
    a, i = case.attention, case.inputs
    if a.output_gate is None:
        return (f"no attention.output_gate: {LAYER} multiplies its output by ops.sigmoid(gate) "
                f"on every call ({ATTENTION}#L340); the case asks for no gate")
    if a.qk_norm is None or (a.qk_norm.kind, a.qk_norm.scope) != ("rms", "per_head"):
        return (f"attention.qk_norm must be rms per_head: {LAYER} applies Qwen3_5LayerNorm("
                f"head_dim) to each head's q and k on every call ({ATTENTION}#L163-L193)")
    if a.rope is None:
        return (f"no attention.rope: {LAYER} rotates q and k on every call "
                f"(_apply_partial_rope, {ATTENTION}#L236-L264); the case asks for none")
    if a.rope.style != "half_split" or int(a.qk_head_dim * (a.rope.rotary_dim / a.qk_head_dim)
                                           ) != a.rope.rotary_dim:
        return (f"rope {a.rope.style} over {a.rope.rotary_dim} dims: RotaryEmbedding rotates "
                "the first int(head_dim * partial_rotary_factor) dims in half-split pairs")
    if a.bias:
        return f"bias=True: {LAYER}'s EinsumDense projections have no bias ({ATTENTION})"
    if not i.self_attention or a.v_head_dim != a.qk_head_dim or (
            a.output_features != a.query_features):
        return (f"{LAYER}.call(hidden_states, ...) is self-attention with one head_dim and "
                "the output back to the hidden size")
    if a.scale is not None and abs(a.scale - a.qk_head_dim ** -0.5) > 1e-15:
        return f"a scale other than 1/sqrt(head_dim): {LAYER} fixes 1 / sqrt(head_dim)"
    if i.position_offset and (case.mask.causal == "none" or case.has_non_causal_mask):
        return ("positions past 0 are a cached call (cache_update_index), causal as "
                "keras_hub's generate masks it: a non-causal or masked case is not that call")
    return None


def kernels(weights, packing: str) -> dict:
    """The canonical weights as the layer's variables, W_q and W_g packed as `packing`."""
    from conformance.convert.gate import pack

    q, g = weights.wq.transpose(0, 2, 1), weights.wg.transpose(0, 2, 1)  # (H, d, E)
    rows = pack(q, g, packing)
    h, e = q.shape[0], q.shape[2]
    query = rows[0].reshape(h, -1, e).transpose(2, 0, 1)  # (E, H, 2d) or (E, H, d)
    want = {"query": query, "key": weights.wk.transpose(1, 0, 2),
            "value": weights.wv.transpose(1, 0, 2), "attention_output": weights.wo,
            "query_norm": weights.q_norm - 1.0, "key_norm": weights.k_norm - 1.0}
    if packing == "separate":
        want["gate"] = rows[1].reshape(h, -1, e).transpose(2, 0, 1)
    return want


class KerasHubQwen35(Runner):
    """keras_hub's Qwen3_5Attention on the canonical weights, in the Keras JAX worker."""

    name = "keras_hub.qwen3_5"
    framework = "keras"
    system = "keras_hub.src.models.qwen3_5.qwen3_5_attention.Qwen3_5Attention"
    typed_system = "keras_hub.qwen3_5"  # Qwen3_5Attention's own words
    description = ("keras_hub's `Qwen3_5Attention` (sigmoid output gate packed per head in "
                   "the query kernel (E, H, 2 d), (1 + scale) RMS QK-norm, partial rotary)")
    path = "Qwen3_5Attention(...) called with a cache at the case's first position"
    backend = "jax"
    requires = ("keras", "jax", "keras_hub")
    features = frozenset({"fill", "rope", "position_offset", "qk_norm", "output_gate"})
    seconds = 1.0
    probe_needs = {"bias": False, "qk_norm": {"kind": "rms", "scope": "per_head"},
                   "rope": {"style": "half_split"}, "output_gate": {"activation": "sigmoid"}}
    probe_head_size = 6  # even: the rotation it always applies pairs dimensions
    probe_takes = frozenset({"grouped"})  # num_key_value_heads
    answers = frozenset({"packed_gate"})

    def __init__(self, **params):
        super().__init__(**params)
        self.worker = worker_spec(self.backend)

    def available(self) -> str | None:
        return missing_hub() or super().available()

    def translate(self, case):
        why = limits(case)
        if why:
            return NotExpressible(why)
        a = case.attention
        kw = {"num_query_heads": a.num_heads, "num_key_value_heads": a.num_kv_heads,
              "head_dim": a.qk_head_dim, "partial_rotary_factor": a.rope.rotary_dim /
              a.qk_head_dim, "rope_max_wavelength": a.rope.base,
              "layer_norm_epsilon": a.qk_norm.eps}
        args = ", ".join(f"{k}={v!r}" for k, v in kw.items())
        return Translation(f"{LAYER}({args})(x, attention_mask, cache, cache_update_index)",
                           kw)

    def called(self, case, plan, weights, data, packing: str):
        """(the layer with `weights` assigned as `packing`, its output on the case)."""
        import keras
        from keras_hub.src.models.qwen3_5.qwen3_5_attention import Qwen3_5Attention

        keras.config.disable_flash_attention()
        dt = case.inputs.dtype
        layer = Qwen3_5Attention(**plan, dtype=dt, name="qwen3_5_attention")  # no counter
        layer.build((None, None, case.attention.query_features))
        want = kernels(weights, packing)
        for var in layer.weights:  # Keras's own assign refuses a value of another shape
            var.assign(np.asarray(want.pop(var.path.split("/")[-2]), dt))
        if want:  # a variable the layer lacks: the suite's check, not Keras's words
            raise ConversionError(f"{LAYER} holds no variable for {sorted(want)} (its variables: "
                           f"{[v.path for v in layer.weights]})")
        return layer, self.call(layer, case, data)

    @staticmethod
    def call(layer, case, data):
        b, t, p0 = case.inputs.batch, case.inputs.query_len, case.inputs.position_offset
        x = np.asarray(data.inputs.query, case.inputs.dtype)
        if not p0:
            out = layer(x, attention_mask=data.inputs.allowed)
        else:
            slots, a = p0 + t, case.attention
            cache = np.zeros((b, 2, slots, a.num_kv_heads, a.qk_head_dim), case.inputs.dtype)
            j, q = np.arange(slots)[None, :], p0 + np.arange(t)[:, None]
            mask = np.broadcast_to((j >= p0) & (j <= q), (b, t, slots))
            out, _ = layer(x, attention_mask=mask, cache=cache, cache_update_index=p0)
        import keras

        return np.asarray(keras.ops.convert_to_numpy(out), np.float64)

    def run(self, case, translation, data):
        layer, out = self.called(case, translation.plan, data.weights, data, "per_head")
        return Observation(
            output=out, parameters=int(layer.count_params()),
            weight_shapes={w.path: tuple(int(d) for d in w.shape) for w in layer.weights},
            notes=["query/kernel (E, H, 2 head_dim): [W_q | W_g] per head; output * "
                   "ops.sigmoid(gate) before attention_output",
                   "query_norm / key_norm scale loaded as the canonical scale - 1 (1 + scale)"],
            extras={"backend": self.backend})

    def answer(self, case, data, raw):
        """RawCall packed_gate: the layer with W_q and W_g packed as `raw.value` assigned to
        its variables; Keras's own refusal of a shape propagates."""
        if raw.argument != "packed_gate":
            raise NotImplementedError(f"{self.name} passes no raw {raw.argument}")
        t = self.translate(case)
        if isinstance(t, NotExpressible):
            raise NotImplementedError(f"{self.name} cannot build the case: {t.reason}")
        _, out = self.called(case, t.plan, data.weights, data, raw.value)
        return out, f"{t.call} with query/kernel packed {raw.value}"

    def signatures(self):
        from keras_hub.src.models.qwen3_5.qwen3_5_attention import Qwen3_5Attention

        return (LAYER, (Qwen3_5Attention.__init__, Qwen3_5Attention.call))
