"""attention.rope.multi_axis (case/multi_axis_rope.py), its float64 oracle
(oracle/multi_axis_rope.py) and the ledger's mrope_layout / vision_rope_layout probes
(conventions/probes/multi_axis.py), read against toy systems written here: each computes the
oracle of the case it is asked with one reading planted (its output rounded to float32),
so each planted port must change the word: M-RoPE's t and h sections swapped, the
interleaved layout computed as contiguous, the positions collapsed to 1-D, the 2-D halves
on the other family's frequencies or crossed, a refusal and a raise."""
from __future__ import annotations

import re
from dataclasses import replace

import numpy as np
import pytest

from conformance.case.model import CaseError
from conformance.contract.runner import NotExpressible, Observation, Runner, Translation
from conformance.conventions.probes import multi_axis as probe
from conformance.conventions.probes.table import way_for
from conformance.oracle import multi_axis_rope as oracle
from conformance.oracle.reference import attention

from .helpers import make_case

POSITIONS = [[0, 1, 2, 2, 2, 2, 4, 5], [0, 1, 2, 2, 3, 3, 4, 5], [0, 1, 2, 3, 2, 3, 4, 5]]


def mrope(layout="contiguous", sections=(2, 2, 2), positions=POSITIONS, **extra):
    return make_case(attention={"num_heads": 2, "query_features": 24, "bias": False, "rope": {
        "style": "half_split", "base": 1e6, "multi_axis": {
            "kind": "mrope", "layout": layout, "sections": list(sections),
            "positions": positions, **extra}}},
        inputs={"batch": 1, "query_len": len(positions[0]), "self_attention": True},
        mask={"causal": "upper_left"})


def grid(layout="alternating", rows=2, cols=3, head=16):
    return make_case(attention={"num_heads": 2, "query_features": 2 * head, "bias": False,
                                "rope": {"style": "half_split", "multi_axis": {
                                    "kind": "grid_2d", "layout": layout, "grid": [rows, cols]}}},
                     inputs={"batch": 1, "query_len": rows * cols, "self_attention": True},
                     mask={"causal": "none"})


# -- the case field ------------------------------------------------------------------------

@pytest.mark.parametrize("change, field, words", [
    ({"sections": [2, 2, 1]}, "sections", "sum to rotary_dim / 2 = 6"),
    ({"sections": [1, 3, 2], "layout": "interleaved"}, "sections", "gives [2, 2, 2]"),
    ({"positions": POSITIONS[:2]}, "positions", "3 lists"),
    ({"positions": [POSITIONS[0], POSITIONS[1], POSITIONS[2][:7]]}, "positions", "3 lists"),
    ({"positions": [POSITIONS[0], POSITIONS[1], [0, 1, 2, -3, 2, 3, 4, 5]]},
     "positions[2][3]", "integer position"),
    ({"key_positions": [[0] * 8] * 3}, "key_positions", "self-attention has one sequence"),
    ({"grid": [2, 4]}, "grid", "unknown field for kind mrope"),
    ({"layout": "shared"}, "layout", "must be one of"),
])
def test_each_mrope_field_is_checked_with_the_fix_named(change, field, words):
    raw = {"kind": "mrope", "layout": "contiguous", "sections": [2, 2, 2],
           "positions": POSITIONS, **change}
    with pytest.raises(CaseError) as err:
        make_case(attention={"num_heads": 2, "query_features": 24, "rope": {
            "style": "half_split", "multi_axis": raw}},
            inputs={"batch": 1, "query_len": 8, "self_attention": True})
    assert f"attention.rope.multi_axis.{field}" in str(err.value) and words in str(err.value)


