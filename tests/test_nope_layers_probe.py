"""nope_placement (conventions/probes/nope_layers.py), read against toy systems written here:
each computes the float64 oracle of the case it is asked with one port planted (output
rounded to float32), so each must change the word: the NoPE layers ignored (every layer
rotated), every layer unrotated, the no_rope_layers flags read the other way (the layers
listed rotate, the others do not), a raise; and hf.smollm3 reads per_layer."""
from __future__ import annotations

import importlib.util
from dataclasses import replace

import numpy as np
import pytest

from conformance.contract.runner import Observation, Runner, Translation
from conformance.conventions.probes import nope_layers as probe
from conformance.conventions.probes.table import way_for
from conformance.oracle.reference import attention


def nope_as(layers):
    """A port whose NoPE layers are `layers(schedule)`."""
    def plant(case):
        s = case.attention.layer_schedule
        return replace(case, attention=replace(case.attention, layer_schedule=replace(
            s, nope_layers=tuple(layers(s)))))
    return plant


def faithful(case):
    return case


class Toy(Runner):
    name, framework, system = "toy.nope", "toy", "toy"
    features = frozenset({"rope", "layer_schedule", "position_offset"})

    def __init__(self, plant=faithful, raises=False):
        super().__init__()
        self.plant, self.raises = plant, raises

    def translate(self, case):
        return Translation("toy(no_rope_layers=...)")

    def run(self, case, translation, data):
        if self.raises:
            raise ValueError("toy: no_rope_layers not supported")
        out = attention(self.plant(case)).output
        return Observation(out.astype(np.float32).astype(np.float64))


def test_the_table_asks_runners_with_the_feature():
    assert way_for(Toy(), "nope_placement") is not None


@pytest.mark.parametrize("plant, word", [
    (faithful, "per_layer"),
    (nope_as(lambda s: ()), "rotated_everywhere"),
    (nope_as(lambda s: range(s.num_layers)), "unrotated_everywhere"),
    # transformers' flags [1, 1, 1, 0, 1, 1, 1, 0] (1 = RoPE) read as the NoPE list
    (nope_as(lambda s: [i for i in range(s.num_layers) if i not in s.nope_layers]),
     "inverted"),
])
def test_each_planted_port_reads_its_word(plant, word):
    cell = probe.nope_placement_cell(Toy(plant))
    assert cell.value == word, cell.evidence
    assert "layer 3 (NoPE)" in cell.evidence and "layer 2 (RoPE)" in cell.evidence


def test_a_raising_system_is_refused_in_its_own_words():
    cell = probe.nope_placement_cell(Toy(raises=True))
    assert cell.value == "refused" and "no_rope_layers not supported" in cell.evidence


def test_the_two_readings_part_at_the_probe_input():
    for layer in (probe.NOPE, probe.ROPED):
        case, _, _ = probe.asked_case(Toy(), layer)
        a, b = (attention(c[0]).output for c in probe.candidates(case).values())
        assert np.abs(a - b).max() > 0.1


def test_hf_smollm3_reads_per_layer():
    for m in ("torch", "transformers"):
        if importlib.util.find_spec(m) is None:
            pytest.skip(f"{m} not installed")
    from conformance.runners.hf.smollm3 import HFSmolLM3

    cell = probe.nope_placement_cell(HFSmolLM3())
    assert cell.value == "per_layer", cell.evidence


def test_the_headline_and_the_porting_note_name_the_flags():
    from conformance.report.findings import ledger_findings
    from conformance.report.porting import differences

    ledger = {"axes": [{"id": "nope_placement", "title": "NoPE layers"}],
              "systems": [{"id": "hf.smollm3"}, {"id": "port.inverted"}],
              "cells": [{"system": "hf.smollm3", "axis": "nope_placement", "value": "per_layer"},
                        {"system": "port.inverted", "axis": "nope_placement",
                         "value": "inverted"}]}
    found = ledger_findings(ledger)
    assert [f.key for f in found] == ["nope_placement"]
    assert "per_layer" in found[0].text and "inverted" in found[0].text
    (diff,), same = differences(ledger, "hf.smollm3", "port.inverted")
    assert "1 where the layer uses RoPE" in diff.advice and same == 0


def test_mlx_lm_smollm3_reads_per_layer_and_its_flags_inverted_read_inverted():
    """The real mlx-lm module given the flags the other way round (a port's config) is
    caught: 1 - no_rope_layers makes layers 0-2 NoPE and layer 3 roped."""
    for m in ("mlx", "mlx_lm"):
        if importlib.util.find_spec(m) is None:
            pytest.skip(f"{m} not installed")
    from conformance.runners.mlx.lm_smollm3 import MlxLmSmolLM3

    class Inverted(MlxLmSmolLM3):
        def translate(self, case):
            t = super().translate(case)
            flags = [1 - f for f in t.plan["no_rope_layers"]]
            return type(t)(t.call, {**t.plan, "no_rope_layers": flags})

    assert probe.nope_placement_cell(MlxLmSmolLM3()).value == "per_layer"
    cell = probe.nope_placement_cell(Inverted())
    assert cell.value == "inverted", cell.evidence
