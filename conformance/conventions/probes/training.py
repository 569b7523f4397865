"""dropout, owned by the ledger: when the system's attention dropout applies.

The runner is asked (its `answer`, RawCall "dropout_training") to run a probe case with an
attention dropout rate of 0.5 set and the system's training switch off, then on (a fixed
seed), and each output is read against the float64 oracle, which has no dropout:
`training_flag` where only the training run moves, `always` where the inference run
moves too, `ignored` where neither does (the rate accepted, the output unchanged).  A
system that refuses the training run (its own error, e.g. a path that declines training)
reads `never` where its inference run is the oracle's (dropout applies nowhere it runs),
`always` where that run moves.
"""
from __future__ import annotations

from conformance.contract.axes import IGNORED
from conformance.conventions.probes.probing import distances, output_with
from conformance.contract.runner import Convention, RawCall
from conformance.conventions.probes.asked import NEAR, documented, unmeasured
from conformance.conventions.probes.needs import needed_forms
from conformance.conventions.probes.request import ask_raw
from conformance.oracle.canonical import case_data

RATE = 0.5


def dropout_cell(runner) -> Convention:
    """The probe case, or where the runner cannot pass the rate on it (`unasked`) the case
    with what its system applies on every call (needs.py: probe_needs)."""
    cases = needed_forms(runner, "dropout", raw=True,
                         inputs={"self_attention": True, "key_len": 3})
    for case in cases[:-1]:
        got = ask_raw(runner, case, RawCall("dropout_training", {"rate": RATE,
                                                                 "training": False}))
        if not got.unasked:
            break
    else:
        case = cases[-1]
    data, oracle = case_data(case), output_with(case, None)
    what = f"probe_case {case.id}, dropout rate {RATE} set"
    d, calls = {}, []
    for training in (False, True):
        got = ask_raw(runner, case, RawCall("dropout_training", {"rate": RATE,
                                                                 "training": training}), data)
        if training and got.raised:  # the training run refused: does the other one drop?
            return Convention("dropout", "never" if d[False] < NEAR else "always",
                              f"{runner.name}, {what}: max |output - oracle (no dropout)| "
                              f"with the training switch off {d[False]:.1e} ({calls[0]}); "
                              f"on, the system raised: {got.raised}",
                              **documented(runner, "dropout"))
        if not got.answered:
            return unmeasured("dropout", runner, f"{what}, training {training}", got)
        d[training] = distances(got.output, {"oracle": oracle})["oracle"]
        calls.append(got.call)
    word = "always" if not d[False] < NEAR else "training_flag" if not d[True] < NEAR \
        else IGNORED
    return Convention("dropout", word, f"{runner.name}, {what}: max |output - oracle (no "
                      f"dropout)| with the training switch off {d[False]:.1e} ({calls[0]}), "
                      f"on {d[True]:.1e} ({calls[1]})", **documented(runner, "dropout"))


RAW_PROBES = {"dropout": ("dropout_training", dropout_cell)}
