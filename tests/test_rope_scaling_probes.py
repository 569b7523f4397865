"""rope_scaling_frequencies and rope_scaling_magnitude (conventions/probes/rope_scaling.py,
rope_magnitude.py), read against toy systems written here: each computes the float64
oracle of the case it is asked with one reading planted (its output rounded to float32,
as a float32 system's is), so each planted port must change the word: YaRN's magnitude
applied twice, llama3's bands swapped, dynamic NTK fixed at construction (and keras-hub's
every-pair division), YaRN's ramp edges never truncated, LongRoPE never switching, a system
that accepts the scaling and ignores it, and one that refuses it."""
from __future__ import annotations

import math

import numpy as np
import pytest

from conformance.contract.runner import NotExpressible, Observation, Runner, Translation
from conformance.conventions.probes import rope_magnitude, rope_scaling
from conformance.conventions.probes.rope_readings import placed, unscaled, with_scaling
from conformance.conventions.probes.table import way_for
from conformance.oracle import rope_scaling as oracle_scaling
from conformance.oracle.reference import attention


def faithful(case):
    return case


class Toy(Runner):
    """A system whose rotary scaling is `plant(case)` (a case variant the oracle computes);
    `refuse` (kinds) it cannot say, `raises` (kinds) it raises on at run time."""

    name, framework, system = "toy.rope_scaling", "toy", "toy"
    features = frozenset({"rope", "rope_scaling"})

    def __init__(self, plant=faithful, refuse=(), raises=()):
        super().__init__()
        self.plant, self.refuse, self.raises = plant, tuple(refuse), tuple(raises)

    def translate(self, case):
        kind = case.attention.rope.scaling.kind
        if kind in self.refuse:
            return NotExpressible(f"the toy has no {kind} scaling")
        return Translation(f"toy(rope_type={kind!r})")

    def run(self, case, translation, data):
        if case.attention.rope.scaling.kind in self.raises:
            raise ValueError("toy: unsupported rope_type")
        out = attention(self.plant(case), data).output
        return Observation(out.astype(np.float32).astype(np.float64))


def kind_is(kind, change):
    """A plant changing only cases of scaling `kind`."""
    return lambda c: change(c) if c.attention.rope.scaling.kind == kind else c


def magnitude_at(placement):
    """A plant putting the asked case's own factor at `placement`, whatever it asked."""
    def plant(case):
        return placed(case, placement, oracle_scaling.magnitude(case.attention.rope))
    return plant


def llama3_swapped(case):
    s = case.attention.rope.scaling
    return with_scaling(case, low_freq_factor=s.high_freq_factor,
                        high_freq_factor=s.low_freq_factor)


def dynamic_static(case):
    d = case.attention.rope.rotary_dim
    return unscaled(case, case.attention.rope.base * case.attention.rope.scaling.factor ** (
        d / (d - 2)))


def dynamic_uniform(case):  # keras-hub: every frequency / factor ** (d / (d - 2))
    d = case.attention.rope.rotary_dim
    return with_scaling(case, kind="linear",
                        factor=case.attention.rope.scaling.factor ** (d / (d - 2)))


def frequencies(runner):
    return rope_scaling.rope_scaling_frequencies_cell(runner)


def magnitude(runner):
    return rope_magnitude.rope_scaling_magnitude_cell(runner)


def test_a_faithful_system_reads_every_type_as_written():
    cell = frequencies(Toy())
    assert cell.value == ("linear, dynamic_per_length, yarn, yarn_untruncated, llama3, "
                          "longrope"), cell.evidence
    assert "not_probed" not in cell.value


@pytest.mark.parametrize("plant, token", [
    (kind_is("dynamic", dynamic_static), "dynamic_static"),
    (kind_is("dynamic", dynamic_uniform), "dynamic_uniform"),
    (kind_is("dynamic", lambda c: with_scaling(c, kind="linear")), "dynamic:linear"),
])
def test_dynamic_per_length_is_told_from_static_and_uniform(plant, token):
    value = frequencies(Toy(plant)).value.split(", ")
    assert token in value and "dynamic_per_length" not in value


def test_llama3_bands_swapped_do_not_read_llama3():
    cell = frequencies(Toy(kind_is("llama3", llama3_swapped)))
    tokens = cell.value.split(", ")
    assert "llama3" not in tokens and "llama3:other" in tokens, cell.evidence


def test_yarn_edges_never_truncated_and_truncate_ignored():
    untruncated = frequencies(Toy(kind_is("yarn", lambda c: with_scaling(c, truncate=False))))
    assert "yarn," not in untruncated.value and "yarn_untruncated" in untruncated.value
    always = frequencies(Toy(kind_is("yarn", lambda c: with_scaling(c, truncate=True))))
    assert "yarn_untruncated:yarn" in always.value.split(", ")


@pytest.mark.parametrize("factors, word", [("short", "longrope_short"),
                                           ("long", "longrope_long")])
def test_longrope_that_never_switches(factors, word):
    def plant(case):
        s = case.attention.rope.scaling
        fixed = s.short_factor if factors == "short" else s.long_factor
        return with_scaling(case, short_factor=fixed, long_factor=fixed)
    tokens = frequencies(Toy(kind_is("longrope", plant))).value.split(", ")
    assert word in tokens and "longrope" not in tokens


