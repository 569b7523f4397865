"""dropout, owned by the ledger: when the system's attention dropout applies.

The runner is asked (its `answer`, RawCall "dropout_training") to run a probe case with an
attention dropout rate of 0.5 set and the system's training switch off, then on (a fixed
seed), and each output is read against the float64 oracle, which has no dropout:
`training_flag` where only the training run moves, `always` where the inference run
moves too, `ignored` where neither does (the rate accepted, the output unchanged).  A
system that refuses the training run (its own error, e.g. a converter that declines a
training-mode op) reads `never` where its inference run is the oracle's (dropout applies
nowhere it runs), `always` where that run moves.

An exported or converted program takes no training input: its runner sets the switch where
the program is made (the module exported in train mode) and says so in the answer's extras
(EXPORTED).  Such a program is judged by what it holds: the one made in training mode is
run twice; `always` where it drops (its outputs move from the oracle, or from each other),
`never` where it holds no dropout (both runs are the oracle's).  A request the harness
cannot make (`unasked`, the suite's own exception included: request.ask_raw) is never the
system's word: the cell is `not_probed`.
"""
from __future__ import annotations

import numpy as np

from conformance.conventions.axes import IGNORED, Convention
from conformance.conventions.probes.probing import distances, output_with
from conformance.contract.runner import RawCall
from conformance.conventions.probes.asked import NEAR, documented, unmeasured
from conformance.conventions.probes.needs import needed_forms
from conformance.conventions.probes.request import Answer, ask_raw
from conformance.oracle.canonical import case_data

RATE = 0.5
EXPORTED = ("training_set_at", "export")  # the extras item of an answer from a program


def _request(training: bool) -> RawCall:
    return RawCall("dropout_training", {"rate": RATE, "training": training})


def exported(got: Answer) -> bool:
    """Whether the answer came from a program whose training switch was set when it was
    made (it takes none itself)."""
    return got.extras.get(EXPORTED[0]) == EXPORTED[1]


def dropout_cell(runner) -> Convention:
    """The probe case, or where the runner cannot pass the rate on it (`unasked`) the case
    with what its system applies on every call (needs.py: probe_needs)."""
    cases = needed_forms(runner, "dropout", raw=True,
                         inputs={"self_attention": True, "key_len": 3})
    for case in cases[:-1]:
        if not ask_raw(runner, case, _request(False)).unasked:
            break
    else:
        case = cases[-1]
    data, oracle = case_data(case), output_with(case, None)
    what = f"probe_case {case.id}, dropout rate {RATE} set"
    d, answers = {}, {}
    for training in (False, True):
        got = ask_raw(runner, case, _request(training), data)
        if training and got.raised:  # the training run refused: does the other one drop?
            return Convention("dropout", "never" if d[False] < NEAR else "always",
                              f"{runner.name}, {what}: max |output - oracle (no dropout)| "
                              f"with the training switch off {d[False]:.1e} "
                              f"({answers[False].call}); on, the system raised: "
                              f"{got.raised}", **documented(runner, "dropout"))
        if not got.answered:
            return unmeasured("dropout", runner, f"{what}, training {training}", got)
        d[training] = distances(got.output, {"oracle": oracle})["oracle"]
        answers[training] = got
    if exported(answers[True]):
        return _program_cell(runner, case, data, oracle, what, d, answers)
    word = "always" if not d[False] < NEAR else "training_flag" if not d[True] < NEAR \
        else IGNORED
    return Convention("dropout", word, f"{runner.name}, {what}: max |output - oracle (no "
                      f"dropout)| with the training switch off {d[False]:.1e} "
                      f"({answers[False].call}), on {d[True]:.1e} ({answers[True].call})",
                      **documented(runner, "dropout"))


def _program_cell(runner, case, data, oracle, what: str, d: dict, answers: dict):
    """The cell of a program made in training mode, run a second time: `always` where
    it drops on its calls, `never` where it holds no dropout."""
    again = ask_raw(runner, case, _request(True), data)
    if not again.answered:
        return unmeasured("dropout", runner, f"{what}, the training-mode program run again",
                          again)
    apart = float(np.max(np.abs(again.output - answers[True].output)))
    d_again = distances(again.output, {"oracle": oracle})["oracle"]
    drops = not max(d[False], d[True], d_again, apart) < NEAR
    said = ("drops on its calls" if drops else "holds no dropout: both runs are the "
            "oracle's")
    return Convention(
        "dropout", "always" if drops else "never",
        f"{runner.name}, {what}: a program takes no training input; made with the training "
        f"switch off, max |output - oracle (no dropout)| {d[False]:.1e} "
        f"({answers[False].call}); made with it on ({answers[True].call}), run twice: "
        f"{d[True]:.1e} and {d_again:.1e} from the oracle, {apart:.1e} apart: the program "
        f"{said}", **documented(runner, "dropout"))


RAW_PROBES = {"dropout": ("dropout_training", dropout_cell)}