def test_grid_and_combination_errors_name_the_field():
    with pytest.raises(CaseError, match="rows x cols = 4 patches must equal query_len"):
        make_case(attention={"num_heads": 2, "query_features": 32, "rope": {
            "style": "half_split", "multi_axis": {"kind": "grid_2d", "layout": "shared",
                                                  "grid": [2, 2]}}},
                  inputs={"batch": 1, "query_len": 6, "self_attention": True})
    with pytest.raises(CaseError, match="rotary_dim must be a multiple of 4"):
        make_case(attention={"num_heads": 2, "query_features": 12, "rope": {
            "style": "half_split", "multi_axis": {"kind": "grid_2d", "layout": "shared",
                                                  "grid": [2, 3]}}},
                  inputs={"batch": 1, "query_len": 6, "self_attention": True})
    with pytest.raises(CaseError, match="inputs.position_offset"):
        make_case(attention={"num_heads": 2, "query_features": 24, "rope": {
            "style": "half_split", "multi_axis": {"kind": "mrope", "sections": [2, 2, 2],
                                                  "positions": POSITIONS}}},
                  inputs={"batch": 1, "query_len": 8, "self_attention": True,
                          "position_offset": 100})
    with pytest.raises(CaseError, match="attention.rope.scaling"):
        make_case(attention={"num_heads": 2, "query_features": 24, "rope": {
            "style": "half_split", "scaling": {"type": "linear", "factor": 2},
            "multi_axis": {"kind": "mrope", "sections": [2, 2, 2], "positions": POSITIONS}}},
                  inputs={"batch": 1, "query_len": 8, "self_attention": True})


def test_the_field_is_a_feature_and_moves_the_fingerprint():
    a, b = mrope(), mrope(sections=(2, 1, 3))
    assert "multi_axis_rope" in a.features and a.fingerprint() != b.fingerprint()
    assert a.attention.rope.multi_axis.key_positions == a.attention.rope.multi_axis.positions


# -- the oracle ----------------------------------------------------------------------------

