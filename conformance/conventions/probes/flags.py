"""Axes of a native argument passed raw, owned by the ledger: attn_mask_polarity (a boolean
mask: True = attends or True = blocks?), float_mask (a 0 / -1e9 mask: added, or read as a
boolean?) and causal_flag (the causal switch with T != S: upper left or lower right?).

Each probe builds its case and its raw value, asks the runner (request.ask_raw: the
runner's `answer`, which only calls its system with that argument as given), and names
the reading of the float64 oracle the output matches, every distance quoted.  A runner
whose `answers` lacks the argument keeps its own cell for the axis until it answers.  A
runner that cannot pass a mask on the cross-attention case (`unasked`) is asked its
self-attention form (forms.py); one that answers "causal_hint" (a causal switch that is a
hint beside a mask, nn.MultiheadAttention's) is read by causal_hint.py.  A runner naming
harness choices (Runner.harness_choices) is asked each argument under each (choices.py).
"""
from __future__ import annotations

from dataclasses import replace

import numpy as np

from conformance.conventions.axes import NOT_PROBED, REFUSED, Convention
from conformance.conventions.probes.asked import documented
from conformance.conventions.probes.choices import under_choices
from conformance.conventions.probes.probe_cells import mask_polarity
from conformance.conventions.probes.probing import (
    causal_candidates, closest, distances, output_with, probe_case, probe_mask)
from conformance.contract.runner import RawCall
from conformance.conventions.probes.mask_number import added_as_number
from conformance.conventions.probes.needs import needed_forms
from conformance.conventions.probes.request import Answer, ask_raw
from conformance.oracle.canonical import case_data


def _unanswered(axis: str, runner, what: str, got: Answer) -> Convention:
    if got.raised:
        return Convention(axis, REFUSED, f"{runner.name}, {what}: {got.raised}",
                          **documented(runner, axis))
    return Convention(axis, NOT_PROBED, f"{runner.name}, {what}: {got.unasked}")


def _forward(runner, case, argument: str):
    """fwd(value) -> output, raising on a refusal (for the shared classifiers), and the
    last answer (its call and message)."""
    data, last = case_data(case), {}

    def fwd(value):
        got = ask_raw(runner, case, RawCall(argument, value), data)
        last["answer"] = got
        if not got.answered:
            raise _Refused(got)
        return got.output

    return fwd, last


class _Refused(Exception):
    def __init__(self, answer: Answer):
        super().__init__(answer.raised or answer.unasked)
        self.answer = answer


def _asked_form(runner, name: str, argument: str, value):
    """(case, fwd, last, the first output or the _Refused): the raw probe on case `name`, or
    where the runner cannot pass the argument on it (`unasked`: a path that takes only
    self-attention) on its self-attention form (forms.py), then on both with what the
    system applies on every call (needs.py: probe_needs)."""
    for case in needed_forms(runner, name, raw=True):
        fwd, last = _forward(runner, case, argument)
        try:
            return case, fwd, last, fwd(value(case))
        except _Refused as exc:
            found = (case, fwd, last, exc)
            if not exc.answer.unasked:
                break
    return found


def attn_mask_polarity_cell(runner) -> Convention:
    """The boolean mask's reading, under each harness choice the runner names (HF's eager
    attention adds a boolean as a number, sdpa reads it True = attend)."""
    return under_choices(runner, _attn_mask_polarity_cell)


def _attn_mask_polarity_cell(runner) -> Convention:
    case, fwd, last, out = _asked_form(runner, "raw-attn-mask", "attn_mask", probe_mask)
    what = f"probe_case {case.id}: boolean attn_mask (B, T, S) passed raw"
    if isinstance(out, _Refused):
        return _unanswered("attn_mask_polarity", runner, what, out.answer)
    cell = mask_polarity(case, fwd, f"{what} ({last['answer'].call})",
                         **documented(runner, "attn_mask_polarity"))
    return added_as_number(runner, case, cell, out, probe_mask(case))  # mask_number.py


def float_mask_cell(runner) -> Convention:
    return under_choices(runner, _float_mask_cell)


def _float_mask_cell(runner) -> Convention:
    case, fwd, last, out = _asked_form(runner, "raw-float-mask", "attn_mask",
                                       lambda c: np.where(probe_mask(c), 0.0, -1e9))
    m = probe_mask(case)
    what = f"probe_case {case.id}: float attn_mask 0 / -1e9 (B, T, S) passed raw"
    if isinstance(out, _Refused):
        return _unanswered("float_mask", runner, what, out.answer)
    readings = {"added": output_with(case, m), "cast_to_bool": output_with(case, ~m)}
    cell = closest("float_mask", out, readings, f"{what} ({last['answer'].call})",
                   **documented(runner, "float_mask"))
    # neither within 1e-3: the mask read as (1 - m) * -1e9, every score drowned in float32
    # (equal scores: the oracle at scale 0), as Keras before 3.7 did (the drift matrix)
    d = distances(out, {**readings, "uniform_where_zero": output_with(case, m, scale=0.0)})
    if min(d["added"], d["cast_to_bool"]) > 1e-3 and d["uniform_where_zero"] <= 1e-3:
        return replace(cell, value="uniform_where_zero", evidence=f"{cell.evidence}; "
                       f"uniform_where_zero {d['uniform_where_zero']:.1e}")
    return cell


def causal_flag_cell(runner) -> Convention:
    """The causal switch's reading, under each harness choice the runner names (choices.py:
    HF's eager and sdpa attention functions read the switch differently)."""
    return under_choices(runner, _causal_flag_cell)


def _causal_flag_cell(runner) -> Convention:
    if "causal_hint" in runner.answers:  # a switch read beside a mask
        from conformance.conventions.probes.causal_hint import causal_hint_cell

        return causal_hint_cell(runner)
    case = probe_case("raw-causal")
    fwd, last = _forward(runner, case, "is_causal")
    what = (f"probe_case {case.id}: the causal switch on, T {case.inputs.query_len} != S "
            f"{case.inputs.key_len}")
    try:
        out = fwd(True)
    except _Refused as exc:
        if exc.answer.unasked:  # a switch passed on self-attention only (causal_self.py)
            from conformance.conventions.probes.causal_self import causal_self_attention_cell

            return causal_self_attention_cell(runner, exc.answer.unasked)
        return _unanswered("causal_flag", runner, what, exc.answer)
    from conformance.conventions.probes.causal_rows import by_rows

    return by_rows(closest("causal_flag", out, causal_candidates(case),
                           f"{what} ({last['answer'].call})",
                           **documented(runner, "causal_flag")), case, out)


RAW_PROBES = {"attn_mask_polarity": ("attn_mask", attn_mask_polarity_cell),
              "float_mask": ("attn_mask", float_mask_cell),
              "causal_flag": ("is_causal", causal_flag_cell)}
