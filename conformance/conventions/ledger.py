"""The conventions ledger: every axis of axes.py, observed for every runner, side by side.

A cell comes from one of two sources, never from hand-written text:
- a probe: `Runner.conventions()` ran the system on a small seeded input (for a
  documented model: its cited documentation), evidence prefixed `probe[<runner>]`;
- the matrix rows of this run, for the axes the matrix itself settles (fully
  masked rows, returned weights, float64, parameter counts, weight layout,
  refusals), evidence naming the rows, as `<case-id>[<runner>]`.
A probe cell wins over a derived cell for the same (system, axis); where neither
exists the cell says `not_probed`, and why.  Layer 4, beside matrix.py.
"""
from __future__ import annotations

import re
from dataclasses import dataclass, field, replace
from typing import Any, Iterable, Mapping

from conformance.contract.axes import AXES, BY_ID, NA, REFUSED
from conformance.contract.runner import HARNESS_LIMIT, Convention
from conformance.run.evaluate import FEATURE_REFUSAL, Row
from conformance.compare.verdict import FailureKind, Outcome
from conformance.conventions.layout import weight_layout

NOT_PROBED = "not_probed"  # no probe and no row of this run settles the cell
CONFLICT = "conflict"  # two witnesses (a probe and the rows) read different words
PROBE, ROW, NONE = "probe", "row", "none"  # LedgerCell.source
# Aggregates over every case a runner ran: a subset run does not settle them.
AGGREGATE_AXES = ("parameter_formula", "weight_layout", "refusals")
# What a documented model's rows settle (its arithmetic is NumPy's, not the system's).
MODEL_AXES = ("parameter_formula", "weight_layout", "returned_weights", "refusals")
WEIGHT_WORDS = {"per_head": "per_head", "averaged": "head_averaged", "none": "none"}
EVIDENCE_LIMIT = 900  # characters of one derived evidence text


@dataclass(frozen=True)
class LedgerCell:
    system: str  # the runner name
    axis: str
    value: str
    evidence: str
    documented: str | None = None
    documented_source: str = ""
    source: str = ROW  # probe / row / none
    witnesses: int = 1  # how many independent readings settle it (0: not_probed)
    second: str = ""  # the other witness's reading, "<word>: <evidence>", when there are two
    # False: a row's reading of another question than the probe's (the runner's own call
    # where the probe reads the default call; an error a declared known mismatch explains)
    comparable: bool = True

    @property
    def contradicts_documentation(self) -> bool:
        return self.documented is not None and self.documented != self.value

    @property
    def observed(self) -> bool:
        return self.value != NOT_PROBED

    def as_dict(self) -> dict[str, Any]:
        return {"system": self.system, "axis": self.axis, "value": self.value,
                "evidence": self.evidence, "documented": self.documented,
                "documented_source": self.documented_source,
                "contradicts_documentation": self.contradicts_documentation,
                "witnesses": self.witnesses, "second_witness": self.second}


@dataclass(frozen=True)
class System:
    id: str  # the runner name (cells' `system`)
    runner: str  # how to build it: "module:Class" and its registry parameters
    executed: bool  # False: a documented model, marked "(model)"
    framework: str
    system: str
    path: str
    backend: str

    @property
    def label(self) -> str:
        return self.id if self.executed else f"{self.id} (model)"

    def as_dict(self) -> dict[str, Any]:
        return {"id": self.id, "runner": self.runner, "executed": self.executed,
                "framework": self.framework, "system": self.system, "path": self.path,
                "backend": self.backend}


@dataclass
class Ledger:
    systems: list[System]
    cells: list[LedgerCell]  # axis-major: AXES order, then systems order
    axes: tuple = AXES
    _index: dict = field(default_factory=dict, repr=False)

    def cell(self, system: str, axis: str) -> LedgerCell:
        if not self._index:
            self._index.update({(c.system, c.axis): c for c in self.cells})
        return self._index[(system, axis)]

    def missing(self) -> list[tuple[str, str]]:
        """(runner, axis) of every not_probed cell."""
        return [(c.system, c.axis) for c in self.cells if not c.observed]

    def as_dict(self) -> dict[str, Any]:
        return {"axes": [{"id": a.id, "title": a.title,
                          "vocabulary": list(a.vocabulary) if a.vocabulary else None,
                          "meaning": a.meaning} for a in self.axes],
                "systems": [s.as_dict() for s in self.systems],
                "cells": [c.as_dict() for c in self.cells]}


