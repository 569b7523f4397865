"""attention.rope.multi_axis: rotary positions with more than one axis, read and validated.

A multi-axis rope gives each rotated pair i of a head one axis (t, h, w for M-RoPE; h, w
for a 2-D vision grid) and turns it by that axis's position times the pair's inverse
frequency (oracle/multi_axis_rope.py computes it).  Which pair takes which axis is the
convention the families differ on:

    kind: mrope     sections: [t, h, w]   rotary pairs per axis (Qwen2-VL's mrope_section,
                                          summing to rotary_dim / 2; [16, 24, 24] at 128)
                    layout: contiguous    pairs 0..t-1 take t, the next h take h, the last
                                          w take w (transformers/models/qwen2_vl/
                                          modeling_qwen2_vl.py recomposition_frequencies)
                    layout: interleaved   pair i takes h where i % 3 == 1 and i < 3 h, w
                                          where i % 3 == 2 and i < 3 w, t otherwise
                                          (qwen3_vl/modeling_qwen3_vl.py, stride 3)
                    positions: [[t...], [h...], [w...]]      per query token (3, T),
                                          or one such block per batch item (B, 3, T)
                    key_positions: [[t...], [h...], [w...]]  per key (3, S); default the
                                          query positions (self-attention)
    kind: grid_2d   grid: [rows, cols]    patches in row-major order (T = S = rows x cols),
                                          positions (row, col); the first rotary_dim / 4
                                          pairs take the row, the rest the column
                    layout: shared        both halves take the frequencies of a
                                          rotary_dim / 2 wide rope (qwen2_vl
                                          Qwen2VLVisionRotaryEmbedding)
                    layout: alternating   the row takes the even, the column the odd
                                          frequencies of the rotary_dim wide ladder
                                          (pixtral/modeling_pixtral.py, inv_freq[0::2],
                                          inv_freq[1::2])

With text-only positions (t = h = w for every token) every M-RoPE layout is 1-D RoPE: a
case that is to part the layouts gives image-like positions where the axes differ.  The
positions are the case's own, so inputs.position_offset stays 0 (far positions are
written in the lists); frequency scaling is not combined with multiple axes here.
"""
from __future__ import annotations

import reprlib
from dataclasses import dataclass, replace
from typing import Any, Mapping

KINDS = ("mrope", "grid_2d")
MROPE_LAYOUTS = ("contiguous", "interleaved")  # Qwen2-VL, Qwen3-VL
GRID_LAYOUTS = ("shared", "alternating")  # Qwen2-VL's vision tower, Pixtral
AXIS_NAMES = {"mrope": ("t", "h", "w"), "grid_2d": ("row", "col")}
MAX_POSITION = 2**31 - 1  # positions fit an int32 in every framework
FIELDS = {"mrope": {"kind", "sections", "layout", "positions", "key_positions"},
          "grid_2d": {"kind", "grid", "layout"}}


def short(value: Any) -> str:
    """A bounded repr (this module imports nothing of case/model.py, which names it)."""
    return reprlib.repr(value)


@dataclass(frozen=True)
class MultiAxisRope:
    """Per-axis positions and which axis each rotated pair takes (the module's docstring).
    `positions` is (axes, T), `key_positions` (axes, S); `sections` is M-RoPE's pairs per
    axis (None for a grid), `grid` a grid's (rows, cols) (None for M-RoPE); `items`, where
    each batch item has its own positions (Qwen2-VL's (3, B, T) ids: a batch of prompts whose
    images sit at other places), is (B, axes, T) and `positions` is item 0's."""

    kind: str  # one of KINDS
    layout: str  # one of MROPE_LAYOUTS (mrope) or GRID_LAYOUTS (grid_2d)
    positions: tuple[tuple[int, ...], ...]
    key_positions: tuple[tuple[int, ...], ...]
    sections: tuple[int, ...] | None = None
    grid: tuple[int, int] | None = None
    items: tuple[tuple[tuple[int, ...], ...], ...] | None = None


def interleaved_axes(sections: tuple[int, ...], pairs: int) -> tuple[int, ...]:
    """The axis of each pair under the stride-3 layout (Qwen3-VL's apply_interleaved_mrope):
    h where i % 3 == 1 and i < 3 sections[1], w where i % 3 == 2 and i < 3 sections[2]."""
    out = []
    for i in range(pairs):
        if i % 3 == 1 and i < 3 * sections[1]:
            out.append(1)
        elif i % 3 == 2 and i < 3 * sections[2]:
            out.append(2)
        else:
            out.append(0)
    return tuple(out)


def _rows(r, value: Any, dotted: str, axes: int, length: int) -> tuple[tuple[int, ...], ...]:
    """(axes, length) non-negative integer positions."""
    if (not isinstance(value, (list, tuple)) or len(value) != axes
            or not all(isinstance(row, (list, tuple)) and len(row) == length for row in value)):
        raise r.fail(dotted, f"must be {axes} lists (t, h, w) of {length} integer positions "
                     f"each, one per token, got {short(value)}")
    for a, row in enumerate(value):
        for i, p in enumerate(row):
            if isinstance(p, bool) or not isinstance(p, int) or not 0 <= p <= MAX_POSITION:
                raise r.fail(f"{dotted}[{a}][{i}]", "must be an integer position in "
                             f"0..2**31 - 1, got {short(p)}")
    return tuple(tuple(row) for row in value)


