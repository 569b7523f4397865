"""The ledger's cells and columns: what one (system, axis) cell holds, and its checks.

Layer conventions: the types ledger.py (merging probes and rows) and derived.py (the cells
the matrix rows settle) share.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from conformance.conventions.axes import AXES, BY_ID, Convention
from conformance.run.evaluate import Row

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
    # a `depends` cell: the word each condition reads (a probe agrees if its word is one)
    words: tuple[str, ...] = ()

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
    """The ledger's cell of a probe's Convention, its evidence labelled probe[<runner>] (a
    probe's own opening "<runner>, " or "<runner>: " is that label already: said once, the
    reports stay within their size)."""
    prefix = f"probe[{runner}]"
    text = conv.evidence
    for opening in (f"{runner}, ", f"{runner}: "):
        if text.startswith(opening):
            text = text[len(opening):]
    evidence = text if text.startswith(prefix) else f"{prefix}: {text}"
    return LedgerCell(runner, conv.axis, conv.value, evidence, conv.documented,
                      conv.documented_source, PROBE)


def unlabelled(system: str, evidence: str) -> str:
    """A cell's evidence without from_probe's probe[<system>] label, for a view that names
    the system and the source beside it (conventions.md's bullets, the page's ledger)."""
    label = f"probe[{system}]: "
    return evidence[len(label):] if evidence.startswith(label) else evidence


def _bounded(text: str) -> str:
    text = " ".join(text.split())
    return text if len(text) <= EVIDENCE_LIMIT else text[:EVIDENCE_LIMIT - 3] + "..."


def _at(row: Row) -> str:
    return f"{row.case}[{row.runner}]"


def _cell(row_or_name, axis: str, value: str, evidence: str) -> LedgerCell:
    name = row_or_name.runner if isinstance(row_or_name, Row) else row_or_name
    return LedgerCell(name, axis, value, _bounded(evidence))
