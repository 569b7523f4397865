"""results.json and its row files: the run's data, split so that no file grows with the matrix.

The full matrix's rows ran to 6.5 MB in one file (and its CSV to 1.9 MB); every runner
added makes them larger, and a repository should hold no file over 1 MB.  So:

- ``results.json`` is the index: the run metadata, the selection, the runners' and
  cases' descriptors (what sections read to re-render) and ``row_files``, the list of
  the files holding the rows, in runner order;
- ``results/<runner>.json`` holds one runner's rows (``{"runner": name, "rows": [...]}``)
  and ``results/<runner>.csv`` the same rows flat (nested values as sorted JSON, free
  text on one line, formula prefixes neutralised).

Reading back (``read_results``) treats every file as untrusted data (datafile.py:
bounded, regular files, depth-checked JSON): ``row_files`` must be a list of at most
MAX_ROW_FILES names of the form ``results/<slug>.json`` whose files lie inside the
index's folder; a problem in a part is one DataFileError naming the index, the entry
and the part's problem.  An index that still holds its rows inline (the format before
the split) is read as it is.
"""
from __future__ import annotations

import json
import re
from pathlib import Path

from conformance.datafile import (BYTES_ENV, DataFileError, excerpt, inside, max_bytes,
                                  read_json)
from conformance.report.json_text import dumps

RESULTS_FILE = "results.json"
ROWS_DIR = "results"
MAX_ROW_FILES = 1000  # runners of one run; the registry holds about 50
CSV_DROPPED = ("output_digest",)  # re-rendering data, kept in the JSON rows only
_PART = re.compile(rf"{ROWS_DIR}/([A-Za-z0-9][A-Za-z0-9._-]{{0,99}})\.json")


def part_name(runner: str) -> str:
    """The row file of a runner, relative to the report folder (a runner name is a
    slug of letters, digits, '.', '_', '-'; anything else is refused, not written)."""
    name = f"{ROWS_DIR}/{runner}.json"
    if not _PART.fullmatch(name):
        raise ValueError(f"runner name {runner!r} cannot name a results file")
    return name


def _dump(value, safe: bool = False) -> str:
    return dumps(value, safe) + "\n"


def write_results(frame, meta: dict, selection: str, out: Path,
                  described: dict) -> list[Path]:
    """The index and one JSON and one CSV file per runner with rows (in the order of
    `described["runners"]`, then any other runner in row order); returns the paths."""
    out = Path(out)
    names = [r["name"] for r in described.get("runners", [])]
    present = list(dict.fromkeys(frame["runner"])) if "runner" in frame else []
    order = [n for n in names if n in present] + [n for n in present if n not in names]
    (out / ROWS_DIR).mkdir(parents=True, exist_ok=True)
    by_runner = _plain_rows(frame)
    written, parts = [], []
    for runner in order:
        part = part_name(runner)
        target = inside(out, out / part)
        csv_path = target.with_suffix(".csv")
        if by_runner is None:  # values pandas would convert: its own way
            rows = frame[frame["runner"] == runner]
            records = rows.to_dict(orient="records")
            write_csv(rows, csv_path)
        else:
            records = [dict(zip(frame.columns, r)) for r in by_runner[runner]]
            _write_csv_rows(list(frame.columns), by_runner[runner], csv_path)
        target.write_text(_dump({"runner": runner, "rows": records}, safe=True),
                          encoding="utf-8")
        parts.append(part)
        written += [target, csv_path]
    index = {"metadata": meta, "selection": selection, **described, "row_files": parts}
    (out / RESULTS_FILE).write_text(_dump(index), encoding="utf-8")
    return [out / RESULTS_FILE] + written


_PLAIN = frozenset((str, int, float, bool, type(None), dict, list, tuple))


def _plain_rows(frame) -> dict[str, list[list]] | None:
    """The frame's rows as lists of values, by runner name in row order, when every
    column holds Python objects of plain types (what pandas' to_dict and to_csv pass on
    as they are); None otherwise."""
    if ("runner" not in frame or not frame.columns.is_unique
            or any(type(c) is not str for c in frame.columns)
            or any(str(dtype) != "object" for dtype in frame.dtypes)):
        return None
    rows = frame.to_numpy(dtype=object).tolist()
    if any(type(v) not in _PLAIN for row in rows for v in row):
        return None
    col = frame.columns.get_loc("runner")
    by_runner: dict[str, list[list]] = {}
    for row in rows:
        if type(row[col]) is not str:
            return None
        by_runner.setdefault(row[col], []).append(row)
    return by_runner


