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
from dataclasses import dataclass, field
from typing import Any, Iterable, Mapping

from conformance.contract.axes import AXES, BY_ID, NA, REFUSED
from conformance.contract.runner import Convention
from conformance.run.evaluate import FEATURE_REFUSAL, Row
from conformance.compare.verdict import FailureKind, Outcome

NOT_PROBED = "not_probed"  # no probe and no row of this run settles the cell
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
                "contradicts_documentation": self.contradicts_documentation}


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
    if axis.vocabulary and cell.value not in axis.vocabulary and cell.value != NOT_PROBED:
        return (f"axis {cell.axis}: {cell.value!r} is not a word of its vocabulary "
                f"({', '.join(axis.vocabulary)})")
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
    return _cell(row, "returned_weights", word,
                 f"{_at(row)}: the call returns {row.weights_returned} weights"
                 + (f" (native call: {row.native_call})" if row.native_call else ""))


def _float64(name: str, rows: list[Row], cases) -> LedgerCell | None:
    rows = [r for r in rows if r.dtype == "float64"
            and (r.executed or r.outcome is Outcome.NOT_EXPRESSIBLE)]
    below = [r for r in rows if r.outcome.ran and
             (r.failed(FailureKind.VALUES) or r.failed(FailureKind.WEIGHTS))]
    exact = [r for r in rows if r.outcome.ran and r not in below]
    refused = [r for r in rows if r.outcome is Outcome.NOT_EXPRESSIBLE]
    if below:
        worst = max(below, key=lambda r: max(r.max_abs_error or 0, r.weights_max_abs_error or 0))
        err = max(worst.max_abs_error or 0, worst.weights_max_abs_error or 0)
        return _cell(worst, "float64_compute", "below_float64",
                     f"{_at(worst)}: max abs error {err:.2e} against the float64 oracle "
                     f"(atol {worst.atol:g}, rtol {worst.rtol:g})"
                     + (f"; known: {worst.known_mismatch}" if worst.known_mismatch else ""))
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


_QUERY = (re.compile(r"in_proj_weight$"), re.compile(r"q_proj"),
          re.compile(r"query(?!.*bias)", re.I), re.compile(r"(^|[/._])w_?q($|[/._])", re.I))


def _query_weight(shapes: Mapping[str, list[int]]) -> str | None:
    for pattern in _QUERY:
        for name in shapes:
            if pattern.search(name) and "bias" not in name.lower():
                return name
    return None


def _symbols(case) -> list[tuple[str, int]]:
    """The sizes a dimension may be, in the order a name is chosen when several fit."""
    a = case.attention
    return [("E", a.query_features), ("H", a.num_heads), ("d_k", a.qk_head_dim),
            ("H*d_k", a.num_heads * a.qk_head_dim), ("3E", 3 * a.query_features),
            ("E_k", a.key_features), ("E_v", a.value_features), ("H_kv", a.num_kv_heads),
            ("d_v", a.v_head_dim), ("3*H*d_k", 3 * a.num_heads * a.qk_head_dim)]


ROLE = {"E": "in", "E_k": "in", "E_v": "in", "H": "heads", "H_kv": "heads", "d_k": "dim",
        "d_v": "dim", "H*d_k": "out", "3E": "out", "3*H*d_k": "out"}


def _clear(shape: list[int], case) -> int:
    """How many dimensions of `shape` have one role (in, out, heads, dim) in this case."""
    if case is None:
        return -1
    syms = _symbols(case)
    return sum(len({ROLE[s] for s, v in syms if v == n}) == 1 for n in shape)


def _layout(name: str, shape: list[int], case) -> str:
    if case is None:
        return f"{name} {tuple(shape)}"
    syms = [next((s for s, v in _symbols(case) if v == n), str(n)) for n in shape]
    roles = [ROLE.get(s, "?") for s in syms]
    return f"{name} ({', '.join(syms)}) {' x '.join(roles)}"


def _weight_layout(name: str, rows: list[Row], cases) -> LedgerCell | None:
    found = [(r, _query_weight(r.weight_shapes)) for r in rows if r.weight_shapes]
    found = [(r, q) for r, q in found if q]
    if not found:
        return None
    # the row whose query weight's dimensions each have one reading (E != H*d_k ...)
    row, q = max(found, key=lambda rq: _clear(rq[0].weight_shapes[rq[1]], cases.get(rq[0].case)))
    value = _layout(q, row.weight_shapes[q], cases.get(row.case))
    others = ", ".join(f"{n} {tuple(s)}" for n, s in row.weight_shapes.items() if n != q)
    return _cell(row, "weight_layout", value,
                 f"{_at(row)}: {q} {tuple(row.weight_shapes[q])}; also {others or 'nothing'}")


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


def merge(runner: str, probe: Iterable[Convention] | BaseException | None,
          derived: Iterable[LedgerCell], probes_state: Mapping[str, Any]) -> list[LedgerCell]:
    """One runner's cells, one per axis in AXES order: probe > derived > not_probed."""
    by_axis = {c.axis: c for c in derived if c.system == runner}
    if probe is not None and not isinstance(probe, BaseException):
        for conv in probe:
            if conv.axis in BY_ID:
                by_axis[conv.axis] = from_probe(runner, conv)
    return [by_axis.get(a.id) or LedgerCell(runner, a.id, NOT_PROBED,
                                            _absent(runner, probes_state), source=NONE)
            for a in AXES]


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


__all__ = ["NOT_PROBED", "NA", "AGGREGATE_AXES", "LedgerCell", "Ledger", "System", "derive",
           "build", "merge", "cell_problem", "from_probe"]
