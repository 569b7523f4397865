"""Rows back from results.json, to re-render every report without running anything.

results.json holds, beside the rows (Row.as_dict() plus `failure_kinds` and
`output_digest`), the runners' descriptors and the case fields sections read.
An older results.json without them falls back to the registry and cases/.
"""
from __future__ import annotations

import json
from dataclasses import fields
from pathlib import Path
from types import SimpleNamespace

from conformance.run.evaluate import Row
from conformance.compare.verdict import Failure, FailureKind, Outcome

_ROW_FIELDS = {f.name for f in fields(Row)}


def row_from_record(d: dict) -> Row:
    """One Row from its results record (typed fields rebuilt)."""
    d = dict(d)
    extras = dict(d.get("extras") or {})
    graphs = extras.pop("graphs", {})
    messages = d.get("failures") or []
    kinds = d.get("failure_kinds") or [FailureKind.VALUES.value] * len(messages)
    values = {k: v for k, v in d.items() if k in _ROW_FIELDS}
    values.update(outcome=Outcome(d["outcome"]), notes=tuple(d.get("notes") or ()),
                  failures=tuple(Failure(FailureKind(k), m) for k, m in zip(kinds, messages)),
                  extras=extras, graphs=graphs, output_digest=d.get("output_digest"),
                  weight_shapes=d.get("weight_shapes") or {}, typed=d.get("typed") or {})
    return Row(**values)


def _runners(data: dict, rows: list[Row]):
    if "runners" in data:
        return [SimpleNamespace(**r) for r in data["runners"]]
    from conformance.runners import all_runners

    named = {r.runner for r in rows}
    return [r for r in all_runners() if r.name in named]


def _cases(data: dict, rows: list[Row]):
    if "cases" in data:
        return [SimpleNamespace(id=c["id"], title=c.get("title", c["id"]),
                                has_fully_masked_rows=c.get("has_fully_masked_rows", False),
                                mask=SimpleNamespace(key_padding=c.get("key_padding")))
                for c in data["cases"]]
    from conformance.case.loader import load_cases
    from conformance.paths import CASES_DIR

    named = {r.case for r in rows}
    return [c for c in load_cases(CASES_DIR) if c.id in named]


def rows_from_results(path: Path | str):
    """(rows, cases, runners, selection, metadata) from a results.json."""
    data = json.loads(Path(path).read_text(encoding="utf-8"))
    rows = [row_from_record(d) for d in data["rows"]]
    return rows, _cases(data, rows), _runners(data, rows), data.get("selection", ""), \
        data.get("metadata", {})