def _csv_cell(column: str):
    """What write_csv makes of a value of `column`, before base.csv_text."""
    if column in _CSV_JSON:
        return lambda v: json.dumps(v, sort_keys=True)
    if column in _CSV_JOINED:
        return " | ".join
    return None


_CSV_JSON = ("weight_shapes", "extras", "typed")
_CSV_JOINED = ("notes", "failures", "failure_kinds")


def write_csv(frame, path: Path) -> None:
    """Rows flat: nested values as sorted JSON, lists joined by ' | ', every text cell
    one line with formula prefixes neutralised (base.csv_text)."""
    import pandas as pd

    from conformance.report.base import csv_text

    flat = frame.drop(columns=[c for c in CSV_DROPPED if c in frame])
    for col in _CSV_JSON:
        if col in flat:
            flat[col] = flat[col].map(lambda v: json.dumps(v, sort_keys=True))
    for col in _CSV_JOINED:
        if col in flat:
            flat[col] = flat[col].map(" | ".join)
    for col in flat.columns:
        flat[col] = pd.Series([csv_text(v) for v in flat[col]], index=flat.index, dtype=object)
    flat.to_csv(path, index=False, lineterminator="\n")


def _write_csv_rows(columns: list[str], rows: list[list], path: Path) -> None:
    """write_csv of plain rows (_plain_rows) with the csv module, as pandas' to_csv writes
    them: its dialect, a missing value (None, NaN) as an empty cell, other values as
    they are (the csv module writes a float by repr, anything else by str)."""
    import csv

    from conformance.report.base import csv_text

    keep = [n for n, c in enumerate(columns) if c not in CSV_DROPPED]
    cells = [(n, _csv_cell(columns[n])) for n in keep]
    with open(path, "w", encoding="utf-8", newline="") as f:
        writer = csv.writer(f, lineterminator="\n", delimiter=",", quoting=csv.QUOTE_MINIMAL,
                            doublequote=True, escapechar=None, quotechar='"')
        writer.writerow([columns[n] for n in keep])
        for row in rows:
            line = []
            for n, cell in cells:
                v = csv_text(row[n] if cell is None else cell(row[n]))
                line.append("" if v is None or (type(v) is float and v != v) else v)
            writer.writerow(line)


def row_file_names(index: Path, data: dict) -> list[str]:
    """The checked `row_files` entries of an index (module docstring)."""
    names = data.get("row_files")
    if not isinstance(names, list):
        raise DataFileError(index, "row_files: expected a list of results/<runner>.json names")
    if len(names) > MAX_ROW_FILES:
        raise DataFileError(index, f"row_files: {len(names)} entries, at most {MAX_ROW_FILES}")
    for n, name in enumerate(names):
        if not isinstance(name, str) or not _PART.fullmatch(name):
            raise DataFileError(index, f"row_files[{n}]: {excerpt(repr(name))} is not a "
                                f"{ROWS_DIR}/<runner>.json name (a slug of letters, digits, "
                                "'.', '_', '-')")
    if len(set(names)) != len(names):
        raise DataFileError(index, "row_files: a file is listed twice")
    return names


def _part_rows(index: Path, n: int, name: str) -> list:
    folder = index.parent
    try:
        path = inside(folder, folder / name)
        part = read_json(path, "a results file of one runner")
    except DataFileError as exc:
        raise DataFileError(index, f"row_files[{n}] {name}: {exc.problem}") from None
    if not isinstance(part, dict) or not isinstance(part.get("rows"), list):
        raise DataFileError(index, f"row_files[{n}] {name}: expected a JSON object with a "
                            "'rows' list")
    return part["rows"]


def read_results(path: Path | str) -> dict:
    """The index of `path` with its rows gathered under "rows" (module docstring)."""
    path = Path(path)
    data = read_json(path, "a results.json written by the suite")
    if not isinstance(data, dict):
        raise DataFileError(path, f"expected a JSON object with 'row_files', got "
                            f"{type(data).__name__}")
    if "row_files" not in data:
        return data  # rows inline (before the split), or none: the caller checks
    rows, used, limit = [], 0, max_bytes()
    for n, name in enumerate(row_file_names(path, data)):
        part = path.parent / name
        used += part.stat().st_size if part.is_file() else 0
        if used > limit:  # each file is bounded, and so are all of them together
            raise DataFileError(path, f"row_files: the rows take more than {limit:,} bytes "
                                f"in all (raise the bound with {BYTES_ENV}=BYTES if genuine)")
        rows += _part_rows(path, n, name)
    return {**data, "rows": rows}
