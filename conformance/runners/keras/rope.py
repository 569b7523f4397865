"""`keras_hub.layers.RotaryEmbedding` in front of Keras attention, on each Keras backend (#19).

One class parametrised by `backend` (`KerasRope(backend="jax")` is `keras.rope.jax`), in the
backend's Keras worker.  The attention is `keras.layers.MultiHeadAttention`, or
`keras.layers.GroupQueryAttention` for grouped heads, with RotaryEmbedding applied to the
projected query and key in `_compute_attention` (hub.py says why there and how).  Only
cases with `attention.rope` run (the plain layers are the keras.<backend> rows); rotary
pairs are half-split, so interleaved cases are not expressible.  A scaled rope
(attention.rope.scaling) goes in as RotaryEmbedding's own `rope_type` and `scaling_factor`
(and YaRN's `beta_fast`, `beta_slow`, `original_max_position_embeddings`, `truncate`) where
its docstring lists the type: linear, dynamic, yarn (keras_hub 0.32,
keras_hub/src/layers/modeling/rotary_embedding.py).  Its "dynamic" takes no pretraining
length (the case's has nowhere to go) and its YaRN factor 0.1 ln(scaling_factor) + 1
lands on cos and sin with no mscale or attention_factor argument; what it has no word for
is not expressible.
A missing keras_hub is a skip naming the install line.  Keras and keras_hub are imported
inside the functions only.
"""
from __future__ import annotations

from conformance.contract.runner import NotExpressible, Translation
from conformance.runners.keras.answers import ANSWERS
from conformance.runners.keras.common import run_layer
from conformance.runners._export.keras_mha import mha_translation
from conformance.runners.keras.gqa import gqa_translation
from conformance.runners.keras.hub import (
    ROPE_KEYS, ROPE_SRC, KerasHubRunner, rope_call, rope_refusal, rotary_class)

# RotaryEmbedding.__init__'s rope_type words (its docstring: "linear", "dynamic", "yarn");
# _get_inverse_freq's else branch leaves any other word's frequencies unscaled
HUB_ROPE_TYPES = ("linear", "dynamic", "yarn")


def scaling_kwargs(case) -> tuple[tuple[str, object], ...] | NotExpressible:
    """RotaryEmbedding's keywords for the case's rope scaling (() for none), or why not."""
    s = case.attention.rope.scaling
    if s is None:
        return ()
    if s.kind not in HUB_ROPE_TYPES:
        return NotExpressible(
            f"rope.scaling.type={s.kind}: keras_hub.layers.RotaryEmbedding's rope_type takes "
            f"{', '.join(HUB_ROPE_TYPES)} ({ROPE_SRC}); it computes no {s.kind} frequencies "
            "(_get_inverse_freq leaves another word's frequencies unscaled)")
    given = [k for k in ("mscale", "mscale_all_dim", "attention_factor")
             if getattr(s, k) is not None]
    if s.magnitude == "softmax_scale" or given:
        what = (f"{', '.join(given)} given" if given else "magnitude=softmax_scale")
        return NotExpressible(
            f"rope.scaling {what}: keras_hub.layers.RotaryEmbedding multiplies cos and sin by "
            "0.1 * ln(scaling_factor) + 1 (_compute_cos_sin_embedding, rope_type='yarn') and "
            "takes no mscale, mscale_all_dim or attention_factor; nothing of it reaches the "
            f"softmax scale ({ROPE_SRC})")
    kw = (("rope_type", s.kind), ("scaling_factor", float(s.factor)))
    if s.kind == "yarn":
        kw += (("beta_fast", float(s.beta_fast)), ("beta_slow", float(s.beta_slow)),
               ("original_max_position_embeddings", int(s.original_max_positions)),
               ("truncate", bool(s.truncate)))
    return kw


def base_layer(case) -> str:
    return "GroupQueryAttention" if case.grouped else "MultiHeadAttention"


