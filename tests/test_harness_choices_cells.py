"""The cells a harness choice moves (HF's eager vs sdpa attention functions) are measured
under each alternative the runner names, never under the harness's own alone: the fully
masked row, the weights its call returns, the weights under dropout, a 2-D input, the
mask fill.  Planted: a toy whose two choices hand a fully masked row zeros or uniform
weights, return per-head weights or none, refuse a 2-D input or take it; it reads
`depends` with both readings, and the runner's own reading where its choices agree.  A
derived cell from rows run under the harness's choice is another question than the probe's
(no conflict with its `depends`), which the same cell without that mark would give.
"""
from __future__ import annotations

import numpy as np
import pytest

from conformance.conventions.axes import DEPENDS
from conformance.contract.runner import Observation, Runner, Translation
from conformance.conventions.cells import CONFLICT, LedgerCell, from_probe
from conformance.conventions.derived import under_own_choice
from conformance.conventions.ledger import witnessed
from conformance.conventions.probes import table
from conformance.conventions.probes.native_inputs import RAW_PROBES
from conformance.conventions.probes.returned import returned_weights_cell
from conformance.conventions.probes.rows import fully_masked_row_cell
from conformance.oracle.reference import attention
from tests.helpers import require


class ToyImpl(Runner):
    """A system whose attention function is a harness choice `impl`: under "eager" a fully
    masked row gets uniform weights, the per-head weights come back, a 2-D input is
    refused (IndexError, as HF's eager modules raise); under "sdpa" the row is `sdpa_row`'s
    reading, no weights come back, a 2-D input is taken."""

    name, framework, system = "toy.impl", "toy", "toy"
    answers = frozenset({"unbatched", "dropout_weights"})
    impl = "eager"
    harness_choices = {"impl": ("eager", "sdpa")}
    sdpa_row = "zeros"

    def translate(self, case):
        return Translation(f"toy(x, mask, impl={self.impl!r})", {})

    def _computed(self, case, data, drop: float = 0.0):
        exp = attention(case, data)
        word = "uniform" if self.impl == "eager" else self.sdpa_row
        row = exp.output_if_uniform if word == "uniform" else exp.output_if_zeros
        out = np.where(exp.fully_masked[..., None], row, exp.output)
        weights = np.nan_to_num(exp.weights) * (1 - drop)  # dropped rows no longer sum to 1
        return out, (weights if self.impl == "eager" else None)

    def run(self, case, translation, data):
        out, weights = self._computed(case, data)
        return Observation(output=out, attention_weights=weights,
                           weights_returned="none" if weights is None else "per_head")

    def answer(self, case, data, raw):
        if raw.argument == "unbatched":
            if self.impl == "eager":
                raise IndexError("Dimension out of range (expected to be in range of [-2, 1])")
            return Observation(output=self._computed(case, data)[0][0]), "toy(x[0])"
        out, weights = self._computed(case, data, drop=raw.value["rate"])
        return Observation(output=out * 0.5, attention_weights=weights,
                           weights_returned="none" if weights is None else "per_head"), (
            "toy(x, dropout)")


class Agreeing(ToyImpl):
    """Both choices give a fully masked row uniform weights."""

    sdpa_row = "uniform"


def test_a_fully_masked_row_read_differently_under_each_choice_reads_depends():
    cell = fully_masked_row_cell(ToyImpl())
    assert cell.value == DEPENDS, cell.evidence
    assert "under impl='eager' (the runner's): uniform" in cell.evidence
    assert "under impl='sdpa': zeros" in cell.evidence
    cell = fully_masked_row_cell(Agreeing())
    assert cell.value == "uniform", cell.evidence
    assert "under impl='sdpa': the same reading" in cell.evidence


