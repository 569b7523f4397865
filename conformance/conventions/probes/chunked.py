"""chunk_mask and attention_temperature, owned by the ledger: how a system that takes Llama 4's
chunked attention (mask.chunk) and attention temperature (attention.temperature) reads
them, each asked through the runner's own translate and run (needs.needed_forms: a system
whose chunked layers always rotate is asked the form with its probe_needs) at positions
where the readings part, and read against the float64 oracle under each reading
(probing.closest: the nearest, or the tie named; `other` where none is within NEAR).

chunk_mask: self-attention, T = 8, chunk 4, causal, positions 2..9 (inputs.position_offset
2), so a block boundary (position 4) and a boundary counted from the first query (index 4,
position 6) both fall inside the query span:
- `block`: query p sees key s <= p with p // 4 == s // 4, absolute positions (the oracle;
  transformers/masking_utils.py chunked_overlay over the indices it counts,
  mlx_lm/models/llama4.py LlamaModel.__call__ over cache offsets);
- `block_relative`: the same blocks counted from the first query the call is given (its
  index 0), not from the positions: what a system does that counts chunks by its sequence
  index while it rotates by the position ids it is handed;
- `window`: a sliding window of 4 keys, s in p - 3 .. p (a chunk read as a window);
- `ignored`: causal alone, the chunk accepted and not applied.

attention_temperature: no RoPE (Llama 4 tempers its NoPE layers), T = 8, floor_scale 4,
attn_scale 0.5, positions 2..9: the multipliers 1 (p = 2), 1.3466 (p = 3..6), 1.5493
(p = 7..9) under Llama 4's floor((p + 1) / 4):
- `log_floor`: log1p(floor((p + 1) / F)) a + 1 at the absolute positions (the oracle;
  modeling_llama4.py Llama4TextAttention.forward#L360-L367);
- `off_by_one`: floor(p / F) (a port that drops the + 1: its first step comes one position
  late, at p = 4 and p = 8 here);
- `log_floor_relative`: Llama 4's formula at the call's sequence index 0..7, not the
  positions it is given (transformers computes `positions = arange(T) + cache length`);
- `ignored`: no temperature.
Each reading is a case variant the oracle computes (the probe case has no RoPE, so its
positions move only the temperature): off_by_one is the case at offset 1, relative at 0.
"""
from __future__ import annotations

from dataclasses import replace

import numpy as np

from conformance.conventions.axes import IGNORED, NOT_PROBED, Convention
from conformance.conventions.probes.asked import NEAR, documented, said, unmeasured
from conformance.conventions.probes.forms import first_taken
from conformance.conventions.probes.needs import needed_forms
from conformance.conventions.probes.probing import closest, distances, output_with
from conformance.oracle.canonical import causal_mask
from conformance.oracle.chunked import chunk_allowed
from conformance.oracle.reference import attention

CHUNK, OFFSET, LENGTH = 4, 2, 8  # the chunk probe: positions 2..9, boundaries at 4 and 8
FLOOR_SCALE, ATTN_SCALE = 4, 0.5  # the temperature probe: steps at p = 3 and p = 7
OTHER = "other"  # no reading within NEAR


def _sections(**attention) -> dict:
    return {"attention": {"num_heads": 2, "num_kv_heads": 1, "query_features": 8,
                         "qk_head_dim": 4, "v_head_dim": 4, **attention},
            "inputs": {"batch": 1, "query_len": LENGTH, "key_len": LENGTH,
                       "self_attention": True, "position_offset": OFFSET}}


def chunk_masks(case) -> dict[str, np.ndarray]:
    """reading -> its (T, S) allowed mask on `case` (causal, self-attention)."""
    i, c = case.inputs, case.mask.chunk
    t = np.arange(i.query_len)
    causal = causal_mask(i.query_len, i.key_len, "upper_left")
    pos = i.position_offset + t
    return {"block": causal & chunk_allowed(pos, pos, c),
            "block_relative": causal & chunk_allowed(t, t, c),
            "window": causal & (t[None, :] > t[:, None] - c),
            IGNORED: causal}


def _judged(axis: str, runner, observed, candidates: dict, what: str) -> Convention:
    """The reading within NEAR (or the tie, named), else `other` with every distance."""
    d = distances(observed, candidates)
    if min(d.values()) >= NEAR:
        figures = "; ".join(f"{k} {v:.1e}" for k, v in d.items())
        return Convention(axis, OTHER, f"{what}: max |output - oracle| under each reading: "
                          f"{figures}; none within {NEAR:g}", **documented(runner, axis))
    return closest(axis, observed, candidates, what, **documented(runner, axis))


def chunk_mask_cell(runner, own: Convention | None = None) -> Convention:
    """The chunk reading of the runner's output (the module's docstring)."""
    case, got, note = first_taken(runner, needed_forms(
        runner, "chunk-mask", **_sections(), mask={"causal": "upper_left", "chunk": CHUNK}))
    what = (f"probe_case {case.id}, chunk {CHUNK}, causal, positions {OFFSET}.."
            f"{OFFSET + LENGTH - 1}{note}")
    if not got.answered:
        return unmeasured("chunk_mask", runner, what, got)
    candidates = {w: output_with(case, m) for w, m in chunk_masks(case).items()}
    return _judged("chunk_mask", runner, got.output, candidates,
                   f"{runner.name}, {said(what, got)}")


def temperature_readings(case) -> dict:
    """reading -> the case variant the oracle computes for it (`case` has no RoPE)."""
    i, a = case.inputs, case.attention

    def at(offset):
        return replace(case, inputs=replace(i, position_offset=offset,
                                            key_position_offset=offset))
    return {"log_floor": case, "off_by_one": at(i.position_offset - 1),
            "log_floor_relative": at(0),
            IGNORED: replace(case, attention=replace(a, temperature=None))}


def attention_temperature_cell(runner, own: Convention | None = None) -> Convention:
    """The temperature reading of the runner's output (the module's docstring)."""
    case, got, note = first_taken(runner, needed_forms(
        runner, "attention-temperature", **_sections(
            temperature={"floor_scale": FLOOR_SCALE, "attn_scale": ATTN_SCALE}),
        mask={"causal": "upper_left"}))
    what = (f"probe_case {case.id}, floor_scale {FLOOR_SCALE}, attn_scale {ATTN_SCALE:g}, "
            f"no rope, causal, positions {OFFSET}..{OFFSET + LENGTH - 1}{note}")
    if not got.answered:
        return unmeasured("attention_temperature", runner, what, got)
    if case.attention.rope is not None:  # a needs form rotating: the variants move rope too
        return Convention("attention_temperature", NOT_PROBED, f"{runner.name}, {what}: "
                          "the form it takes rotates q and k, and the readings are variants "
                          "of the positions")
    candidates = {w: attention(c).output for w, c in temperature_readings(case).items()}
    return _judged("attention_temperature", runner, got.output, candidates,
                   f"{runner.name}, {said(what, got)}")
