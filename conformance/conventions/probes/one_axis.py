"""One axis of one runner, measured by the probe `ledger_cells` (__init__.py) asks for it:
the drift matrix (conformance/history/) reads each of its cells here, so a drift cell at the
installed release is the ledger's cell, word and evidence.

The choice follows `ledger_cells` axis by axis: a raw probe where the runner passes its
argument raw (RAW_PROBES, the runner's `answers`), an asked probe where its `ledger_axes`
lists the axis (ASKED_PROBES, with the runner's own cell of it where it reports one), a
ledger-owned probe (LEDGER_PROBES); otherwise the runner's own `conventions()` cell.  An
axis the ledger reads from matrix rows for this runner (no probe cell: fully_masked_row of
keras.jax) is asked of the same generic probe (ASKED_PROBES: rows.py), the one judge the
rows agree with as second witness.  No probe of the other axes runs, and the runner's own
`conventions()` only where the axis needs it.
"""
from __future__ import annotations

from typing import Callable

from conformance.contract.axes import NOT_PROBED
from conformance.contract.runner import Convention


def source(runner, axis: str) -> str:
    """Which probe `ledger_cells` reads `axis` of `runner` from: raw, asked, owned, or own
    (the runner's conventions(); where it has no such cell the ledger reads matrix rows)."""
    from conformance.conventions.probes import ASKED_PROBES, OWNED_AXES, RAW_PROBES, takes_raw

    if axis in RAW_PROBES and takes_raw(RAW_PROBES[axis][0], getattr(runner, "answers", ())):
        return "raw"
    if axis in ASKED_PROBES and axis in getattr(runner, "ledger_axes", ()):
        return "asked"
    return "owned" if axis in OWNED_AXES else "own"


def axis_cell(runner, axis: str, own: Callable[[], list[Convention]] | None = None
              ) -> Convention:
    """The cell of `axis` for `runner` as the ledger measures it.  `own()` gives the
    runner's own conventions() cells (default: runner.conventions(), called only for the
    axes that need it)."""
    from conformance.conventions.probes import ASKED_PROBES, LEDGER_PROBES, RAW_PROBES, READS_OWN

    def own_cell() -> Convention | None:
        cells = (own or runner.conventions)()
        return next((c for c in cells if c.axis == axis), None)

    if not getattr(runner, "executed", True):
        return Convention(axis, NOT_PROBED, f"{runner.name}: a documented model (not "
                          "executed): the drift matrix probes executed systems only")
    how = source(runner, axis)
    if how == "raw":
        return RAW_PROBES[axis][1](runner)
    if how == "asked":
        probe = ASKED_PROBES[axis]
        return probe(runner, own_cell() if axis in READS_OWN else None)
    if how == "owned":
        for axes, probe in LEDGER_PROBES:
            if axis in axes:
                mine = {c.axis: c for c in (own or runner.conventions)() if c.axis in axes}
                return next(c for c in probe(runner, mine) if c.axis == axis)
    cell = own_cell()
    if cell is not None:
        return cell
    if axis in ASKED_PROBES:  # the ledger reads the rows here: the generic probe they witness
        return ASKED_PROBES[axis](runner, None)
    return Convention(axis, NOT_PROBED, f"{runner.name}: no probe of the ledger measures "
                      f"{axis} for this runner (its ledger cell comes from matrix rows)")