def test_returned_weights_and_their_dropout_are_asked_under_each_choice():
    cell = returned_weights_cell(ToyImpl())
    assert cell.value == DEPENDS, cell.evidence
    assert "(the runner's): per_head" in cell.evidence and "'sdpa': none" in cell.evidence
    dropout = RAW_PROBES["weights_dropout"][1](ToyImpl())
    assert dropout.value == DEPENDS, dropout.evidence
    assert "post_dropout" in dropout.evidence and "not_applicable" in dropout.evidence

    class Unchosen(ToyImpl):
        harness_choices = {}
    assert returned_weights_cell(Unchosen()).value == "per_head"
    assert RAW_PROBES["weights_dropout"][1](Unchosen()).value == "post_dropout"


def test_an_unbatched_input_refused_by_one_choice_only_reads_depends():
    cell = RAW_PROBES["unbatched_input"][1](ToyImpl())
    assert cell.value == DEPENDS, cell.evidence
    assert "(the runner's): refused" in cell.evidence and "'sdpa': accepted" in cell.evidence


def test_the_table_asks_a_runner_with_choices_what_its_rows_read_under_one():
    """returned_weights and fully_masked_row are asked of a runner naming choices (its rows
    run under the harness's own); a runner naming none keeps its fact and its rows."""
    for axis in ("returned_weights", "fully_masked_row"):
        way = table.way_for(ToyImpl(), axis)
        assert way is not None and way.how == table.UNIVERSAL, axis

    class Unchosen(ToyImpl):
        harness_choices = {}
    assert table.way_for(Unchosen(), "returned_weights") is None
    assert table.way_for(Unchosen(), "fully_masked_row") is None


def test_rows_under_the_harness_choice_are_another_question_than_depends():
    probe = from_probe("toy.impl", fully_masked_row_cell(ToyImpl()))
    row = LedgerCell("toy.impl", "fully_masked_row", "uniform", "case-a[toy.impl]: output "
                     "uniform")
    assert witnessed(probe, row).value == CONFLICT  # the defect the mark exists to prevent
    marked = under_own_choice(ToyImpl(), row)
    assert not marked.comparable and "impl='eager'" in marked.evidence
    cell = witnessed(probe, marked)
    assert cell.value == DEPENDS and "another question" in cell.second
    assert under_own_choice(Agreeing(harness_choices={}), row) == row


@pytest.fixture
def hf():
    require("torch", "transformers")


def test_hf_marian_reads_each_attention_function(hf):
    """MarianAttention under eager refuses a 2-D hidden_states (IndexError), returns per-head
    weights and gives a fully masked row uniform weights; under sdpa, what MarianMTModel
    (config) gets, it takes the 2-D input, returns None and gives that row zero weights
    (transformers/integrations/sdpa_attention.py: `return attn_output, None`)."""
    from conformance.runners.hf.marian import HFMarian

    cells = {"unbatched_input": RAW_PROBES["unbatched_input"][1](HFMarian()),
             "returned_weights": returned_weights_cell(HFMarian()),
             "fully_masked_row": fully_masked_row_cell(HFMarian())}
    readings = {"unbatched_input": ("refused", "accepted"),
                "returned_weights": ("per_head", "none"),
                "fully_masked_row": ("uniform", "zeros")}
    for axis, (eager, sdpa) in readings.items():
        cell = cells[axis]
        assert cell.value == DEPENDS, (axis, cell.evidence)
        assert f"(the runner's): {eager}" in cell.evidence, (axis, cell.evidence)
        assert f"attn_implementation='sdpa': {sdpa}" in cell.evidence, (axis, cell.evidence)


def test_hf_attention_function_is_asked_under_each_choice(hf):
    """GPT-J always rotates, so its mask fill is read from its attention function: under
    eager the builder's finfo.min added, under sdpa a boolean torch's SDPA fills."""
    from conformance.conventions.axes import NOT_PROBED, Convention
    from conformance.conventions.probes.attention_function import through_function
    from conformance.runners.hf.gptj import HFGptj

    (cell,) = through_function(HFGptj(), [Convention("mask_fill", NOT_PROBED, "forward")])
    assert cell.value == DEPENDS, cell.evidence
    assert "(the runner's): finfo_min" in cell.evidence, cell.evidence
    assert "attn_implementation='sdpa': -inf" in cell.evidence, cell.evidence
