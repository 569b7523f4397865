"""keras_hub's Qwen3.5 full-attention layer with its M-RoPE: `Qwen3_5Attention(mrope_section=
...)` called with (B, 4, T) position ids, in the Keras JAX worker.

keras_hub 0.32 (ATTENTION below) rotates with `_apply_mrope` whenever the layer has an
`mrope_section` and the call gives `position_ids` (_apply_partial_rope, #L243-L255): channels
1, 2, 3 of the ids are t, h and w (channel 0, the text position, is not read: #L46-L49); every
frequency of RotaryEmbedding's ladder is turned by each channel, and pair i takes h where
i < 3 mrope_section[1] and i % 3 == 1, w where i < 3 mrope_section[2] and i % 3 == 2, t
otherwise (#L55-L66, "Matches HF's ... apply_interleaved_mrope"), half-split on the first
rotary_dim dims.  No argument lays the sections contiguously.  Qwen3_5Backbone builds the
ids (qwen3_5_backbone.py _compute_mrope_position_ids) and the decoder hands them to every
full-attention layer (qwen3_5_decoder.py#L285-L298); the runner hands the case's rows, the
sequence positions in channel 0.  Everything else is keras_hub.qwen3_5's (the gate packed
per head in the query kernel, (1 + scale) QK-norm); its 1-D cases are that runner's rows.
"""
from __future__ import annotations

import numpy as np

from conformance.contract.runner import NotExpressible, Translation, harness_limit
from conformance.runners.keras.hub_qwen3_5 import ATTENTION, LAYER, KerasHubQwen35

LAYOUT_WHY = (f"{LAYER}'s _apply_mrope interleaves t, h and w at stride 3 ({ATTENTION}"
              "#L55-L66); no argument lays the sections contiguously")


class KerasHubQwen35MRoPE(KerasHubQwen35):
    name = "keras_hub.qwen3_5.mrope"
    description = ("keras_hub's `Qwen3_5Attention` with `mrope_section` and (B, 4, T) "
                   "`position_ids` (interleaved M-RoPE; gate and QK-norm as keras_hub.qwen3_5)")
    path = "Qwen3_5Attention(..., mrope_section)(x, attention_mask, position_ids=(B, 4, T))"
    features = KerasHubQwen35.features | {"multi_axis_rope"}
    probe_takes = frozenset()  # the universal probes are keras_hub.qwen3_5's
    answers = frozenset()

    def translate(self, case):
        r = case.attention.rope
        m = None if r is None else r.multi_axis
        if m is None:
            return NotExpressible(harness_limit(
                "keras_hub.qwen3_5.mrope runs M-RoPE cases (attention.rope.multi_axis); the "
                "layer's 1-D cases are keras_hub.qwen3_5's rows"))
        if m.kind != "mrope":
            return NotExpressible(f"rope.multi_axis.kind={m.kind}: {LAYER} takes (B, 4, T) "
                                  "M-RoPE ids; a 2-D patch grid is the vision encoder's")
        if m.layout != "interleaved":
            return NotExpressible(f"rope.multi_axis.layout={m.layout}: {LAYOUT_WHY}")
        t = super().translate(case)
        if isinstance(t, NotExpressible):
            return t
        plan = {**t.plan, "mrope_section": list(m.sections)}
        return Translation(f"{LAYER}(..., mrope_section={list(m.sections)})(x, attention_mask, "
                           "position_ids=(B, 4, T): [sequence, t, h, w])", plan)

    @staticmethod
    def call(layer, case, data):
        m = case.attention.rope.multi_axis
        b, t = case.inputs.batch, case.inputs.query_len
        rows = np.asarray(m.items if m.items is not None else [m.positions] * b)  # (B, 3, T)
        seq = np.broadcast_to(np.arange(t), (b, 1, t))
        ids = np.concatenate([seq, rows], axis=1).astype("int32")  # (B, 4, T)
        out = layer(np.asarray(data.inputs.query, case.inputs.dtype),
                    attention_mask=data.inputs.allowed, position_ids=ids)
        import keras

        return np.asarray(keras.ops.convert_to_numpy(out), np.float64)
