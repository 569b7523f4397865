"""mrope_layout and vision_rope_layout, owned by the ledger: which rotated pair of a head
takes which position axis, read from a system's output at positions where the axes differ.

With text-only positions (t = h = w on every token) every M-RoPE layout is 1-D RoPE, and
on a grid whose rows equal its columns the two 2-D layouts could be mistaken for each
other; the probes never use those.  Each layout is asked through the runner's own translate
and run (attention.rope.multi_axis, half-split, the whole head rotating) and the output is
read against the float64 oracle under each reading (oracle/multi_axis_rope.py), every
candidate a case variant:
- mrope_layout: 2 heads of 12, base 100, sections [3, 1, 2], causal self-attention over two
  text tokens, a 2 x 2 image (temporal position 2, rows and columns 2..3) and two text
  tokens at 4 and 5, as Qwen2VLModel.get_rope_index places them: `contiguous` (pairs 0-2
  t, 3 h, 4-5 w: Qwen2-VL), `interleaved` (h at pair 1, w at 2 and 5: Qwen3-VL),
  `one_axis` (every pair at the token's sequence position 0..7: 1-D RoPE, the per-axis
  positions collapsed; what a port whose model takes no position ids computes).  Base 100
  turns the first three pairs 1, 0.46 and 0.22 rad per position, so the layouts' outputs
  lie 0.24 or more apart (at base 1e6 contiguous and interleaved part by 0.04 only), and
  sections of three sizes make a port that reads them in another order (t and h swapped:
  [1, 3, 2]) land 0.22 from contiguous and 0.08 from interleaved (equal sections would
  hide it);
- vision_rope_layout: 2 heads of 16, base 1e4, bidirectional over a 2 x 3 grid of patches
  (rows 0..1, columns 0..2): `shared` (row and column both on the ladder of a rope
  head_dim / 2 wide: Qwen2-VL's vision tower), `alternating` (the row on the even, the
  column on the odd frequencies of the full ladder: Pixtral), `one_axis` (1-D RoPE at the
  patch's index 0..5).
`other` where no reading is within NEAR (sections swapped, say), `choosable` where each
asked layout reads itself, `depends` where the asks read other mixtures, `not_probed` on a
tie (every distance quoted) or where no ask was answered for the suite's own reasons,
`refused` with the system's own error.
"""
from __future__ import annotations

from dataclasses import replace

from conformance.conventions.axes import DEPENDS, NOT_PROBED, REFUSED, Convention
from conformance.conventions.probes.asked import documented
from conformance.conventions.probes.forms import first_taken
from conformance.conventions.probes.needs import needed_forms
from conformance.conventions.probes.rope_readings import TIE, grouped, read, unanswered

ONE_AXIS = "one_axis"
CHOOSABLE = "choosable"
# the probe tokens: text 0, 1; a 2 x 2 image at t = 2, rows and columns 2..3; text 4, 5
MROPE_POSITIONS = ([0, 1, 2, 2, 2, 2, 4, 5], [0, 1, 2, 2, 3, 3, 4, 5], [0, 1, 2, 3, 2, 3, 4, 5])
MROPE_LAYOUTS = ("contiguous", "interleaved")
GRID_LAYOUTS = ("shared", "alternating")
GRID = (2, 3)


def mrope_ask(layout: str) -> dict:
    """The probe's sections of the case file for an M-RoPE layout."""
    return {"attention": {"num_heads": 2, "query_features": 24, "qk_head_dim": 12,
                          "v_head_dim": 12, "rope": {"style": "half_split", "base": 100,
                                                     "multi_axis": {
                                                         "kind": "mrope", "layout": layout,
                                                         "sections": [3, 1, 2],
                                                         "positions": [list(p) for p in
                                                                       MROPE_POSITIONS]}}},
            "inputs": {"batch": 1, "query_len": 8, "key_len": 8, "self_attention": True},
            "mask": {"causal": "upper_left"}}


def grid_ask(layout: str) -> dict:
    """The probe's sections of the case file for a 2-D grid layout."""
    n = GRID[0] * GRID[1]
    return {"attention": {"num_heads": 2, "query_features": 32, "qk_head_dim": 16,
                          "v_head_dim": 16, "rope": {"style": "half_split", "base": 1e4,
                                                     "multi_axis": {"kind": "grid_2d",
                                                                    "layout": layout,
                                                                    "grid": list(GRID)}}},
            "inputs": {"batch": 1, "query_len": n, "key_len": n, "self_attention": True},
            "mask": {"causal": "none"}}


def with_layout(case, layout: str | None):
    """`case` with its multi-axis layout changed, or (None) its rope at the sequence
    positions (`one_axis`: the case without multi_axis)."""
    a = case.attention
    multi = None if layout is None else replace(a.rope.multi_axis, layout=layout)
    return replace(case, attention=replace(a, rope=replace(a.rope, multi_axis=multi)))


def candidates(case, layouts: tuple[str, ...]) -> dict[str, list]:
    """reading -> the case variant that gives it."""
    return {**{w: [with_layout(case, w)] for w in layouts}, ONE_AXIS: [with_layout(case, None)]}


def layout_cell(runner, axis: str, layouts: tuple[str, ...], ask, what: str) -> Convention:
    """Each layout asked; the cell from what the answers read (the module's docstring)."""
    picks, figures, reasons, raised = {}, [], {}, ""
    for layout in layouts:
        case, got, note = first_taken(runner, needed_forms(runner, f"{axis}-{layout}",
                                                           **ask(layout)))
        if not got.answered:
            reasons[layout] = unanswered(got)
            raised = raised or got.raised
            continue
        r = read(got.output, candidates(case, layouts), f"{layout} asked")
        picks[layout] = r.word
        figures.append(f"{layout} asked ({got.call}){note}: {r.figures()}"
                       + (f" (alike: {', '.join(r.ties)})" if r.ties else ""))
    evidence = f"{runner.name}, {what}; max |output - oracle| under each reading: " + "; ".join(
        figures + grouped({f"{k} asked": v for k, v in reasons.items()}))
    if not picks:
        word = REFUSED if raised else NOT_PROBED
        return Convention(axis, word, evidence, **(documented(runner, axis) if raised else {}))
    words = set(picks.values())
    if TIE in words:
        return Convention(axis, NOT_PROBED, evidence)
    if len(words) == 1:
        word = words.pop()
    elif all(picks[k] == k for k in picks) and len(picks) > 1:
        word = CHOOSABLE
    else:
        word = DEPENDS
    return Convention(axis, word, evidence, **documented(runner, axis))


def mrope_layout_cell(runner, own: Convention | None = None) -> Convention:
    return layout_cell(runner, "mrope_layout", MROPE_LAYOUTS, mrope_ask,
                       "probe cases mrope_layout-*: 2 heads of 12, base 100, sections [3, 1, 2], "
                       "text 0-1, a 2x2 image at t 2 (rows, columns 2-3), text 4-5")


def vision_rope_layout_cell(runner, own: Convention | None = None) -> Convention:
    return layout_cell(runner, "vision_rope_layout", GRID_LAYOUTS, grid_ask,
                       "probe cases vision_rope_layout-*: 2 heads of 16, a 2x3 patch grid, "
                       "bidirectional")
