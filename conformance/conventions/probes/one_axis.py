"""One axis of one runner, measured by the probe `ledger_cells` (__init__.py) asks for it:
the drift matrix (conformance/history/) reads each of its cells here, so a drift cell at the
installed release is the ledger's cell, word and evidence.

The choice is the table's (table.way_for): the first way of the axis's entry the runner
takes (raw, universal, feature); otherwise the runner's own `conventions()` cell.  An axis
the ledger reads from matrix rows for this runner (no probe cell: fully_masked_row of
keras.jax) is asked of the entry's generic probe, the one judge the rows agree with as
second witness.  No probe of the other axes runs, and the runner's own `conventions()`
only where the axis needs it.
"""
from __future__ import annotations

from typing import Callable

from conformance.conventions.axes import NOT_PROBED, Convention


def source(runner, axis: str) -> str:
    """Which kind of probe `ledger_cells` reads `axis` of `runner` from: raw, asked (its
    translate and run, one axis), owned (the ledger's one_call probes), or own (the
    runner's conventions(); where it has no such cell the ledger reads matrix rows)."""
    from conformance.conventions.probes.table import RAW, way_for

    way = way_for(runner, axis)
    if way is None:
        return "own"
    return "raw" if way.how == RAW else "owned" if way.one_call else "asked"


def _generic(axis: str):
    """The entry's probe through translate and run, for an axis read from matrix rows."""
    from conformance.conventions.probes.table import RAW, TABLE

    return next((w.probe for w in TABLE[axis].ways if w.how != RAW and not w.one_call),
                None) if axis in TABLE else None


def axis_cell(runner, axis: str, own: Callable[[], list[Convention]] | None = None
              ) -> Convention:
    """The cell of `axis` for `runner` as the ledger measures it.  `own()` gives the
    runner's own conventions() cells (default: runner.conventions(), called only for the
    axes that need it)."""
    from conformance.conventions.probes.api_facts import own_cells as facts
    from conformance.conventions.probes.table import RAW, way_for

    def own_cells() -> list[Convention]:
        return list(own()) if own else facts(runner)

    if not runner.executed:
        return Convention(axis, NOT_PROBED, f"{runner.name}: a documented model (not "
                          "executed): the drift matrix probes executed systems only")
    way = way_for(runner, axis)
    if way is not None and way.how == RAW:
        return way.probe(runner)
    if way is not None and way.one_call:
        mine = {c.axis: c for c in own_cells()}
        return next(c for c in way.probe(runner, mine) if c.axis == axis)
    if way is not None:
        return way.probe(runner, next((c for c in own_cells() if c.axis == axis), None)
                         if way.reads_own else None)
    cell = next((c for c in own_cells() if c.axis == axis), None)
    if cell is not None:
        return cell
    generic = _generic(axis)
    if generic is not None:  # the ledger reads the rows here: the probe they witness
        return generic(runner, None)
    return Convention(axis, NOT_PROBED, f"{runner.name}: no probe of the ledger measures "
                      f"{axis} for this runner (its ledger cell comes from matrix rows)")
