"""keras_hub's Gemma 3: the attention layer keras_hub's `Gemma3Backbone` builds for layer i,
with the settings the backbone gives it (keras_hub 0.32, models/gemma3/gemma3_backbone.py
#L247-L270: layer i slides when use_sliding_window_attention and i % 6 < 5, its
rope_wavelength is 10_000 then and 1_000_000 otherwise, its rope_scaling_factor the local
or global one).  The runner builds a tiny Gemma3Backbone (the case's widths, num_layers of
the schedule) and calls `backbone.transformer_layers[layer].attention`, a
CachedGemma3Attention (gemma3_attention.py), on the case's canonical weights: so the
schedule is the backbone's, never the runner's.

What the backbone cannot say is not expressible: a schedule other than its `i % 6 < 5`
pattern (or no sliding layer at all), bases other than 1e4 (sliding) and 1e6 (full), a
scaling other than linear (its RotaryEmbedding's default rope_type, scaling_factor), NoPE
layers, biases (its EinsumDense projections have none), a scale other than
1/sqrt(head_dim) (query_head_dim_normalize=True).  Positions: the layer rotates q and k
from `cache_update_index` (`_apply_rope(x, cache_update_index)`), as keras_hub's generate
does, so the case's positions P0.. are a call with a zero cache of P0 + T slots, written at
cache_update_index P0, and an attention_mask allowing the written slots causally (the
slots before P0 hold no keys); the layer ANDs its own sliding window into the mask
(`_mask_sliding_window`, sliced at row cache_update_index).  QK-norm: keras_hub's
RMSNormalization scales by (1 + scale) (gemma3_layers.py), so the canonical scale s loads
as s - 1.  Runs in the Keras JAX worker; keras and keras_hub are imported inside functions.
"""
from __future__ import annotations

import numpy as np

from conformance.contract.runner import (
    NotExpressible, Observation, Runner, Translation, harness_limit)
from conformance.runners._export.keras_mha import worker_spec
from conformance.runners.keras.hub import SRC, missing_hub

BACKBONE_SRC = SRC + "models/gemma3/gemma3_backbone.py"
ATTENTION_SRC = SRC + "models/gemma3/gemma3_attention.py"
BASES = {"sliding": 10_000.0, "full": 1_000_000.0}  # gemma3_backbone.py#L249


def backbone_types(num_layers: int, sliding: bool) -> tuple[str, ...]:
    """The layer types Gemma3Backbone gives (#L248: i % 6 < 5 slides, when sliding is on)."""
    return tuple("sliding" if sliding and i % 6 < 5 else "full" for i in range(num_layers))


def _factor(kind) -> float | str:
    """The kind's rope_scaling_factor, or why it has none."""
    s = kind.rope_scaling
    if s is None:
        return 1.0
    if s.kind != "linear":
        return (f"rope_scaling type {s.kind}: Gemma3Backbone passes one rope_scaling_factor "
                "per type to RotaryEmbedding with its default rope_type 'linear' "
                f"({BACKBONE_SRC}#L250)")
    return float(s.factor)


