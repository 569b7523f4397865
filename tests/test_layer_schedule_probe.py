"""per_layer_rope (conventions/probes/layer_schedule.py), read against toy systems written
here: each computes the float64 oracle of the case it is asked with one port planted (its
output rounded to float32, as a float32 system's is), so each planted port must change the
word: one rope for every layer (either type's), the pattern shifted by one layer (either
way), a system that raises on the schedule, and one that cannot say it."""
from __future__ import annotations

import numpy as np
import pytest

from conformance.contract.runner import NotExpressible, Observation, Runner, Translation
from conformance.conventions.probes import layer_schedule as probe
from conformance.conventions.probes.rope_readings import Reading
from conformance.conventions.probes.table import way_for
from conformance.oracle.layer_schedule import at_layer, kind_at, with_kind
from conformance.oracle.reference import attention


def faithful(case):
    return case


def one_base(kind):
    """A port with one rope for every layer: `kind`'s base and scaling."""
    def plant(case):
        s = case.attention.layer_schedule
        k = kind_at(s, s.layer_types.index(kind))
        for other, _ in s.kinds:
            case = with_kind(case, other, rope_base=k.rope_base, rope_scaling=k.rope_scaling)
        return case
    return plant


def shifted(by):
    """A port reading layer i's type as layer i + by's."""
    return lambda case: at_layer(case, case.attention.layer_schedule.layer + by)


class Toy(Runner):
    """A system whose schedule is `plant(case)` (a case variant the oracle computes)."""

    name, framework, system = "toy.layer_schedule", "toy", "toy"
    features = frozenset({"rope", "layer_schedule", "position_offset"})

    def __init__(self, plant=faithful, refuse=False, raises=False):
        super().__init__()
        self.plant, self.refuse, self.raises = plant, refuse, raises

    def translate(self, case):
        if self.refuse:
            return NotExpressible("the toy has one rope for the whole model")
        return Translation("toy(layer_types=...)")

    def run(self, case, translation, data):
        if self.raises:
            raise ValueError("toy: layer_types not supported")
        out = attention(self.plant(case)).output
        return Observation(out.astype(np.float32).astype(np.float64))


def test_the_table_asks_runners_with_the_feature():
    assert way_for(Toy(), "per_layer_rope") is not None


@pytest.mark.parametrize("plant, word", [
    (faithful, "per_layer"),
    (one_base("full"), "one_base"),  # 1e6 x8 everywhere: the sliding layer is wrong
    (one_base("sliding"), "one_base"),  # 1e4 everywhere: the full layer is wrong
    (shifted(+1), "shifted"),
    (shifted(-1), "shifted"),  # layer 4 reads layer 3 (the same type), layer 5 reads 4
])
def test_each_planted_port_reads_its_word(plant, word):
    cell = probe.layer_schedule_cell(Toy(plant))
    assert cell.value == word, cell.evidence
    assert "layer 5 (full)" in cell.evidence and "layer 4 (sliding)" in cell.evidence


def test_a_raising_system_is_refused_in_its_own_words():
    cell = probe.layer_schedule_cell(Toy(raises=True))
    assert cell.value == "refused" and "layer_types not supported" in cell.evidence


def test_a_runner_that_cannot_say_it_is_not_probed_with_its_reason():
    cell = probe.layer_schedule_cell(Toy(refuse=True))
    assert cell.value == "not_probed" and "one rope for the whole model" in cell.evidence


def test_the_candidates_part_at_the_probe_input():
    """Every candidate of each asked layer lies at least 0.1 from every other (no tie)."""
    for layer in probe.LAYERS:
        case, _, _ = probe.asked_case(Toy(), layer)
        outs = {w: attention(c[0]).output for w, c in probe.candidates(case).items()}
        assert set(outs) == {"per_layer", "one_base", "shifted"}
        words = sorted(outs)
        gaps = [np.abs(outs[a] - outs[b]).max() for a in words for b in words if a < b]
        assert min(gaps) > 0.1, (layer, gaps)


def test_two_layers_reading_two_other_words_are_other():
    def r(word):
        return Reading(word, {}, (), "")

    assert probe.combined({5: r("one_base"), 4: r("shifted")}) == "other"
    assert probe.combined({5: r("per_layer"), 4: r("tie")}) == "not_probed"
    assert probe.combined({5: r("per_layer"), 4: r("per_layer")}) == "per_layer"


def test_a_shift_to_a_layer_of_the_same_type_is_no_candidate():
    """Layer 4's neighbour 3 is sliding too: the shifted reading there is layer 5 alone."""
    case, _, _ = probe.asked_case(Toy(), 4)
    layers = [c.attention.layer_schedule.layer for c in probe.candidates(case)["shifted"]]
    assert layers == [5]


def test_the_headline_and_the_porting_note_name_the_schedule():
    """The headline groups systems by their per_layer_rope word; `diff` between a per_layer
    system and a one_base port gives Gemma 3's pattern and both bases."""
    from conformance.report.findings import ledger_findings
    from conformance.report.porting import differences

    ledger = {"axes": [{"id": "per_layer_rope", "title": "Layer schedules"}],
              "systems": [{"id": "hf.gemma3"}, {"id": "port.one_base"}],
              "cells": [{"system": "hf.gemma3", "axis": "per_layer_rope", "value": "per_layer"},
                        {"system": "port.one_base", "axis": "per_layer_rope",
                         "value": "one_base"}]}
    found = ledger_findings(ledger)
    assert [f.key for f in found] == ["per_layer_rope"]
    assert "per_layer" in found[0].text and "one_base" in found[0].text
    (diff,), same = differences(ledger, "hf.gemma3", "port.one_base")
    assert "(i + 1) % 6" in diff.advice and "1e4" in diff.advice and "1e6" in diff.advice
    assert same == 0