class KerasRope(KerasHubRunner):
    """RotaryEmbedding + keras.layers.MultiHeadAttention / GroupQueryAttention on `backend`."""

    system = "keras_hub.layers.RotaryEmbedding + keras.layers.MultiHeadAttention"
    typed_system = "keras"  # MultiHeadAttention's num_heads / key_dim
    description = ("`keras_hub.layers.RotaryEmbedding` on the projected query and key of "
                   "`keras.layers.MultiHeadAttention` (`GroupQueryAttention` for grouped "
                   "heads), rope cases only")
    path = "fused"
    layer_cls, layer_name, kind = "MultiHeadAttention", "rope", "rope"
    features = KerasHubRunner.features | {"rope", "position_offset", "rope_scaling"}

    def translate(self, case):
        refusal = rope_refusal(case)
        if refusal:
            return refusal
        scaled = scaling_kwargs(case)
        if isinstance(scaled, NotExpressible):
            return scaled
        base = (gqa_translation if case.grouped else mha_translation)(case)
        if isinstance(base, NotExpressible):
            return base
        a, i = case.attention, case.inputs
        plan = {**base.plan, "rotary_dim": a.rope.rotary_dim, "max_wavelength": a.rope.base,
                "starts": (i.position_offset, i.key_position_offset), "rope_kwargs": scaled}
        call = rope_call(case)
        if scaled:
            call = call.replace(")", "".join(f", {k}={v!r}" for k, v in scaled) + ")", 1)
        return Translation(f"{base.call}; {call}", plan)

    # the ledger asks these (conventions/probes/): the plain layer's axes through the layer
    # under the rotation (probe_translate, answer: the rotary subclass overrides
    # _compute_attention only), rope_style through the rotation itself.  Not rope_partial:
    # the rows' partial rotation is this runner's slicing (hub.rotary_class), so the cell
    # is read from the signatures, which take no rotary width (signatures)
    probe_takes = frozenset({"grouped", "float64", "masked_rows"})
    answers = ANSWERS
    # the whole system's arithmetic is probed with its rotation (float64_compute,
    # fully_masked_row): RotaryEmbedding computes in its own dtype
    probe_needs = {"qk_head_dim": 8, "v_head_dim": 8, "rope": {"style": "half_split"}}

    def probe_translate(self, case):
        """A probe case with no rotation runs through the layer underneath (MultiHeadAttention,
        GroupQueryAttention for grouped heads): the rows' class minus the rotation."""
        if case.attention.rope is None:
            return (gqa_translation if case.grouped else mha_translation)(case)
        return self.translate(case)

    def run(self, case, translation, data):
        import keras

        if case.attention.rope is None:  # a probe case (probe_translate): the plain layer
            return run_layer(self, base_layer(case), case, translation, data)
        cls = rotary_class(keras, base_layer(case))
        obs = run_layer(self, cls, case, translation, data)
        obs.extras["rope"] = "keras_hub.layers.RotaryEmbedding, half-split"
        return obs

    def count(self, case):
        import keras

        from conformance.runners.counting import keras_count

        plan = {k: v for k, v in self.translate(case).plan.items() if k not in ROPE_KEYS}
        return keras_count(keras, base_layer(case), case, plan)

    def signatures(self):
        """keras_hub.layers.RotaryEmbedding, MultiHeadAttention and GroupQueryAttention:
        RotaryEmbedding.call rotates the whole feature axis it is given (rotary_dim =
        input_shape[feature_axis], keras_hub 0.32 rotary_embedding.py:151) and takes no
        rotary width, so rope_partial reads not_applicable from them."""
        import keras
        import keras_hub

        classes = (keras_hub.layers.RotaryEmbedding, keras.layers.MultiHeadAttention,
                   keras.layers.GroupQueryAttention)
        return (" + ".join(c.__name__ for c in classes),
                tuple(f for c in classes for f in (c.__init__, c.call)))

    def conventions(self):
        """The API facts of the layer under the rotation (observations.py)."""
        from conformance.runners.keras.observations import layer_facts

        return layer_facts(self)