def schedule_limits(case) -> str | dict:
    """Gemma3Backbone's keywords for the case's schedule, or why it cannot say it."""
    s, a = case.attention.layer_schedule, case.attention
    if s is None:
        return harness_limit("no attention.layer_schedule: this runner calls a layer of a "
                             "Gemma3Backbone schedule (the plain layers are keras.* rows)")
    if s.nope_layers:
        return (f"nope_layers {list(s.nope_layers)}: Gemma3Backbone rotates every layer "
                f"({BACKBONE_SRC}#L255-L270)")
    sliding = "sliding" in s.layer_types
    if s.layer_types != backbone_types(s.num_layers, sliding):
        return (f"layer_types {list(s.layer_types)}: Gemma3Backbone makes layer i sliding "
                f"when i % 6 < 5 (use_sliding_window_attention=True), else every layer full "
                f"({BACKBONE_SRC}#L248); no other pattern")
    kw = {"num_layers": s.num_layers, "use_sliding_window_attention": sliding}
    for kind, setting in s.kinds:
        if setting.rope_base != BASES[kind]:
            return (f"{kind} rope_base {setting.rope_base:g}: Gemma3Backbone fixes "
                    f"rope_wavelength {BASES[kind]:g} for {kind} layers ({BACKBONE_SRC}#L249)")
        f = _factor(setting)
        if isinstance(f, str):
            return f
        kw["local_rope_scaling_factor" if kind == "sliding" else "global_rope_scaling_factor"] = f
        if setting.window is not None:
            kw["sliding_window_size"] = setting.window
    if a.rope.style != "half_split" or a.rope.rotary_dim != a.qk_head_dim:
        return ("a rope other than half-split over the whole head: keras_hub's RotaryEmbedding "
                "splits the feature axis in halves and rotates all of it")
    return kw


MAX_SLOTS = 4096  # the sliding mask is (slots, slots): 16M booleans here


def layer_limits(case) -> str | None:
    a, i, n = case.attention, case.inputs, case.attention.qk_norm
    if i.position_offset + i.query_len > MAX_SLOTS:
        return harness_limit(
            f"positions past {MAX_SLOTS}: the layer rotates from cache_update_index over a "
            "cache of position_offset + T slots, and _mask_sliding_window builds a (slots, "
            f"slots) matrix ({ATTENTION_SRC}): a far position costs its square")
    if not i.self_attention or case.has_non_causal_mask or case.mask.causal == "none":
        return ("CachedGemma3Attention is causal self-attention here (one x; the mask the "
                "decoder block builds is causal): a cross-attention, non-causal or masked case "
                "is not its call")
    if a.bias:
        return (f"bias=True: CachedGemma3Attention's EinsumDense projections have no bias "
                f"({ATTENTION_SRC})")
    if a.scale is not None and abs(a.scale - a.qk_head_dim ** -0.5) > 1e-15:
        return ("a scale other than 1/sqrt(head_dim): query_head_dim_normalize=True gives "
                "1/sqrt(head_dim), False 1/sqrt(hidden_dim / num_query_heads)")
    if a.qk_head_dim != a.v_head_dim or a.output_features != a.query_features:
        return "one head_dim for q, k and v, and the output back to hidden_dim"
    if n is not None and (n.kind != "rms" or n.scope != "per_head"):
        return "qk_norm: Gemma3's query_norm / key_norm are RMSNormalization over head_dim"
    return None