def _sections(r, s: Mapping, layout: str, pairs: int) -> tuple[int, ...]:
    at = "attention.rope.multi_axis.sections"
    value = s.get("sections")
    if (not isinstance(value, (list, tuple)) or len(value) != 3
            or not all(isinstance(x, int) and not isinstance(x, bool) and x >= 0 for x in value)):
        raise r.fail(at, "must be 3 non-negative integers [t, h, w]: rotary pairs per axis "
                     f"(Qwen2-VL's mrope_section), got {short(value)}")
    if sum(value) != pairs:
        raise r.fail(at, f"must sum to rotary_dim / 2 = {pairs} (one axis per rotated pair), "
                     f"got {list(value)} summing to {sum(value)}")
    if layout == "interleaved":
        got = interleaved_axes(tuple(value), pairs)
        counts = [got.count(a) for a in range(3)]
        if counts != list(value):
            raise r.fail(at, f"the interleaved layout (h at i % 3 == 1, w at i % 3 == 2, below "
                         f"3 x its section) gives {counts} pairs to t, h, w over {pairs} pairs, "
                         f"not {list(value)}: give sections it can lay out")
    return tuple(value)


def _items(r, value: Any, inp) -> tuple | None:
    """(B, 3, T) positions where the file gives one (3, T) block per batch item, else None."""
    at = "attention.rope.multi_axis.positions"
    per_item = (isinstance(value, (list, tuple)) and value and isinstance(value[0], (list, tuple))
                and value[0] and isinstance(value[0][0], (list, tuple)))
    if not per_item:
        return None
    if len(value) != inp.batch:
        raise r.fail(at, f"per-item positions must give one block of 3 lists per batch item "
                     f"({inp.batch}), got {len(value)}")
    if not inp.self_attention:
        raise r.fail(at, "per-item positions are self-attention's (keys at the queries' "
                     "positions); give one block of 3 lists for every item and key_positions")
    return tuple(_rows(r, v, f"{at}[{b}]", 3, inp.query_len) for b, v in enumerate(value))


def _mrope(r, s: Mapping, inp, pairs: int) -> MultiAxisRope:
    at = "attention.rope.multi_axis"
    layout = r.choice(s, "layout", f"{at}.layout", "contiguous", MROPE_LAYOUTS)
    sections = _sections(r, s, layout, pairs)
    if "positions" not in s:
        raise r.fail(f"{at}.positions", "is required: 3 lists (t, h, w) of query_len "
                     "positions; text tokens have t = h = w, image patches differ")
    items = _items(r, s["positions"], inp)
    if items is not None:
        return MultiAxisRope("mrope", layout, items[0], items[0], sections=sections,
                             items=items)
    queries = _rows(r, s["positions"], f"{at}.positions", 3, inp.query_len)
    if s.get("key_positions") is not None:
        keys = _rows(r, s["key_positions"], f"{at}.key_positions", 3, inp.key_len)
        if inp.self_attention and keys != queries:
            raise r.fail(f"{at}.key_positions", "self-attention has one sequence: its keys "
                         "are its queries, at the same positions; leave key_positions out")
    elif inp.key_len != inp.query_len or not inp.self_attention:
        raise r.fail(f"{at}.key_positions", f"is required where keys are not the queries "
                     f"(key_len {inp.key_len}, query_len {inp.query_len}): 3 lists of "
                     "key_len positions")
    else:
        keys = queries
    return MultiAxisRope("mrope", layout, queries, keys, sections=sections)


def _grid(r, s: Mapping, inp, rotary_dim: int) -> MultiAxisRope:
    at = "attention.rope.multi_axis"
    layout = r.choice(s, "layout", f"{at}.layout", "", GRID_LAYOUTS)
    value = s.get("grid")
    if (not isinstance(value, (list, tuple)) or len(value) != 2 or not all(
            isinstance(x, int) and not isinstance(x, bool) and x >= 1 for x in value)):
        raise r.fail(f"{at}.grid", f"must be [rows, cols], two positive integers, got "
                     f"{short(value)}")
    rows, cols = value
    if inp.query_len != rows * cols or inp.key_len != rows * cols:
        raise r.fail(f"{at}.grid", f"rows x cols = {rows * cols} patches must equal "
                     f"query_len ({inp.query_len}) and key_len ({inp.key_len})")
    if rotary_dim % 4:
        raise r.fail("attention.rope.rotary_dim", "a 2-D grid gives half the pairs to rows "
                     f"and half to columns: rotary_dim must be a multiple of 4, got {rotary_dim}")
    idx = range(rows * cols)
    positions = (tuple(i // cols for i in idx), tuple(i % cols for i in idx))
    return MultiAxisRope("grid_2d", layout, positions, positions, grid=(rows, cols))


def read(r, att, inp, mask):
    """`att` with attention.rope.multi_axis read; `mask` unchanged."""
    at = "attention.rope.multi_axis"
    raw = r.section("attention")["rope"]["multi_axis"]
    if not isinstance(raw, Mapping):
        raise r.fail(at, "must be a mapping, e.g. {kind: mrope, sections: [2, 1, 1], "
                     f"positions: [[...], [...], [...]]}}, got {short(raw)}")
    kind = r.choice(raw, "kind", f"{at}.kind", "", KINDS)
    unknown = sorted(set(raw) - FIELDS[kind])
    if unknown:
        raise r.fail(f"{at}.{unknown[0]}", f"unknown field for kind {kind}; valid: "
                     f"{sorted(FIELDS[kind])}")
    rope = att.rope
    if rope.scaling is not None:
        raise r.fail("attention.rope.scaling", "frequency scaling is not combined with "
                     "multi_axis here: give one or the other")
    if inp.position_offset or inp.key_position_offset:
        raise r.fail("inputs.position_offset", "multi_axis gives every position itself: "
                     "leave the offsets out and write far positions in the lists")
    if kind == "mrope":
        multi = _mrope(r, raw, inp, rope.rotary_dim // 2)
    else:
        multi = _grid(r, raw, inp, rope.rotary_dim)
    return replace(att, rope=replace(rope, multi_axis=multi)), mask