def cell_problem(cell: Convention | LedgerCell) -> str | None:
    """Why a probe's cell is not a ledger word (unknown axis, word outside the vocabulary)."""
    axis = BY_ID.get(cell.axis)
    if axis is None:
        return f"unknown axis {cell.axis!r} (axes.py lists {', '.join(BY_ID)})"
    if axis.words and cell.value not in axis.words + (CONFLICT,):
        return (f"axis {cell.axis}: {cell.value!r} is not a word of its vocabulary "
                f"({', '.join(axis.words)})")
    if not isinstance(cell.value, str) or not cell.value.strip():
        return f"axis {cell.axis}: the value must be a non-empty string"
    return None


def from_probe(runner: str, conv: Convention) -> LedgerCell:
    prefix = f"probe[{runner}]"
    evidence = conv.evidence if conv.evidence.startswith(prefix) else f"{prefix}: {conv.evidence}"
    return LedgerCell(runner, conv.axis, conv.value, evidence, conv.documented,
                      conv.documented_source, PROBE)


def _bounded(text: str) -> str:
    text = " ".join(text.split())
    return text if len(text) <= EVIDENCE_LIMIT else text[:EVIDENCE_LIMIT - 3] + "..."


def _at(row: Row) -> str:
    return f"{row.case}[{row.runner}]"


def _cell(row_or_name, axis: str, value: str, evidence: str) -> LedgerCell:
    name = row_or_name.runner if isinstance(row_or_name, Row) else row_or_name
    return LedgerCell(name, axis, value, _bounded(evidence))


# ---- one deriver per axis the matrix settles: (runner name, its rows, cases) -> cell


def _fully_masked(name: str, rows: list[Row], cases) -> LedgerCell | None:
    seen = [r for r in rows if r.fully_masked_row]
    if not seen:
        return None
    first = seen[0]
    text = f"{_at(first)}: output {first.fully_masked_row}"
    if first.fully_masked_row_weights:
        text += f", returned weights {first.fully_masked_row_weights}"
    others = [r for r in seen[1:] if r.fully_masked_row != first.fully_masked_row]
    same = len(seen) - 1 - len(others)
    if same:
        text += f"; the same in {same} other case(s)"
    if others:
        text += "; but " + ", ".join(f"{_at(r)}: {r.fully_masked_row}" for r in others[:4])
    return _cell(name, "fully_masked_row", first.fully_masked_row, text)


def _returned_weights(name: str, rows: list[Row], cases) -> LedgerCell | None:
    ran = [r for r in rows if r.outcome.ran and r.weights_returned in WEIGHT_WORDS]
    if not ran:
        return None
    default = [r for r in ran if r.extras.get("default_weights") in WEIGHT_WORDS.values()]
    if default:  # the default call returns other weights than this row's call (MATLAB)
        row = default[0]
        return _cell(row, "returned_weights", row.extras["default_weights"],
                     f"{_at(row)}: the default call returns {row.extras['default_weights']}; "
                     f"this row's call returns {row.weights_returned} weights"
                     + (f" (native call: {row.native_call})" if row.native_call else ""))
    typed = [r for r in ran if isinstance(r.extras.get("default_weights_shape"), list)]
    if typed:  # the default call's weights, recorded beside the per-head ones the row asked for
        row = typed[0]
        shape = row.extras["default_weights_shape"]
        word = "head_averaged" if len(shape) == 3 else "per_head"
        return _cell(row, "returned_weights", word,
                     f"{_at(row)}: the default call returns weights of shape {tuple(shape)} "
                     f"({word}); this row's call returns {row.weights_returned}")
    row = ran[0]
    word = WEIGHT_WORDS[row.weights_returned]
    # the runner's own call, which may ask for other weights than the default call does
    return replace(_cell(row, "returned_weights", word,
                         f"{_at(row)}: this runner's call returns {row.weights_returned} weights"
                         + (f" (native call: {row.native_call})" if row.native_call else "")),
                   comparable=False)


