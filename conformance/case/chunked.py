"""Llama 4's chunked attention and attention temperature, read and validated.

    mask.chunk: C                 positions split into blocks of C by absolute position
                                  (inputs.position_offset + t); a query attends causally
                                  within its own block only
    attention.temperature: {floor_scale: F, attn_scale: a}
                                  each query at absolute position p is multiplied by
                                  log1p(floor((p + 1) / F)) * a + 1 (exactly 1 below
                                  position F - 1)

Both are transformers' Llama 4 (transformers/models/llama4/modeling_llama4.py,
Llama4TextAttention.forward#L360-L367: `torch.log1p(torch.floor((positions.float() + 1.0) /
self.floor_scale)) * self.attn_scale + 1.0` on the query, on the layers without RoPE when
`attn_temperature_tuning`; transformers/masking_utils.py `chunked_overlay` ANDed with
`causal_mask_function` in `chunked_causal_mask_function`#L159-L163).  Llama 4's defaults
(Llama4TextConfig: floor_scale 8192, attn_scale 0.1) fill the fields a case leaves out.

A chunk is a causal pattern of one sequence: the case is self-attention with a causal mask
(Llama 4's chunked layers are causal: create_chunked_causal_mask builds no other), and no
mask.window beside it (a layer is chunked or windowed: transformers' layer_types name one
per layer).  `r` is loader._Reader: `r.fail` names file, case and field.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, replace
from typing import Any, Mapping

from conformance.case.bounded import short

FLOOR_SCALE, ATTN_SCALE = 8192, 0.1  # Llama4TextConfig's defaults
MAX_ATTN_SCALE = 1e3  # a query multiplied by more than a thousand per log step is a typo
TEMPERATURE_FIELDS = ("floor_scale", "attn_scale")



def as_float(value: Any) -> float:
    """`value` as a float, NaN when it is not a number (case/numbers.py's rule, not
    imported: that module imports case/model.py)."""
    try:
        return math.nan if isinstance(value, bool) else float(value)
    except (TypeError, ValueError, OverflowError):
        return math.nan


@dataclass(frozen=True)
class AttentionTemperature:
    """Llama 4's query temperature: q at absolute position p times
    log1p(floor((p + 1) / floor_scale)) * attn_scale + 1."""

    floor_scale: int  # positions per step of the floor (Llama 4: 8192)
    attn_scale: float  # the weight of the log term (Llama 4: 0.1)


def _temperature(r, value: Any) -> AttentionTemperature:
    at = "attention.temperature"
    if not isinstance(value, Mapping):
        raise r.fail(at, "must be a mapping {floor_scale: F, attn_scale: a} (Llama 4: "
                     f"{{floor_scale: {FLOOR_SCALE}, attn_scale: {ATTN_SCALE}}}), got "
                     f"{short(value)}")
    unknown = sorted(set(value) - set(TEMPERATURE_FIELDS))
    if unknown:
        raise r.fail(f"{at}.{unknown[0]}", f"unknown field; valid: {list(TEMPERATURE_FIELDS)}")
    floor_scale = r.integer(value, "floor_scale", f"{at}.floor_scale", FLOOR_SCALE, minimum=1)
    a = as_float(value.get("attn_scale", ATTN_SCALE))
    if not (math.isfinite(a) and 0 <= a <= MAX_ATTN_SCALE):
        raise r.fail(f"{at}.attn_scale", f"must be a finite number in [0, {MAX_ATTN_SCALE:g}] "
                     f"(the weight of log1p(floor((p + 1) / floor_scale))), got "
                     f"{short(value.get('attn_scale'))}")
    return AttentionTemperature(floor_scale, a)


def _chunk(r, inp, mask) -> int:
    size = r.integer(r.section("mask"), "chunk", "mask.chunk", minimum=1)
    if not inp.self_attention:
        raise r.fail("mask.chunk", "chunks are blocks of one sequence's positions: set "
                     "inputs.self_attention: true")
    if mask.causal == "none":
        raise r.fail("mask.chunk", "a chunked layer is causal within its block (Llama 4's "
                     "create_chunked_causal_mask ANDs the chunks with the causal mask): set "
                     "mask.causal: upper_left")
    if mask.window is not None:
        raise r.fail("mask.chunk", "give mask.chunk or mask.window, not both: a layer is "
                     "chunked or windowed (transformers' layer_types: chunked_attention or "
                     "sliding_attention)")
    return size


def read(r, att, inp, mask):
    """(att with attention.temperature, mask with mask.chunk), each where the case names it."""
    sec = r.section("attention")
    if sec.get("temperature") is not None:
        att = replace(att, temperature=_temperature(r, sec["temperature"]))
    if r.section("mask").get("chunk") is not None:
        mask = replace(mask, chunk=_chunk(r, inp, mask))
    return att, mask
