"""The shard file: what `merge` needs of one shard's run, as versioned JSON data.

A shard file travels between machines (a CI artifact another job uploaded, maybe
from a fork's pull request), so it is data and nothing else: JSON, never pickle
(reading it runs no code), read within bounds (datafile.py: a regular file of at
most CONFORMANCE_MAX_RESULTS_BYTES, nested at most 32 levels) and checked field by
field before use; a malformed file is one DataFileError naming the file and the
field.  Layout (FORMAT, VERSION):

    {"format": "attention-conformance shard", "version": 2,
     "shard": [I, N], "runners": [name...], "cases": [id...], "parts": [text...],
     "total": items, "default_cases": bool,
     "rows": [results record...],            # report/records.py checks each
     "probes": {runner: {"cells": [{axis, value, evidence, documented,
                                    documented_source}...]} | {"error": text}},
     "seconds": [[case, runner, seconds]...]}

Rows round-trip through the results record (report/base.record, results.row_from_record);
non-finite figures are written as JSON's NaN / Infinity tokens, which Python reads back.
"""
from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path

from conformance.conventions.axes import Convention
from conformance.datafile import DataFileError, check_id, read_json
from conformance.report.records import RUNNER_NAME

SHARD_FILE = "shard.json"
FORMAT, VERSION = "attention-conformance shard", 2
_CELL = ("axis", "value", "evidence", "documented", "documented_source")


def _probe(value) -> dict:
    if isinstance(value, BaseException):
        return {"error": str(value)}
    return {"cells": [{k: getattr(c, k) for k in _CELL} for c in value]}


def encode(record: dict) -> str:
    """The shard file's text of `record` (plugin.shards.write_shard builds it)."""
    from conformance.report.base import record as row_record

    data = {"format": FORMAT, "version": VERSION, "shard": list(record["shard"]),
            "runners": record["runners"], "cases": record["cases"], "parts": record["parts"],
            "total": record["total"], "default_cases": record["default_cases"],
            "rows": [row_record(r) for r in record["rows"].values()],
            "probes": {k: _probe(v) for k, v in record["probes"].items()},
            "seconds": [[c, r, s] for (c, r), s in record["seconds"].items()]}
    return json.dumps(data, ensure_ascii=False, indent=0) + "\n"


def write(out: Path, record: dict) -> Path:
    """DIR/SHARD_FILE, written to a temporary file and renamed (whole or absent)."""
    path = Path(out) / SHARD_FILE
    fd, tmp = tempfile.mkstemp(prefix=".shard-", dir=out)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(encode(record))
        os.replace(tmp, path)
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)
    return path


def _need(path, cond: bool, field: str, what: str) -> None:
    if not cond:
        raise DataFileError(path, f"{field}: expected {what}")


def _strings(value) -> bool:
    return isinstance(value, list) and all(isinstance(v, str) for v in value)


def _header(path, data) -> tuple[int, int]:
    _need(path, isinstance(data, dict), "(document)", "a JSON object (a shard file)")
    _need(path, data.get("format") == FORMAT, "format", f"{FORMAT!r}")
    _need(path, data.get("version") == VERSION, "version",
          f"{VERSION} (written by this checkout's suite; rerun the shard)")
    shard = data.get("shard")
    _need(path, isinstance(shard, list) and len(shard) == 2 and all(
        type(n) is int for n in shard) and 1 <= shard[0] <= shard[1] <= 10_000,
          "shard", "[I, N] with 1 <= I <= N")
    _need(path, _strings(data.get("runners")) and all(
        RUNNER_NAME.fullmatch(n) for n in data["runners"]), "runners", "a list of runner names")
    _need(path, _strings(data.get("cases")), "cases", "a list of case ids")
    for n, cid in enumerate(data["cases"]):
        check_id(path, cid, f"cases[{n}]")
    _need(path, _strings(data.get("parts")), "parts", "a list of strings")
    _need(path, type(data.get("total")) is int and data["total"] >= 0, "total",
          "an integer >= 0")
    _need(path, isinstance(data.get("default_cases"), bool), "default_cases", "a boolean")
    return shard[0], shard[1]


def _probes(path, probes) -> dict:
    _need(path, isinstance(probes, dict), "probes", "a mapping runner -> cells or error")
    out = {}
    for name, p in probes.items():
        where = f"probes.{name[:60]}"
        _need(path, RUNNER_NAME.fullmatch(name) is not None, where, "a runner name")
        if isinstance(p, dict) and set(p) == {"error"} and isinstance(p["error"], str):
            out[name] = RuntimeError(p["error"])
            continue
        _need(path, isinstance(p, dict) and set(p) == {"cells"} and isinstance(
            p["cells"], list), where, "{cells: [...]} or {error: text}")
        cells = []
        for c in p["cells"]:
            ok = isinstance(c, dict) and set(c) == set(_CELL) and all(
                isinstance(c[k], str) for k in _CELL if k != "documented") and (
                c["documented"] is None or isinstance(c["documented"], str))
            _need(path, ok, f"{where}.cells[]", f"a mapping of {list(_CELL)} (strings)")
            cells.append(Convention(**c))
        out[name] = cells
    return out


MAX_SECONDS = 1e7  # seconds of one item (about 115 days): more is not a timing


def _seconds(path, raw) -> dict:
    """{(case, runner): seconds}: each entry a case id, a runner name and a finite number
    of seconds in [0, MAX_SECONDS] (the metadata's mean per runner is written as JSON,
    which holds no NaN, and an integer too large for a float is no timing)."""
    _need(path, isinstance(raw, list), "seconds", "a list of [case, runner, seconds]")
    out = {}
    for n, s in enumerate(raw):
        where = f"seconds[{n}]"
        _need(path, isinstance(s, list) and len(s) == 3, where, "[case, runner, seconds]")
        check_id(path, s[0], f"{where}[0]")
        _need(path, isinstance(s[1], str) and RUNNER_NAME.fullmatch(s[1]) is not None,
              f"{where}[1]", "a runner name")
        ok = type(s[2]) in (int, float) and 0 <= s[2] <= MAX_SECONDS  # NaN compares False
        _need(path, ok, f"{where}[2]",
              f"a finite number of seconds from 0 to {MAX_SECONDS:g}")
        out[(s[0], s[1])] = float(s[2])
    return out


def read(path: Path | str) -> dict:
    """A checked shard file: the record plugin.shards.merge reads (rows as Row objects,
    probes as Conventions or RuntimeError, seconds keyed (case, runner))."""
    from conformance.report.results import row_from_record

    path = Path(path)
    data = read_json(path, "a shard file (shard.json) written by --shard I/N")
    shard = _header(path, data)
    rows_raw, seconds_raw = data.get("rows"), data.get("seconds")
    _need(path, isinstance(rows_raw, list), "rows", "a list of results records")
    seconds = _seconds(path, seconds_raw)
    rows = {}
    for n, d in enumerate(rows_raw):
        row = row_from_record(d, path, f"rows[{n}]")
        _need(path, (row.case, row.runner) not in rows, f"rows[{n}]",
              f"one row per item ({row.case}[{row.runner}] is given twice)")
        rows[(row.case, row.runner)] = row
    return {"shard": shard, "rows": rows, "probes": _probes(path, data.get("probes")),
            "seconds": seconds,
            **{k: data[k] for k in ("runners", "cases", "parts", "total", "default_cases")}}
