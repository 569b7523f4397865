"""The ledger's judges of mixed_dtype, unbatched_input and weights_dropout
(conventions/probes/native_inputs.py), fed planted answers: a runner that only passes the
native call and reports what the system gave (its output's dtype, its output without the
batch axis, its returned weights), no framework needed.  Each planted answer is a defect
or a behaviour the probe exists to tell apart."""
from __future__ import annotations

import numpy as np
import pytest

from conformance.contract.api_facts import ApiFact
from conformance.contract.runner import NotExpressible, Observation, Runner, harness_limit
from conformance.conventions.probes import RAW_PROBES, ledger_cells
from conformance.conventions.probes.native_inputs import (
    mixed_dtype_cell, unbatched_cell, weights_dropout_cell)
from conformance.conventions.probes.probing import output_with


class Planted(Runner):
    """Answers the three native calls with what `plant` gives (an Observation, or raises)."""

    name = "planted.native"
    answers = frozenset({"input_dtype", "unbatched", "dropout_weights"})

    def __init__(self, plant):
        super().__init__()
        self.plant = plant

    def answer(self, case, data, raw):
        return self.plant(case, raw), f"planted({raw.argument})"


def _observed(case, dtype="float32", weights=None, item0=False):
    out = output_with(case, None)
    return Observation(output=out[0] if item0 else out, native_dtype=dtype,
                       attention_weights=weights,
                       weights_returned="none" if weights is None else "per_head")


def _refuse(case, raw):
    raise TypeError("planted: inputs must share the layer's dtype")


@pytest.mark.parametrize("dtype, word", [("float64", "promoted"), ("float32", "cast_to_layer"),
                                         ("float16", "not_probed"), ("", "not_probed")])
def test_mixed_dtype_is_read_from_the_native_dtype(dtype, word):
    """The word follows the dtype the system gave, never the float64 output array the
    runner converts to: a float16 or an unreported dtype is no reading."""
    cell = mixed_dtype_cell(Planted(lambda case, raw: _observed(case, dtype)))
    assert cell.value == word, cell.evidence


def test_a_refusal_is_refused_and_quoted():
    for probe in (mixed_dtype_cell, unbatched_cell, weights_dropout_cell):
        cell = probe(Planted(_refuse))
        assert cell.value == "refused" and "planted: inputs must share" in cell.evidence


def test_unbatched_accepted_and_a_misread_said():
    """The 2-D call's output is compared with the oracle's item 0: right is accepted near
    0; a system that reads (T, E) as a batch (planted: item 1's output) is accepted with
    the distance and the misreading named."""
    right = unbatched_cell(Planted(lambda case, raw: _observed(case, item0=True)))
    assert right.value == "accepted" and "misread" not in right.evidence
    wrong = unbatched_cell(Planted(lambda case, raw: Observation(
        output=output_with(case, None)[1])))
    assert wrong.value == "accepted" and "misread" in wrong.evidence


def _weights(case, dropped: bool):
    i, h = case.inputs, case.attention.num_heads
    w = np.full((i.batch, h, i.query_len, i.key_len), 1.0 / i.key_len)
    if dropped:  # inverted dropout at 0.5: some entries 0, the rest doubled
        keep = np.random.default_rng(0).random(w.shape) < 0.5
        w = np.where(keep, 2 * w, 0.0)
    return w


@pytest.mark.parametrize("dropped, output_moves, word", [
    (True, True, "post_dropout"), (False, True, "pre_dropout"), (False, False, "ignored")])
def test_weights_dropout_from_the_row_sums(dropped, output_moves, word):
    """Dropped rows are post_dropout; whole rows beside an output dropout moved are
    pre_dropout; whole rows and an unmoved output (a rate that drops nothing) name no
    reading: ignored."""
    def plant(case, raw):
        obs = _observed(case, weights=_weights(case, dropped))
        if output_moves:  # dropout on the path to the values
            obs.output = obs.output * np.where(np.random.default_rng(1).random(
                obs.output.shape) < 0.5, 0.0, 2.0)
        return obs

    cell = weights_dropout_cell(Planted(plant))
    assert cell.value == word, cell.evidence


def test_no_weights_returned_is_not_applicable():
    cell = weights_dropout_cell(Planted(lambda case, raw: _observed(case)))
    assert cell.value == "not_applicable"


def test_a_runner_answering_the_calls_gets_the_probes_cells_not_its_own():
    """ledger_cells takes these axes from the probes for a runner that answers them: a
    runner's own cell saying otherwise is not the word (its translate takes no case: the
    probes that run the whole system read not_probed)."""
    assert {RAW_PROBES[a][0] for a in ("mixed_dtype", "unbatched_input",
                                       "weights_dropout")} == Planted.answers

    class Claims(Planted):
        def translate(self, case):
            return NotExpressible(harness_limit("planted: native calls only"))

        def conventions(self):
            return [ApiFact("dtype_mixing", "promoted", "the runner's own word")]

    cells = ledger_cells(Claims(lambda case, raw: _observed(case, "float32")))
    mixed = [c for c in cells if c.axis == "mixed_dtype"]
    assert [c.value for c in mixed] == ["cast_to_layer"]


def test_a_kernel_refusing_small_heads_is_asked_at_its_head_size():
    """A refusal of the written form is not the word where a later form carries what the
    kernel takes (probe_head_size, needs.py): the answer at that size is read; where every
    form is refused, the last refusal (nearest the kernel) is quoted."""
    def plant(case, raw):
        if case.attention.qk_head_dim != 8:
            raise RuntimeError("planted: head size must be a multiple of 8")
        return _observed(case, "float64")

    runner = Planted(plant)
    runner.probe_head_size = 8
    cell = mixed_dtype_cell(runner)
    assert cell.value == "promoted" and "head-size" in cell.evidence, cell.evidence

    def refuse_all(case, raw):
        raise RuntimeError(f"planted: head {case.attention.qk_head_dim}")

    runner = Planted(refuse_all)
    runner.probe_head_size = 8
    cell = mixed_dtype_cell(runner)
    assert cell.value == "refused" and "planted: head 8" in cell.evidence, cell.evidence
