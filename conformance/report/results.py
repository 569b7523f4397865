"""Rows back from results.json, to re-render every report without running anything.

results.json (with its row files, results_files.py) holds, beside the rows
(Row.as_dict() plus `failure_kinds` and `output_digest`), the runners' descriptors
and the case fields sections read.
An older results.json without them falls back to the registry and cases/.

The file is untrusted data (it may come from a CI artifact): it is read within
bounds (datafile.py: a regular file, at most CONFORMANCE_MAX_RESULTS_BYTES, JSON
nested at most 32 levels) and every record is checked (records.py: types, case
ids through the loader's slug rule) before a Row is built; anything wrong is one
DataFileError naming the file and the field.
"""
from __future__ import annotations

from dataclasses import fields
from pathlib import Path
from types import SimpleNamespace

from conformance.compare.verdict import Failure, FailureKind, Outcome
from conformance.datafile import DataFileError
from conformance.report.base import FLOATS
from conformance.report.results_files import read_results
from conformance.report.records import check_case, check_record, check_runner, number
from conformance.run.evaluate import Row

_ROW_FIELDS = {f.name for f in fields(Row)}


def row_from_record(d: dict, path: Path | str = "(record)", where: str = "row") -> Row:
    """One Row from its results record (checked first; typed fields rebuilt)."""
    d = check_record(path, d, where)
    extras = dict(d.get("extras") or {})
    graphs = extras.pop("graphs", {})
    messages = d.get("failures") or []
    kinds = d.get("failure_kinds") or [FailureKind.VALUES.value] * len(messages)
    values = {k: v for k, v in d.items() if k in _ROW_FIELDS}
    values.update({k: number(d[k]) for k in (*FLOATS, "rtol", "atol") if k in d})
    values.update(outcome=Outcome(d["outcome"]), notes=tuple(d.get("notes") or ()),
                  failures=tuple(Failure(FailureKind(k), m) for k, m in zip(kinds, messages)),
                  extras=extras, graphs=graphs if isinstance(graphs, dict) else {},
                  output_digest=d.get("output_digest"),
                  weight_shapes=d.get("weight_shapes") or {}, typed=d.get("typed") or {})
    return Row(**values)


def _runners(data: dict, rows: list[Row], path):
    if "runners" in data:
        return [SimpleNamespace(**check_runner(path, r, f"runners[{n}]"))
                for n, r in enumerate(_list(data, "runners", path))]
    from conformance.runners import all_runners

    named = {r.runner for r in rows}
    return [r for r in all_runners() if r.name in named]


def _read_back(c: dict) -> dict:
    """The tags and head sizes findings.py reads, where results.json recorded them
    (heads: [num_heads, query_features, qk_head_dim])."""
    out = {"tags": tuple(c["tags"])} if c["tags"] else {}
    if c["heads"] is not None:
        h = c["heads"]
        out["attention"] = SimpleNamespace(num_heads=h[0], query_features=h[1],
                                           qk_head_dim=h[2])
    return out


def _mask(c: dict) -> SimpleNamespace:
    """The mask facts sections read; causal only where the case has a causal mask
    (sections read it with a default), so a re-rendered page shows the same mask facts."""
    extra = {"causal": c["causal"]} if c["causal"] != "none" else {}
    return SimpleNamespace(key_padding=c["key_padding"], **extra)


def _cases(data: dict, rows: list[Row], path):
    if "cases" in data:
        cases = [check_case(path, c, f"cases[{n}]")
                 for n, c in enumerate(_list(data, "cases", path))]
        return [SimpleNamespace(id=c["id"], title=c["title"],
                                has_fully_masked_rows=c["has_fully_masked_rows"],
                                mask=_mask(c),
                                **_read_back(c)) for c in cases]
    from conformance.case.loader import load_cases
    from conformance.paths import CASES_DIR

    named = {r.case for r in rows}
    return [c for c in load_cases(CASES_DIR) if c.id in named]


def _list(data: dict, key: str, path) -> list:
    if not isinstance(data.get(key), list):
        raise DataFileError(path, f"{key}: expected a list")
    return data[key]


def rows_from_results(path: Path | str):
    """(rows, cases, runners, selection, metadata) from a results.json."""
    data = read_results(path)
    rows = [row_from_record(d, path, f"rows[{n}]")
            for n, d in enumerate(_list(data, "rows", path))]
    selection, meta = data.get("selection", ""), data.get("metadata", {})
    if not isinstance(selection, str) or not isinstance(meta, dict):
        raise DataFileError(path, "selection must be a string and metadata a mapping")
    return rows, _cases(data, rows, path), _runners(data, rows, path), selection, meta