def _float64(name: str, rows: list[Row], cases) -> LedgerCell | None:
    rows = [r for r in rows if r.dtype == "float64"
            and (r.executed or r.outcome is Outcome.NOT_EXPRESSIBLE)]
    below = [r for r in rows if r.outcome.ran and
             (r.failed(FailureKind.VALUES) or r.failed(FailureKind.WEIGHTS))]
    exact = [r for r in rows if r.outcome.ran and r not in below]
    # a refusal settles the axis only when it is about the dtype: a float64 case refused
    # for its bias or its mask (a case limit) says nothing of float64 arithmetic
    refused = [r for r in rows if r.outcome is Outcome.NOT_EXPRESSIBLE
               and re.search(r"float64|double", r.reason, re.I)]
    if below:
        worst = max(below, key=lambda r: max(r.max_abs_error or 0, r.weights_max_abs_error or 0))
        err = max(worst.max_abs_error or 0, worst.weights_max_abs_error or 0)
        # a declared known mismatch explains the error (a rounded scale...): the probe of
        # the arithmetic itself is the witness of this axis, the row is quoted beside it
        return replace(_cell(worst, "float64_compute", "below_float64",
                             f"{_at(worst)}: max abs error {err:.2e} against the float64 "
                             f"oracle (atol {worst.atol:g}, rtol {worst.rtol:g})"
                             + (f"; known: {worst.known_mismatch}" if worst.known_mismatch
                                else "")), comparable=not worst.known_mismatch)
    if exact:
        row = exact[0]
        more = f"; {len(exact) - 1} more float64 case(s) agree" if len(exact) > 1 else ""
        return _cell(row, "float64_compute", "float64",
                     f"{_at(row)}: max abs error {row.max_abs_error or 0:.2e} against the "
                     f"float64 oracle (atol {row.atol:g}){more}")
    if refused:
        return _cell(refused[0], "float64_compute", REFUSED,
                     f"{_at(refused[0])}: not expressible: {refused[0].reason}")
    return None


def _params(name: str, rows: list[Row], cases) -> LedgerCell | None:
    ran = [r for r in rows if r.outcome.ran and r.parameters is not None]
    if not ran:
        return None
    held_none = [r for r in ran if r.parameters == 0 and r.projection_parameters is not None]
    if len(held_none) == len(ran):
        agree = [r for r in ran if r.projection_parameters == r.parameters_formula]
        return _cell(name, "parameter_formula", "holds_none",
                     f"holds no parameters in {len(ran)} case(s) (e.g. {_at(ran[0])}); the "
                     f"projections passed in match the formula in {len(agree)} of them "
                     f"({_counts(ran, projection=True)})")
    differ = [r for r in ran if r.parameters != r.parameters_formula]
    if not differ:
        return _cell(name, "parameter_formula", "canonical",
                     f"the system's count equals the formula in all {len(ran)} case(s) it ran: "
                     f"{_counts(ran)}")
    return _cell(name, "parameter_formula", "differs",
                 f"the system's count differs from the formula in {len(differ)} of {len(ran)} "
                 "case(s): " + "; ".join(f"{_at(r)}: {r.parameters:,} vs formula "
                                         f"{r.parameters_formula:,}" for r in differ[:4]))


def _counts(rows: list[Row], projection: bool = False, limit: int = 3) -> str:
    shown = [f"{_at(r)} {(r.projection_parameters if projection else r.parameters):,}"
             for r in rows[:limit]]
    return ", ".join(shown) + (f" and {len(rows) - limit} more" if len(rows) > limit else "")


def _weight_layout(name: str, rows: list[Row], cases) -> LedgerCell | None:
    found = weight_layout(name, rows, cases)
    if found is None:
        return None
    row, value, text = found
    return _cell(row, "weight_layout", value, f"{_at(row)}: {text}")


