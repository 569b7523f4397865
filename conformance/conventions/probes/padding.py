"""key_padding_polarity, owned by the ledger where the runner reads its system's separate
key-padding argument (its own cell: `lengths` for valid lengths, or a boolean mask's
polarity, from the signature or docstring; an observation with no oracle).

The probe case with key padding (valid lengths [5, 3] of S 5) is asked of the runner (its
translate and run: the padding passed as its system takes it) and read against the
oracle padded and unpadded: the runner's reading is kept where the output is the padded
oracle's, `ignored` where it is the unpadded one (the padding accepted and dropped), else
`not_probed` (the reading is not what the system computes).  A system that takes only
self-attention is asked the case in that form (forms.py).
"""
from __future__ import annotations

from dataclasses import replace

from conformance.conventions.axes import IGNORED, NOT_PROBED, Convention
from conformance.conventions.probes.probing import distances, output_with
from conformance.conventions.probes.asked import NEAR, documented, said, unmeasured
from conformance.conventions.probes.forms import first_taken, forms
from conformance.oracle.reference import attention

LENGTHS = [5, 3]


def key_padding_polarity_cell(runner, own: Convention | None = None) -> Convention:
    axis = "key_padding_polarity"
    if own is None:
        return Convention(axis, NOT_PROBED, f"{runner.name} reports no reading of its "
                          "key-padding argument")
    case, got, note = first_taken(runner, forms("key-padding", mask={"key_padding": LENGTHS}))
    what = (f"probe_case {case.id}, valid key lengths {LENGTHS} of S {case.inputs.key_len}"
            f"{note}")
    if not got.answered:
        return unmeasured(axis, runner, f"{own.value} ({own.evidence}); {what}", got)
    d = distances(got.output, {"padded": attention(case).output,
                               "no padding": output_with(case, None)})
    text = (f"{own.evidence}; {runner.name}, {said(what, got)}: max |output - oracle| "
            + "; ".join(f"{k} {v:.1e}" for k, v in d.items()))
    if d["padded"] < NEAR:
        return replace(own, evidence=text)
    if d["no padding"] < NEAR:
        return Convention(axis, IGNORED, f"{text}: the padding accepted and dropped",
                          **documented(runner, axis))
    return Convention(axis, NOT_PROBED, f"{text}: the reading {own.value!r} is not what the "
                      "system computes")