def angles_by_hand(kind, layout, sections, positions, d, base):
    """The angle of every pair written out from the sources' loops, not from pair_plan."""
    pairs, out = d // 2, []
    for i in range(pairs):
        if kind == "mrope" and layout == "contiguous":
            axis = 0 if i < sections[0] else 1 if i < sections[0] + sections[1] else 2
            f = base ** (-2 * i / d)
        elif kind == "mrope":
            axis = 1 if i % 3 == 1 and i < 3 * sections[1] else (
                2 if i % 3 == 2 and i < 3 * sections[2] else 0)
            f = base ** (-2 * i / d)
        else:
            axis, j = (0, i) if i < pairs // 2 else (1, i - pairs // 2)
            f = (base ** (-2 * j / (d // 2)) if layout == "shared"
                 else base ** (-2 * (2 * j + axis) / d))
        out.append([positions[axis][t] * f for t in range(len(positions[0]))])
    return np.asarray(out).T


@pytest.mark.parametrize("layout, sections", [("contiguous", (2, 2, 2)),
                                              ("interleaved", (2, 2, 2)),
                                              ("contiguous", (3, 1, 2))])
def test_mrope_angles_are_the_sources_loops(layout, sections):
    m = mrope(layout, sections).attention.rope.multi_axis
    got = oracle.angles(m, m.positions, 12, 1e6)
    want = angles_by_hand("mrope", layout, sections, POSITIONS, 12, 1e6)
    np.testing.assert_allclose(got, want, rtol=1e-15, atol=0)


@pytest.mark.parametrize("layout", ["shared", "alternating"])
def test_grid_angles_are_the_sources_loops(layout):
    m = grid(layout).attention.rope.multi_axis
    assert m.positions == ((0, 0, 0, 1, 1, 1), (0, 1, 2, 0, 1, 2))
    want = angles_by_hand("grid_2d", layout, None, m.positions, 16, 1e4)
    np.testing.assert_allclose(oracle.angles(m, m.positions, 16, 1e4), want, rtol=1e-15)


@pytest.mark.parametrize("layout", ["contiguous", "interleaved"])
def test_text_only_positions_collapse_every_layout_to_1d_rope(layout):
    text = [list(range(8))] * 3
    case = mrope(layout, positions=text)
    plain = probe.with_layout(case, None)
    np.testing.assert_allclose(attention(case).output, attention(plain).output, atol=1e-13)


def test_image_positions_part_the_layouts():
    outs = {w: attention(probe.with_layout(mrope(), w)).output
            for w in ("contiguous", "interleaved")}
    outs["one_axis"] = attention(probe.with_layout(mrope(), None)).output
    assert min(np.abs(outs[a] - outs[b]).max() for a, b in
               (("contiguous", "interleaved"), ("contiguous", "one_axis"),
                ("interleaved", "one_axis"))) > 1e-2


def per_item(items, batch=None):
    return make_case(attention={"num_heads": 2, "query_features": 24, "bias": False, "rope": {
        "style": "half_split", "base": 100, "multi_axis": {
            "kind": "mrope", "sections": [3, 1, 2], "positions": items}}},
        inputs={"batch": batch or len(items), "query_len": 8, "self_attention": True},
        mask={"causal": "upper_left"})


def test_each_batch_item_turns_by_its_own_positions():
    """Item b of a (B, 3, T) case is the oracle of item b alone (its inputs, its rows); the
    port that broadcasts item 0's rows to the batch agrees on item 0 only."""
    from conformance.oracle.canonical import case_data

    text = [list(range(8))] * 3
    case = per_item([text, POSITIONS])
    data = case_data(case)
    out = attention(case, data).output
    assert case.attention.rope.multi_axis.items[1] == tuple(map(tuple, POSITIONS))
    for b, rows in enumerate((text, POSITIONS)):
        alone = make_case(attention={"num_heads": 2, "query_features": 24, "bias": False,
                                     "rope": {"style": "half_split", "base": 100, "multi_axis": {
                                         "kind": "mrope", "sections": [3, 1, 2],
                                         "positions": rows}}},
                          inputs={"batch": 1, "query_len": 8, "self_attention": True},
                          mask={"causal": "upper_left"})
        inputs = replace(data.inputs, **{n: getattr(data.inputs, n)[b:b + 1] for n in (
            "query", "key", "value", "allowed", "fully_masked") if getattr(
                data.inputs, n) is not None})
        want = attention(alone, replace(data, inputs=inputs)).output
        np.testing.assert_allclose(out[b:b + 1], want, atol=1e-13)
    m = case.attention.rope.multi_axis
    broadcast = attention(replace(case, attention=replace(case.attention, rope=replace(
        case.attention.rope, multi_axis=replace(m, items=(m.items[0], m.items[0]))))),
        data).output
    assert np.abs(broadcast[0] - out[0]).max() < 1e-13
    assert np.abs(broadcast[1] - out[1]).max() > 1e-2


def test_per_item_positions_are_checked():
    with pytest.raises(CaseError, match="one block of 3 lists per batch item \\(3\\), got 2"):
        per_item([POSITIONS, POSITIONS], batch=3)
    with pytest.raises(CaseError, match=r"positions\[1\]"):
        per_item([POSITIONS, POSITIONS[:2]])


def test_a_far_image_costs_what_a_near_one_costs():
    far = [[p + 30000 for p in row] for row in POSITIONS]
    a, b = attention(mrope(positions=far)), attention(mrope())
    assert a.output.shape == b.output.shape and np.isfinite(a.output).all()


# -- the probes, against planted toys ------------------------------------------------------

def faithful(case):
    return case


def sections_swapped(case):
    """t and h sections swapped: the port reads mrope_section in another order."""
    m = case.attention.rope.multi_axis
    if m.kind != "mrope":
        return case
    t, h, w = m.sections
    moved = replace(m, sections=(h, t, w), positions=(m.positions[1], m.positions[0],
                                                      m.positions[2]),
                    key_positions=(m.key_positions[1], m.key_positions[0],
                                   m.key_positions[2]))
    a = case.attention
    return replace(case, attention=replace(a, rope=replace(a.rope, multi_axis=moved)))


def as_layout(layout):
    return lambda case: probe.with_layout(case, layout)


def columns_first(case):
    """The 2-D halves crossed: the column on the first half, the row on the second."""
    m = case.attention.rope.multi_axis
    moved = replace(m, positions=m.positions[::-1], key_positions=m.key_positions[::-1])
    a = case.attention
    return replace(case, attention=replace(a, rope=replace(a.rope, multi_axis=moved)))


class Toy(Runner):
    """A system computing `plant(case)`; it takes the layouts in `takes` (None: all) and
    raises on run where `raises`."""

    name, framework, system = "toy.multi_axis", "toy", "toy"
    features = frozenset({"rope", "multi_axis_rope"})

    def __init__(self, plant=faithful, takes=None, raises=False):
        super().__init__()
        self.plant, self.takes, self.raises = plant, takes, raises

    def translate(self, case):
        m = case.attention.rope.multi_axis
        if self.takes is not None and m.layout not in self.takes:
            return NotExpressible(f"the toy has no {m.layout} layout")
        return Translation(f"toy(layout={m.layout!r})")

    def run(self, case, translation, data):
        if self.raises:
            raise ValueError("toy: MRoPE currently only supports 3 sections")
        out = attention(self.plant(case), data).output
        return Observation(out.astype(np.float32).astype(np.float64))


def test_the_ledger_asks_a_runner_declaring_the_feature():
    assert way_for(Toy(), "mrope_layout") is not None
    assert way_for(Toy(), "vision_rope_layout") is not None


@pytest.mark.parametrize("toy, word", [
    (Toy(takes=("contiguous",)), "contiguous"),
    (Toy(takes=("interleaved",)), "interleaved"),
    (Toy(), "choosable"),
    (Toy(as_layout(None)), "one_axis"),
    (Toy(sections_swapped, takes=("contiguous",)), "other"),
    (Toy(as_layout("contiguous"), takes=("interleaved",)), "contiguous"),
    (Toy(as_layout("contiguous")), "contiguous"),
    (Toy(takes=()), "not_probed"),
    (Toy(raises=True), "refused"),
])
def test_mrope_layout_reads_each_planted_port(toy, word):
    cell = probe.mrope_layout_cell(toy)
    assert cell.value == word, cell.evidence
    if word not in ("not_probed", "refused"):
        assert "one_axis" in cell.evidence and "asked (toy(layout=" in cell.evidence


def distance(evidence: str, word: str) -> float:
    return float(re.search(rf"{word} ([0-9.e+-]+)", evidence).group(1))


def test_swapped_sections_and_interleaved_as_contiguous_are_caught_by_distance():
    """The planted ports lie far past NEAR from the reading they claim (t and h swapped,
    from contiguous; contiguous, from interleaved) at the probe's base 100, sections
    [3, 1, 2]."""
    swapped = probe.mrope_layout_cell(Toy(sections_swapped, takes=("contiguous",)))
    assert distance(swapped.evidence, "contiguous") > 0.1, swapped.evidence
    crossed = probe.mrope_layout_cell(Toy(as_layout("contiguous"), takes=("interleaved",)))
    assert distance(crossed.evidence, "interleaved") > 0.1, crossed.evidence


@pytest.mark.parametrize("toy, word", [
    (Toy(takes=("alternating",)), "alternating"),
    (Toy(takes=("shared",)), "shared"),
    (Toy(as_layout("shared"), takes=("alternating",)), "shared"),
    (Toy(as_layout(None), takes=("alternating",)), "one_axis"),
    (Toy(columns_first, takes=("alternating",)), "other"),
])
def test_vision_rope_layout_reads_each_planted_port(toy, word):
    cell = probe.vision_rope_layout_cell(toy)
    assert cell.value == word, cell.evidence


def test_the_headline_and_the_porting_notes_name_the_layouts():
    """The headline groups the systems by layout; `diff` between a contiguous and an
    interleaved system names the pairs each axis takes, between Pixtral and Qwen2-VL's
    vision tower the column half's frequency ratio."""
    from conformance.report.findings import ledger_findings
    from conformance.report.porting import differences

    cells = [("hf.qwen2_vl", "mrope_layout", "contiguous"),
             ("hf.qwen3_vl", "mrope_layout", "interleaved"),
             ("mlx_lm.qwen2_vl", "mrope_layout", "one_axis"),
             ("hf.qwen2_vl", "vision_rope_layout", "shared"),
             ("hf.qwen3_vl", "vision_rope_layout", "alternating")]
    ledger = {"axes": [{"id": "mrope_layout", "title": "M-RoPE"},
                       {"id": "vision_rope_layout", "title": "2-D"}],
              "systems": [{"id": s} for s in ("hf.qwen2_vl", "hf.qwen3_vl", "mlx_lm.qwen2_vl")],
              "cells": [{"system": s, "axis": a, "value": v} for s, a, v in cells]}
    found = {f.key: f.text for f in ledger_findings(ledger)}
    assert all(w in found["mrope_layout"] for w in ("contiguous", "interleaved", "one_axis"))
    assert "alternating" in found["vision_rope_layout"]
    diffs, _ = differences(ledger, "hf.qwen2_vl", "hf.qwen3_vl")
    advice = {d.axis: d.advice for d in diffs}
    assert "h on pairs 1, 4, ..., 58 and w on 2, 5, ..., 59" in advice["mrope_layout"]
    assert "t on pairs 0-15, h on 16-39, w on 40-63" in advice["mrope_layout"]
    assert f"{1e4 ** (-2 / 64):.3f} times as fast" in advice["vision_rope_layout"]