def test_a_system_ignoring_the_scaling_and_one_refusing_it():
    assert frequencies(Toy(unscaled)).value == "ignored"
    assert magnitude(Toy(unscaled)).value == "ignored"
    refused = frequencies(Toy(raises=oracle_scaling.ROPE_SCALING_KINDS))
    assert refused.value == "refused" and "unsupported rope_type" in refused.evidence
    some = frequencies(Toy(refuse=("llama3", "longrope"), raises=("linear",)))
    assert some.value == "dynamic_per_length, yarn, yarn_untruncated, linear:refused"


@pytest.mark.parametrize("placement", ["cos_sin", "softmax_scale", "both", "none"])
def test_the_magnitude_is_read_where_it_lands(placement):
    cell = magnitude(Toy(kind_is("yarn", magnitude_at(placement))))
    assert cell.value == placement, cell.evidence
    # the frequencies are read whatever the place of the factor
    assert "yarn, yarn_untruncated" in frequencies(
        Toy(kind_is("yarn", magnitude_at(placement)))).value


def test_magnitude_applied_twice_is_not_cos_sin():
    """A port that multiplies cos and sin by m and the softmax scale by m^2 reads both,
    m^4 on the rotated part of the scores: apart from cos_sin by far more than float32."""
    cell = magnitude(Toy(kind_is("yarn", magnitude_at("both"))))
    assert cell.value == "both"
    m = oracle_scaling.yarn_get_mscale(40)
    assert f"m^2 = {m * m:.4g}" in cell.evidence and abs(m * m - 1.874) < 1e-3


def test_a_system_following_the_case_reads_choosable_and_longrope_when_no_yarn():
    assert magnitude(Toy()).value == "choosable"
    longrope = magnitude(Toy(refuse=("yarn",)))
    assert longrope.value == "cos_sin" and "1.155" in longrope.evidence


def test_full_rotary_width_cannot_part_cos_sin_from_softmax_scale():
    """The reason the magnitude probe rotates 4 of 8 dims: with every dim rotating the two
    places give the same scores, so the probe at full width could only name a tie."""
    case = rope_scaling.ASKS[2]  # yarn
    from conformance.conventions.probes.probing import probe_case
    c = probe_case("full", attention={"qk_head_dim": 8, "v_head_dim": 8, "rope": {
        "style": "half_split", "scaling": case.scaling}})
    m = oracle_scaling.magnitude(c.attention.rope)
    a, b = (attention(placed(c, p, m)).output for p in ("cos_sin", "softmax_scale"))
    assert np.max(np.abs(a - b)) < 1e-12 and not math.isclose(m, 1.0)


def test_the_axes_are_asked_of_runners_declaring_rope_scaling_only():
    assert way_for(Toy(), "rope_scaling_magnitude") is not None
    plain = Toy()
    plain.features = frozenset({"rope"})
    assert way_for(plain, "rope_scaling_frequencies") is None


def test_every_word_the_cell_writes_is_named_in_the_axis_meaning():
    from conformance.conventions.axes import BY_ID

    meaning = BY_ID["rope_scaling_frequencies"].meaning
    assert all(w in meaning for w in rope_scaling.WORDS)


def test_the_headline_and_the_porting_note_name_the_magnitude():
    """The headline groups the systems by where the factor lands; `diff` between a
    cos_sin system and a softmax_scale one gives the factor and its square at factor 40."""
    from conformance.report.findings import ledger_findings
    from conformance.report.porting import differences

    ledger = {"axes": [{"id": "rope_scaling_magnitude", "title": "RoPE scaling"}],
              "systems": [{"id": "hf.llama"}, {"id": "hf.deepseek_v3"}],
              "cells": [{"system": "hf.llama", "axis": "rope_scaling_magnitude",
                         "value": "cos_sin"},
                        {"system": "hf.deepseek_v3", "axis": "rope_scaling_magnitude",
                         "value": "softmax_scale"}]}
    found = ledger_findings(ledger)
    assert [f.key for f in found] == ["rope_scaling_magnitude"]
    assert "cos_sin" in found[0].text and "softmax_scale" in found[0].text
    (diff,), same = differences(ledger, "hf.llama", "hf.deepseek_v3")
    m = oracle_scaling.yarn_get_mscale(40)
    assert f"m = {m:.3f}" in diff.advice and f"m^2 = {m * m:.3f}" in diff.advice
    assert "1.369" in diff.advice and "1.874" in diff.advice and same == 0


class FullWidthOnly(Toy):
    """A system whose rotary table is as wide as the head (no partial rotary width)."""

    def translate(self, case):
        r = case.attention.rope
        if r.rotary_dim < case.attention.qk_head_dim:
            return NotExpressible("the toy rotates the whole head")
        return super().translate(case)


def test_at_full_width_cos_sin_and_softmax_scale_are_named_as_a_tie_not_the_nearest():
    cell = magnitude(FullWidthOnly(kind_is("yarn", magnitude_at("cos_sin"))))
    assert cell.value == "not_probed", cell.evidence
    assert "cos_sin and softmax_scale give the same scores" in cell.evidence
    assert "rotary_dim 8 of 8" in cell.evidence
    # applied twice still parts from either place at full width
    assert magnitude(FullWidthOnly(kind_is("yarn", magnitude_at("both")))).value == "both"
