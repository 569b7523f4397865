"""The conventions ledger: every axis of axes.py, observed for every runner, side by side.

A cell comes from one of two sources, never from hand-written text:
- a probe: `Runner.conventions()` ran the system on a small seeded input (for a
  documented model: its cited documentation), evidence prefixed `probe[<runner>]`;
- the matrix rows of this run, for the axes the matrix itself settles (fully
  masked rows, returned weights, float64, parameter counts, weight layout,
  refusals), evidence naming the rows, as `<case-id>[<runner>]`.
A probe cell wins over a derived cell for the same (system, axis); where neither
exists the cell says `not_probed`, and why.  A layer above run/evaluate.py (its rows).
"""
from __future__ import annotations

from dataclasses import replace
from typing import Any, Iterable, Mapping

from conformance.conventions.axes import AXES, BY_ID, DEPENDS, NA, Convention
from conformance.run.evaluate import Row
from conformance.conventions.cells import (  # noqa: F401 - the ledger's public names
    AGGREGATE_AXES, CONFLICT, EVIDENCE_LIMIT, MODEL_AXES, NONE, NOT_PROBED, PROBE, ROW,
    Ledger, LedgerCell, System, _bounded, cell_problem, from_probe)
from conformance.conventions.derived import DERIVERS, derive  # noqa: F401


def _system(runner, rows: list[Row]) -> System:
    ran = [r for r in rows if r.runner == runner.name and r.outcome.ran]
    executed = any(r.executed for r in ran) if ran else runner.executed
    params = runner.params
    spec = runner.target + (f"({', '.join(f'{k}={v!r}' for k, v in sorted(params.items()))})"
                            if params else "")
    return System(runner.name, spec, executed, runner.framework, runner.system, runner.path,
                  runner.backend)


def _absent(runner: str, probes: Mapping[str, Any]) -> str:
    got = probes.get(runner)
    if isinstance(got, BaseException):
        return f"no row settles this axis for {runner}, and its probes raised: {got}"[:400]
    if runner not in probes:
        return f"no row settles this axis for {runner}, and its probes did not run in this session"
    return f"no probe or row settles this axis for {runner}"


def witnessed(probe: LedgerCell, row: LedgerCell) -> LedgerCell:
    """One cell from two witnesses of one axis, a probe and this run's rows.  Agreeing (or
    a free-text axis, whose texts are not words to compare): the probe's cell, with two
    witnesses and the rows' reading beside it.  A probe that settled nothing (not_probed:
    not asked, or a tie) leaves the rows' cell, its reason beside.  Different words: a
    `conflict` cell naming both pieces of evidence (tests/test_witnesses.py fails on any)."""
    second = f"{row.value}: {row.evidence}"
    if probe.value == NOT_PROBED != row.value:  # the probe settled nothing: the rows do,
        return replace(row, second=f"(the probe settled nothing) {probe.evidence}")
    if BY_ID[probe.axis].vocabulary is None or probe.value == row.value:
        return replace(probe, witnesses=2, second=second)
    if row.value == DEPENDS and probe.value in row.words:  # the probe reads one condition
        return replace(probe, value=DEPENDS, witnesses=2, second=second, evidence=_bounded(
            f"{row.evidence}; the probe: {probe.value} ({probe.evidence})"))
    if not row.comparable:  # another question: quoted beside, one witness of this one
        return replace(probe, second=f"(reads another question) {second}")
    return replace(probe, value=CONFLICT, witnesses=2, second=second, evidence=_bounded(
        f"the probe reads {probe.value!r} ({probe.evidence}) but the rows read "
        f"{row.value!r} ({row.evidence})"))


def merge(runner: str, probe: Iterable[Convention] | BaseException | None,
          derived: Iterable[LedgerCell], probes_state: Mapping[str, Any]) -> list[LedgerCell]:
    """One runner's cells, one per axis in AXES order: a probe and the rows both
    (witnessed), else either, else not_probed."""
    by_axis = {c.axis: c for c in derived if c.system == runner}
    if probe is not None and not isinstance(probe, BaseException):
        for conv in probe:
            if conv.axis in BY_ID:
                row = by_axis.get(conv.axis)
                cell = from_probe(runner, conv)
                by_axis[conv.axis] = cell if row is None else witnessed(cell, row)
    return [by_axis.get(a.id) or LedgerCell(runner, a.id, NOT_PROBED,
                                            _absent(runner, probes_state), source=NONE,
                                            witnesses=0)
            for a in AXES]


def conflicts(ledger: "Ledger") -> list[LedgerCell]:
    """Every cell whose two witnesses disagree."""
    return [c for c in ledger.cells if c.value == CONFLICT]


def build(rows: Iterable[Row], probe_cells: Mapping[str, Any], runners,
          cases: Iterable | None = None, derived: Iterable[LedgerCell] | None = None) -> Ledger:
    """The ledger of this run: `probe_cells` maps a runner name to the Conventions its
    probes returned (or the exception they raised); runners absent from it did not
    probe in this session.  Every runner of `runners` is a column."""
    rows = list(rows)
    runners = list(runners)
    derived = list(derived) if derived is not None else derive(rows, runners, cases)
    per_runner = {r.name: merge(r.name, probe_cells.get(r.name), derived, probe_cells)
                  for r in runners}
    cells = [per_runner[r.name][i] for i in range(len(AXES)) for r in runners]
    return Ledger([_system(r, rows) for r in runners], cells)


__all__ = ["NOT_PROBED", "CONFLICT", "conflicts", "witnessed", "NA", "AGGREGATE_AXES",
           "LedgerCell", "Ledger", "System", "derive", "build", "merge", "cell_problem",
           "from_probe"]
