"""Three axes of what a system does with an input it was not built for, owned by the ledger:
mixed_dtype (a float64 input into a float32 layer), unbatched_input (one item without its
batch axis) and weights_dropout (the weights it returns under attention dropout).

The runner only passes the native call (Runner.answer, RAW_ARGUMENTS "input_dtype",
"unbatched", "dropout_weights") and hands back what the system gave: its output with the
dtype the system produced it in (Observation.native_dtype), its output without the batch
axis, the weights it returned.  The words are named here:
- mixed_dtype: `refused` (the system's error, quoted), `promoted` (the output is float64),
  `cast_to_layer` (the output is in the layer's own dtype);
- unbatched_input: `refused`, or `accepted` with the output's shape and its distance from
  the oracle's first item (a 2-D input the system misreads is accepted, and the distance
  says so);
- weights_dropout: `not_applicable` where the system returns no weights, else the returned
  rows' sums: rows that no longer sum to 1 were dropped (`post_dropout`), rows that all
  do were not (`pre_dropout`) while the output shows dropout acting; where neither the
  rows nor the output moved, the rate dropped nothing and no reading can be named
  (`ignored`).
"""
from __future__ import annotations

import numpy as np

from conformance.conventions.axes import IGNORED, NA, NOT_PROBED, REFUSED, Convention
from conformance.contract.runner import RawCall
from conformance.conventions.probes.choices import under_choices
from conformance.conventions.probes.asked import NEAR, documented, said, unmeasured
from conformance.conventions.probes.forms import NEEDS_SUFFIX
from conformance.conventions.probes.needs import needed_forms
from conformance.conventions.probes.probing import output_with
from conformance.conventions.probes.request import Answer, ask_raw

WIDE = "float64"  # the input dtype asked of a layer built in the probe case's float32
RATE = 0.5  # the attention dropout rate of the weights_dropout probe
SUMS_MOVE = 1e-6  # a returned row whose sum is further than this from 1 was dropped


def _asked(runner, name: str, raw: RawCall):
    """The first form of the probe case the runner answers `raw` on, and its answer.  A
    refusal ends the search unless forms with what the system always applies follow
    (needs.py: its probe_needs, the head size its kernel takes): then those are asked
    too, and where none answers, the last refusal (the form nearest what the kernel
    takes) is the cell's."""
    cases = needed_forms(runner, name, raw=True)
    refused = None
    for n, case in enumerate(cases):
        got = ask_raw(runner, case, raw)
        if got.answered:
            return case, got
        if got.raised:
            refused = (case, got)
            if not any(NEEDS_SUFFIX in later.id for later in cases[n + 1:]):
                return refused
    return refused or (cases[-1], got)


def _unanswered(axis: str, runner, what: str, got: Answer) -> Convention:
    """The system's error is `refused` (quoted); anything else the suite could not ask."""
    if got.raised:
        return Convention(axis, REFUSED, f"{runner.name}, {said(what, got)}: {got.raised}",
                          **documented(runner, axis))
    return unmeasured(axis, runner, what, got)


def mixed_dtype_cell(runner) -> Convention:
    """The dtype of the output of a float64 input into the layer built in float32."""
    case, got = _asked(runner, "mixed-dtype", RawCall("input_dtype", WIDE))
    layer = case.inputs.dtype
    what = f"probe_case {case.id}: {WIDE} inputs into the system built in {layer}"
    if not got.answered:
        return _unanswered("mixed_dtype", runner, what, got)
    held = got.native_dtype
    word = {WIDE: "promoted", layer: "cast_to_layer"}.get(held)
    if word is None:
        return Convention("mixed_dtype", NOT_PROBED, f"{runner.name}, {said(what, got)}: "
                          f"the runner reported the output's dtype as {held or 'nothing'}, "
                          f"neither {WIDE} nor {layer}")
    return Convention("mixed_dtype", word, f"{runner.name}, {said(what, got)}: output {held}",
                      **documented(runner, "mixed_dtype"))


def unbatched_cell(runner) -> Convention:
    """The output of the first item passed without its batch axis, against the oracle's."""
    case, got = _asked(runner, "unbatched", RawCall("unbatched"))
    what = f"probe_case {case.id}: item 0 without the batch axis"
    if not got.answered:
        return _unanswered("unbatched_input", runner, what, got)
    expected = output_with(case, None)[0]
    out = got.output  # a batch axis of 1 given back (LiteRT's resized input) is read past
    kept = out.shape == (1, *expected.shape)
    d = (float(np.max(np.abs(out.reshape(expected.shape) - expected)))
         if kept or out.shape == expected.shape else float("inf"))
    misread = "" if d < 1e-3 else " (not the batched item: the 2-D input is misread)"
    return Convention("unbatched_input", "accepted", f"{runner.name}, {said(what, got)}: "
                      f"output {tuple(out.shape)}{', a batch axis of 1 given back' if kept else ''}"
                      f", max |output - oracle item 0| {d:.1e}{misread}",
                      **documented(runner, "unbatched_input"))


def weights_dropout_cell(runner) -> Convention:
    """The row sums of the weights returned with attention dropout on in training."""
    case, got = _asked(runner, "weights-dropout", RawCall("dropout_weights", {"rate": RATE}))
    what = f"probe_case {case.id}: attention dropout {RATE}, training on, seed 0"
    if not got.answered:
        return _unanswered("weights_dropout", runner, what, got)
    if got.attention_weights is None:
        return Convention("weights_dropout", NA, f"{runner.name}, {said(what, got)}: the "
                          "system returns no attention weights",
                          **documented(runner, "weights_dropout"))
    sums = got.attention_weights.sum(-1)
    dev = float(np.max(np.abs(sums - 1)))
    moved = float(np.max(np.abs(got.output - output_with(case, None))))
    text = (f"{runner.name}, {said(what, got)}: returned weights' row sums span "
            f"{float(sums.min()):.3f} to {float(sums.max()):.3f} (max |sum - 1| {dev:.2f}); "
            f"max |output - oracle (no dropout)| {moved:.1e}")
    if dev <= SUMS_MOVE and moved < NEAR:  # nothing dropped anywhere: no reading to name
        return Convention("weights_dropout", IGNORED, f"{text}: the rate is accepted and "
                          "drops nothing, so the weights cannot show where dropout would act",
                          **documented(runner, "weights_dropout"))
    word = "post_dropout" if dev > SUMS_MOVE else "pre_dropout"
    return Convention("weights_dropout", word, text, **documented(runner, "weights_dropout"))


def _each_choice(cell_of):
    """cell_of asked under each harness choice the runner names (choices.py): HF's sdpa
    attention function returns no weights and takes a 2-D input its eager one refuses."""
    def cell(runner) -> Convention:
        return under_choices(runner, cell_of)
    cell.__name__, cell.__doc__ = cell_of.__name__, cell_of.__doc__
    return cell


RAW_PROBES = {"mixed_dtype": ("input_dtype", _each_choice(mixed_dtype_cell)),
              "unbatched_input": ("unbatched", _each_choice(unbatched_cell)),
              "weights_dropout": ("dropout_weights", _each_choice(weights_dropout_cell))}
