"""What the ledger's generic probes of the asked axes (ASKED_PROBES in __init__.py) share:
the documented statement a runner carries for an axis, a cell from an answer no reading
was measured on, and a probe case's oracle output.  A runner takes part by listing the
probe cases it takes (table.py: its features, probe_takes); the probes ask it through its own
translate and run (request.ask) or its `answer` (request.ask_raw), nothing else.
"""
from __future__ import annotations

from conformance.conventions.axes import NOT_PROBED, REFUSED, Convention
from conformance.conventions.probes.request import Answer

NEAR = 1e-3  # a reading "matches" within this (float32 probes are ~1e-7 off)


def documented(runner, axis: str) -> dict:
    """documented= and documented_source= of a Convention: what the system's documentation
    states, from the `documented:` section of the runner's expectations file (data, not
    runner code: conventions/expectations.py)."""
    from conformance.conventions.expectations import documented as claims

    word, link = claims(runner.name).get(axis, (None, ""))
    return {"documented": word, "documented_source": link}


def unmeasured(axis: str, runner, what: str, got: Answer) -> Convention:
    """The cell of a request that gave no output: the system's own error is `refused`
    (quoted); a runner that cannot say the case, or a harness limit, is `not_probed` with
    its reason (a translate's reason is no signature's evidence: never not_applicable)."""
    if got.raised:
        return Convention(axis, REFUSED, f"{runner.name}, {what}: the system raised: "
                          f"{got.raised}", **documented(runner, axis))
    why = got.unasked or got.inexpressible
    return Convention(axis, NOT_PROBED, f"{runner.name}, {what}: not asked: {why}")


def said(what: str, got: Answer) -> str:
    """`what` with the native call the runner made."""
    return f"{what} ({got.call})" if got.call else what