def _normal(reason: str) -> str:
    return re.sub(r"\d+(\.\d+)?", "#", reason)[:70]


def _refusals(name: str, rows: list[Row], cases) -> LedgerCell | None:
    counted = [r for r in rows if r.outcome is not Outcome.SKIPPED]
    if not counted:
        return None
    # a case asking for a part of today's attention the runner lacks is not the system's
    # refusal (the feature axes say what it lacks): counted apart, named in the evidence
    lacking = [r for r in counted if r.outcome is Outcome.NOT_EXPRESSIBLE
               and FEATURE_REFUSAL in r.reason]
    counted = [r for r in counted if r not in lacking]
    if not counted:
        return None
    refused = [r for r in counted if r.outcome is Outcome.NOT_EXPRESSIBLE]
    harness = [r for r in refused if r.reason.startswith(HARNESS_LIMIT)]
    refused = [r for r in refused if r not in harness]
    groups: dict[str, list[Row]] = {}
    for r in refused:
        groups.setdefault(_normal(r.reason), []).append(r)
    if not refused:
        text = f"none of the {len(counted)} case(s) it ran is refused (e.g. {_at(counted[0])})"
    else:
        parts = [f"{len(g)}x, e.g. {_at(g[0])}: {g[0].reason[:160]}"
                 for g in sorted(groups.values(), key=lambda g: -len(g))[:5]]
        text = (f"{len(refused)} of {len(counted)} case(s) not expressible, {len(groups)} "
                "reason(s): " + " | ".join(parts))
    if harness:  # the suite's own limits: reported, never counted as the system's
        text += (f"; apart, {len(harness)} harness limit(s), not the system's: "
                 + " | ".join(f"{_at(r)}: {r.reason[len(HARNESS_LIMIT):][:120]}"
                              for r in harness[:3]))
    # the number of kinds of refusal, not of cases: a new case refused for a known
    # reason changes the evidence, not the pinned value
    value = f"{len(groups)} kind{'s' if len(groups) > 1 else ''}" if groups else "none"
    if lacking:
        text += (f"; besides, {len(lacking)} case(s) ask for parts of today's attention it "
                 f"lacks (e.g. {_at(lacking[0])}: {lacking[0].reason[:120]})")
    return _cell(name, "refusals", value, text)


DERIVERS = {"fully_masked_row": _fully_masked, "returned_weights": _returned_weights,
            "float64_compute": _float64, "parameter_formula": _params,
            "weight_layout": _weight_layout, "refusals": _refusals}


def derive(rows: Iterable[Row], runners, cases: Iterable | None = None) -> list[LedgerCell]:
    """The cells this run's matrix rows settle, per runner (in runners' order) and axis
    (AXES order).  `cases` (Case objects) lets layouts name their sizes (E, H, d_k)."""
    by_case = {c.id: c for c in cases or ()}
    rows = list(rows)
    cells = []
    for runner in runners:
        mine = [r for r in rows if r.runner == runner.name]
        executed = any(r.executed for r in mine if r.outcome.ran) or not any(
            r.outcome.ran for r in mine)
        for axis in AXES:
            derive_axis = DERIVERS.get(axis.id)
            if derive_axis is None or (not executed and axis.id not in MODEL_AXES):
                continue
            cell = derive_axis(runner.name, mine, by_case)
            if cell is not None:
                cells.append(cell)
    return cells


def _system(runner, rows: list[Row]) -> System:
    ran = [r for r in rows if r.runner == runner.name and r.outcome.ran]
    executed = any(r.executed for r in ran) if ran else bool(getattr(runner, "executed", True))
    params = getattr(runner, "params", {}) or {}
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
    witnesses and the rows' reading beside it.  Different words: a `conflict` cell naming
    both pieces of evidence (tests/test_witnesses.py fails on any)."""
    second = f"{row.value}: {row.evidence}"
    if BY_ID[probe.axis].vocabulary is None or probe.value == row.value:
        return replace(probe, witnesses=2, second=second)
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
