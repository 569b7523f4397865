"""`keras_hub.layers.RotaryEmbedding` in front of Keras attention, on each Keras backend (#19).

One class parametrised by `backend` (`KerasRope(backend="jax")` is `keras.rope.jax`), in the
backend's Keras worker.  The attention is `keras.layers.MultiHeadAttention`, or
`keras.layers.GroupQueryAttention` for grouped heads, with RotaryEmbedding applied to the
projected query and key in `_compute_attention` (hub.py says why there and how).  Only
cases with `attention.rope` run (the plain layers are the keras.<backend> rows); rotary
pairs are half-split, so interleaved cases are not expressible.  A missing keras_hub is a
skip naming the install line.  Keras and keras_hub are imported inside the functions only.
"""
from __future__ import annotations

from conformance.contract.runner import NotExpressible, Translation
from conformance.runners.keras.common import run_layer
from conformance.runners._export.keras_mha import mha_translation
from conformance.runners.keras.gqa import gqa_translation
from conformance.runners.keras.hub import (
    ROPE_KEYS, KerasHubRunner, rope_call, rope_refusal, rotary_class)


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
    features = KerasHubRunner.features | {"rope", "position_offset"}

    def translate(self, case):
        refusal = rope_refusal(case)
        if refusal:
            return refusal
        base = (gqa_translation if case.grouped else mha_translation)(case)
        if isinstance(base, NotExpressible):
            return base
        a, i = case.attention, case.inputs
        plan = {**base.plan, "rotary_dim": a.rope.rotary_dim, "max_wavelength": a.rope.base,
                "starts": (i.position_offset, i.key_position_offset)}
        return Translation(f"{base.call}; {rope_call(case)}", plan)

    def run(self, case, translation, data):
        import keras

        cls = rotary_class(keras, base_layer(case))
        obs = run_layer(self, cls, case, translation, data)
        obs.extras["rope"] = "keras_hub.layers.RotaryEmbedding, half-split"
        return obs

    def count(self, case):
        import keras

        from conformance.runners.counting import keras_count

        plan = {k: v for k, v in self.translate(case).plan.items() if k not in ROPE_KEYS}
        return keras_count(keras, base_layer(case), case, plan)

    def conventions(self):
        from conformance.runners.keras.hub_probes import rope_conventions

        return rope_conventions(self)
