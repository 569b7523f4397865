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
import math
import re
from pathlib import Path

from conformance.datafile import DataFileError, excerpt, inside, read_json

RESULTS_FILE = "results.json"
ROWS_DIR = "results"
MAX_ROW_FILES = 1000  # runners of one run; the registry holds about 50
CSV_DROPPED = ("output_digest",)  # re-rendering data, kept in the JSON rows only
_PART = re.compile(rf"{ROWS_DIR}/([A-Za-z0-9][A-Za-z0-9._-]{{0,99}})\.json")


def json_safe(obj):
    """Strict JSON: NaN becomes null, an infinity the string 'inf' / '-inf'."""
    if isinstance(obj, float) and not math.isfinite(obj):
        return None if math.isnan(obj) else str(obj)
    if isinstance(obj, dict):
        return {k: json_safe(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [json_safe(v) for v in obj]
    return obj


def part_name(runner: str) -> str:
    """The row file of a runner, relative to the report folder (a runner name is a
    slug of letters, digits, '.', '_', '-'; anything else is refused, not written)."""
    name = f"{ROWS_DIR}/{runner}.json"
    if not _PART.fullmatch(name):
        raise ValueError(f"runner name {runner!r} cannot name a results file")
    return name


def _dump(value) -> str:
    return json.dumps(value, indent=1, ensure_ascii=False, allow_nan=False) + "\n"


def write_results(frame, meta: dict, selection: str, out: Path,
                  described: dict) -> list[Path]:
    """The index and one JSON and one CSV file per runner with rows (in the order of
    `described["runners"]`, then any other runner in row order); returns the paths."""
    out = Path(out)
    names = [r["name"] for r in described.get("runners", [])]
    present = list(dict.fromkeys(frame["runner"])) if "runner" in frame else []
    order = [n for n in names if n in present] + [n for n in present if n not in names]
    (out / ROWS_DIR).mkdir(parents=True, exist_ok=True)
    written, parts = [], []
    for runner in order:
        rows = frame[frame["runner"] == runner]
        part = part_name(runner)
        target = inside(out, out / part)
        target.write_text(_dump({"runner": runner, "rows": json_safe(
            rows.to_dict(orient="records"))}), encoding="utf-8")
        csv_path = target.with_suffix(".csv")
        write_csv(rows, csv_path)
        parts.append(part)
        written += [target, csv_path]
    index = {"metadata": meta, "selection": selection, **described, "row_files": parts}
    (out / RESULTS_FILE).write_text(_dump(index), encoding="utf-8")
    return [out / RESULTS_FILE] + written


def write_csv(frame, path: Path) -> None:
    """Rows flat: nested values as sorted JSON, lists joined by ' | ', every text cell
    one line with formula prefixes neutralised (base.csv_text)."""
    import pandas as pd

    from conformance.report.base import csv_text

    flat = frame.drop(columns=[c for c in CSV_DROPPED if c in frame])
    for col in ("weight_shapes", "extras", "typed"):
        if col in flat:
            flat[col] = flat[col].map(lambda v: json.dumps(v, sort_keys=True))
    for col in ("notes", "failures", "failure_kinds"):
        if col in flat:
            flat[col] = flat[col].map(" | ".join)
    for col in flat.columns:
        flat[col] = pd.Series([csv_text(v) for v in flat[col]], index=flat.index, dtype=object)
    flat.to_csv(path, index=False, lineterminator="\n")


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
    rows = []
    for n, name in enumerate(row_file_names(path, data)):
        rows += _part_rows(path, n, name)
    return {**data, "rows": rows}
