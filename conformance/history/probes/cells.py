"""A drift cell from the ledger's cell: the same word and evidence, except where the
runner's code asked the release for an API it does not have.

The suite's runners are written against the installed releases; on an older one their
native call can meet a missing function, argument, operator or file format before the
system says anything about the convention.  The ledger reads any error of the call as the
system's own (`refused`); in the drift matrix a `refused` (or a probe that raised) whose
quoted error is one of API_GAPS is `api_absent` (the release has no such API: never a
convention change, bisect.py keeps it apart), the ledger's word and message kept in the
evidence.  Any other refusal stays `refused`: the release ran the call and rejected it.
"""
from __future__ import annotations

ABSENT = "api_absent"
REFUSED = "refused"
PROBE_ERROR = "probe_error"  # the probe itself raised (bisect.py: never compared)
EVIDENCE = 1200  # characters of evidence kept per cell (the ledger's, with its distances)
# what a quoted error says when the release lacks the API the runner's call uses (module,
# attribute or keyword argument; an ONNX operator, opset or IR version it cannot load:
# onnxruntime's model constructor, whose IR-version message the ledger's bounded quote
# may cut: request.quoted)
API_GAPS = (
    "onnxruntime::Model::Model(",
    "has no attribute", "No module named", "cannot import name",
    "unexpected keyword argument", "Unrecognized keyword arguments",
    "Unsupported model IR version", "No Op registered for", "No registered schema for operator",
    "is not a registered function/op", "Opset version", "opset_import",
)


def api_gap(evidence: str) -> str:
    """The API_GAPS phrase `evidence` quotes, or ""."""
    return next((gap for gap in API_GAPS if gap in evidence), "")


def drift_cell(value: str, evidence: str) -> dict:
    """{"value", "evidence"} of one drift cell from the ledger's word and evidence."""
    if value in (REFUSED, PROBE_ERROR) and api_gap(evidence):
        return {"value": ABSENT, "evidence": ("the runner's call needs an API this release "
                                              f"lacks (the ledger reads {value}): "
                                              + evidence)[:EVIDENCE]}
    return {"value": value, "evidence": evidence[:EVIDENCE]}