class KerasHubGemma3(Runner):
    """Layer `layer_schedule.layer` of a keras_hub Gemma3Backbone, in the Keras JAX worker."""

    name = "keras_hub.gemma3"
    framework = "keras"
    system = "keras_hub.src.models.gemma3.gemma3_attention.CachedGemma3Attention"
    typed_system = "keras"
    description = ("the attention of layer i of `keras_hub` `Gemma3Backbone` (its i % 6 < 5 "
                   "sliding pattern, 1e4 / 1e6 rope wavelengths, local / global scaling)")
    path = "Gemma3Backbone(...).transformer_layers[i].attention, cached call"
    backend = "jax"
    requires = ("keras", "jax", "keras_hub")
    features = frozenset({"fill", "rope", "position_offset", "qk_norm", "layer_schedule"})
    seconds = 1.0
    # the probes' cases carry what the layer always is: no biases (layer_limits)
    probe_needs = {"bias": False}

    def __init__(self, **params):
        super().__init__(**params)
        self.worker = worker_spec(self.backend)

    def available(self) -> str | None:
        return missing_hub() or super().available()

    def translate(self, case):
        kw = schedule_limits(case)
        if isinstance(kw, str):
            return NotExpressible(kw)
        why = layer_limits(case)
        if why:
            return NotExpressible(why)
        a, n = case.attention, case.attention.qk_norm
        kw.update(num_query_heads=a.num_heads, num_key_value_heads=a.num_kv_heads,
                  hidden_dim=a.query_features, head_dim=a.qk_head_dim,
                  use_query_key_norm=n is not None,
                  layer_norm_epsilon=1e-6 if n is None else n.eps)
        args = ", ".join(f"{k}={v!r}" for k, v in kw.items())
        layer = case.attention.layer_schedule.layer
        return Translation(f"Gemma3Backbone(vocabulary_size=16, intermediate_dim=8, {args})"
                           f".transformer_layers[{layer}].attention", {**kw, "layer": layer})

    def run(self, case, translation, data):
        import keras

        keras.config.disable_flash_attention()
        layer = built(keras, case, translation.plan, data.weights)
        b, t, p0 = case.inputs.batch, case.inputs.query_len, case.inputs.position_offset
        slots = p0 + t
        kv = (b, slots, layer.num_key_value_heads, layer.head_dim)
        cache = (np.zeros(kv, case.inputs.dtype), np.zeros(kv, case.inputs.dtype))
        j, q = np.arange(slots)[None, :], p0 + np.arange(t)[:, None]
        mask = np.broadcast_to((j >= p0) & (j <= q), (b, t, slots))
        out, _ = layer(np.asarray(data.inputs.query, case.inputs.dtype), attention_mask=mask,
                       cache=cache, cache_update_index=p0)
        return Observation(
            output=np.asarray(keras.ops.convert_to_numpy(out), np.float64),
            parameters=int(layer.count_params()),
            weight_shapes={w.path: tuple(int(d) for d in w.shape) for w in layer.weights},
            notes=[f"layer {translation.plan['layer']}: use_sliding_window_attention "
                   f"{layer.use_sliding_window_attention}, sliding_window_size "
                   f"{layer.sliding_window_size}, rope_wavelength {layer.rope_wavelength:g}, "
                   f"rope_scaling_factor {layer.rope_scaling_factor:g} ({BACKBONE_SRC}#L247)",
                   f"positions from cache_update_index={p0}: a zero cache of {slots} slots, "
                   f"the mask allowing slots {p0}.. causally"],
            extras={"backend": self.backend})

    def signatures(self):
        from keras_hub.src.models.gemma3.gemma3_attention import CachedGemma3Attention
        from keras_hub.src.models.gemma3.gemma3_backbone import Gemma3Backbone

        return ("CachedGemma3Attention and Gemma3Backbone",
                (CachedGemma3Attention.__init__, CachedGemma3Attention.call,
                 Gemma3Backbone.__init__))


def built(keras, case, plan: dict, weights):
    """The backbone's layer `plan['layer']` with the canonical weights assigned."""
    from keras_hub.src.models.gemma3.gemma3_backbone import Gemma3Backbone

    kw = {k: v for k, v in plan.items() if k != "layer"}
    backbone = Gemma3Backbone(vocabulary_size=16, image_size=None, intermediate_dim=8,
                              vision_encoder=None, dtype=case.inputs.dtype, **kw)
    layer = backbone.transformer_layers[plan["layer"]].attention
    want = {"query": weights.wq, "key": weights.wk, "value": weights.wv,
            "attention_output": weights.wo}
    if weights.q_norm is not None:  # RMSNormalization scales by (1 + scale)
        want.update(query_norm=weights.q_norm - 1.0, key_norm=weights.k_norm - 1.0)
    for var in layer.weights:
        owner = var.path.split("/")[-2]
        if owner not in want or tuple(var.shape) != want[owner].shape:
            raise RuntimeError(f"variable {var.path} {tuple(var.shape)} has no canonical "
                               f"counterpart ({ {k: v.shape for k, v in want.items()} })")
        var.assign(np.asarray(want.pop(owner), case.inputs.dtype))
    if want:
        raise RuntimeError(f"the layer holds no variable for canonical {sorted(want)}")
    return layer
