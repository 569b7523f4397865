"""Portable reports: what check-reports compares exactly, and what by a rule.

A property of the systems (outcomes, parameter counts, weight names and
shapes, behaviours, calls, reasons, ledger cells) must be identical.  A figure
that varies with the CPU (BLAS / oneDNN kernels differ in their last digits)
is compared by FIGURE RULE: two figures a and b agree when
- both are missing (None), or both the same non-finite value; or
- both are far below tolerance: |a| <= tol/10 and |b| <= tol/10; or
- they have the same sign and order of magnitude: max(|a|,|b|) <= 2 min(|a|,|b|).
tol is the row's atol for absolute errors (and other figures), its rtol for
relative errors.  The figures: max_abs_error, max_rel_error, weights_max_abs_error,
weights_max_rel_error, and any non-integer number inside extras and
output_digest.  results.json and results.csv are compared row by row (keyed by
case + runner); index.md, index.html and cases/*.md line by line with every
figure (a number in scientific notation, or a lone 0 where the other side has
one, or any decimal number) masked.  Everything in the run-metadata block (and
index.html's figures block) is ignored.
"""
from __future__ import annotations

import csv
import io
import json
import math
import re
from dataclasses import dataclass

from conformance.report.base import FLOATS

FIGURE = re.compile(r"(?<![\w.])-?(?:\d+\.\d+(?:e[+-]?\d+)?|\de[+-]?\d+|0)(?![\w.])")
# Blocks of text files left out like the metadata block: report/html.py's figures (PNG
# bytes differ across machines).
SKIPPED_BLOCKS = (("<!-- figures: start", "<!-- figures: end -->"),)
TEXT_FILES = ("index.md", "index.html")
IGNORED_KEYS = ("metadata",)


@dataclass(frozen=True)
class Change:
    file: str
    case: str  # or the line number of a text file
    runner: str
    field: str
    old: object
    new: object

    def __str__(self) -> str:
        where = f"{self.case}[{self.runner}]" if self.runner else self.case
        return f"{self.file}: {where} {self.field}: {self.old!r} -> {self.new!r}"


def figures_agree(a, b, tol: float) -> bool:
    """FIGURE RULE (module docstring)."""
    if a is None or b is None or isinstance(a, str) or isinstance(b, str):
        return a == b
    a, b = float(a), float(b)
    if not (math.isfinite(a) and math.isfinite(b)):
        return a == b or (math.isnan(a) and math.isnan(b))
    if abs(a) <= tol / 10 and abs(b) <= tol / 10:
        return True
    if (a < 0) != (b < 0) or a == 0 or b == 0:
        return False
    return max(abs(a), abs(b)) <= 2 * min(abs(a), abs(b))


def _is_figure(v) -> bool:
    return isinstance(v, float) and not (math.isfinite(v) and v.is_integer())


def same_value(a, b, tol: float) -> bool:
    """Exact, except non-integer floats (anywhere inside) by figures_agree."""
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(same_value(a[k], b[k], tol) for k in a)
    if isinstance(a, list) and isinstance(b, list):
        return len(a) == len(b) and all(same_value(x, y, tol) for x, y in zip(a, b))
    if _is_figure(a) or _is_figure(b):
        return (isinstance(a, (int, float)) and isinstance(b, (int, float))
                and figures_agree(a, b, tol))
    return a == b


def tolerance(field: str, row: dict) -> float:
    try:
        return float(row.get("rtol") if field.endswith("rel_error") else row.get("atol"))
    except (TypeError, ValueError):
        return 0.0


def compare_rows(old: list[dict], new: list[dict], file: str) -> list[Change]:
    """Row by row, keyed by (case, runner): figures by the rule, the rest exactly."""
    a = {(r.get("case"), r.get("runner")): r for r in old}
    b = {(r.get("case"), r.get("runner")): r for r in new}
    changes = [Change(file, c, n, "(row)", "present" if (c, n) in a else "absent",
                      "present" if (c, n) in b else "absent")
               for c, n in sorted(set(a) ^ set(b), key=str)]
    for key in [k for k in a if k in b]:
        ra, rb = a[key], b[key]
        for name in list(ra) + [k for k in rb if k not in ra]:
            va, vb = ra.get(name), rb.get(name)
            tol = max(tolerance(name, ra), tolerance(name, rb))
            ok = (figures_agree(va, vb, tol) if name in FLOATS
                  else same_value(va, vb, tol))
            if not ok:
                changes.append(Change(file, key[0], key[1], name, va, vb))
    return changes


def compare_json(old_text: str, new_text: str, file: str = "results.json") -> list[Change]:
    old, new = json.loads(old_text), json.loads(new_text)
    changes = compare_rows(old.get("rows", []), new.get("rows", []), file)
    for key in sorted(set(old) | set(new)):
        if key not in ("rows", *IGNORED_KEYS) and old.get(key) != new.get(key):
            changes.append(Change(file, key, "", "(top level)", old.get(key), new.get(key)))
    return changes


def _csv_rows(text: str) -> list[dict]:
    rows = []
    for raw in csv.DictReader(io.StringIO(text)):
        row = {}
        for k, v in raw.items():
            if k in FLOATS or k in ("rtol", "atol"):
                row[k] = float(v) if v not in ("", None) else None
            elif k == "extras" and v:
                row[k] = json.loads(v)
            else:
                row[k] = v
        rows.append(row)
    return rows


def compare_csv(old_text: str, new_text: str, file: str = "results.csv") -> list[Change]:
    old, new = _csv_rows(old_text), _csv_rows(new_text)
    header_a = old_text.split("\n", 1)[0]
    header_b = new_text.split("\n", 1)[0]
    changes = [] if header_a == header_b else [Change(file, "header", "", "columns",
                                                      header_a, header_b)]
    return changes + compare_rows(old, new, file)


def _line_agrees(a: str, b: str) -> bool:
    """Equal once figures are masked; a lone 0 may face a figure, never other text."""
    if a == b:
        return True
    return FIGURE.split(a) == FIGURE.split(b)


def compare_text(old_text: str, new_text: str, file: str) -> list[Change]:
    """Line by line with figures masked (texts already stripped of metadata)."""
    import difflib

    a, b = old_text.splitlines(), new_text.splitlines()
    changes = []
    matcher = difflib.SequenceMatcher(None, a, b, autojunk=False)
    for op, i1, i2, j1, j2 in matcher.get_opcodes():
        if op == "equal":
            continue
        pairs = list(zip(a[i1:i2], b[j1:j2]))
        if op == "replace" and i2 - i1 == j2 - j1 and all(_line_agrees(x, y) for x, y in pairs):
            continue
        changes.append(Change(file, f"line {i1 + 1}", "", "text", "\n".join(a[i1:i2]),
                              "\n".join(b[j1:j2])))
    return changes


def compare_ledger(old_text: str, new_text: str, file: str = "conventions.json") -> list[Change]:
    """Cell by cell, keyed by (system, axis): every field exact, except the figures
    inside the evidence text (a probe's max |difference| varies with the CPU like any
    error figure); axes and systems exact."""
    old, new = json.loads(old_text), json.loads(new_text)
    changes = [Change(file, part, "", "list", old.get(part), new.get(part))
               for part in ("axes", "systems") if old.get(part) != new.get(part)]
    cells_a = {(c["system"], c["axis"]): c for c in old.get("cells", [])}
    cells_b = {(c["system"], c["axis"]): c for c in new.get("cells", [])}
    for key in sorted(set(cells_a) | set(cells_b)):
        a, b = cells_a.get(key), cells_b.get(key)
        if a is None or b is None:
            changes.append(Change(file, f"{key[0]} / {key[1]}", "", "cell", a, b))
            continue
        for field in sorted(set(a) | set(b)):
            x, y = a.get(field), b.get(field)
            same = (_line_agrees(str(x), str(y)) if field == "evidence" else x == y)
            if not same:
                changes.append(Change(file, key[0], key[1], field, x, y))
    return changes


def compare_file(name: str, old_text: str | None, new_text: str | None) -> list[Change]:
    """One report file (`name` relative to the report folder)."""
    from conformance.report.render import strip_metadata

    if old_text is None or new_text is None:
        return [Change(name, "(file)", "", "exists", old_text is not None, new_text is not None)]
    if name.endswith("results.json"):
        return compare_json(old_text, new_text, name)
    if name.endswith(".csv"):
        return compare_csv(old_text, new_text, name)
    if name.endswith("conventions.json"):
        return compare_ledger(old_text, new_text, name)
    if name.endswith(".json"):  # other data: exact outside metadata
        if strip_metadata(old_text, name) == strip_metadata(new_text, name):
            return []
        return [Change(name, "(file)", "", "content", "…", "differs")]
    return compare_text(_skip_blocks(strip_metadata(old_text, name)),
                        _skip_blocks(strip_metadata(new_text, name)), name)


def _skip_blocks(text: str) -> str:
    for start, end in SKIPPED_BLOCKS:
        while start in text and end in text.split(start, 1)[1]:
            head, rest = text.split(start, 1)
            text = head + rest.split(end, 1)[1]
    return text


def report_names(folder) -> list[str]:
    """The report files of a folder, relative to it: REPORT_FILES, the ledger files and
    the per-case pages that exist there."""
    from pathlib import Path

    from conformance.report.pages import PAGES_DIR
    from conformance.report.render import REPORT_FILES

    folder = Path(folder)
    pages = sorted(f"{PAGES_DIR}/{p.name}" for p in (folder / PAGES_DIR).glob("*.md"))
    ledger = [n for n in LEDGER_FILES if (folder / n).exists()]
    return list(REPORT_FILES) + ledger + pages


LEDGER_FILES = ("conventions.json", "conventions.md")


def compare_reports(old, new) -> list[Change]:
    """Every change between two report folders (old: the baseline)."""
    from pathlib import Path

    def read(folder, name):
        path = Path(folder) / name
        return path.read_text(encoding="utf-8") if path.exists() else None

    names = list(dict.fromkeys(report_names(old) + report_names(new)))
    return [c for n in names for c in compare_file(n, read(old, n), read(new, n))]


def differences(old, new) -> list[str]:
    """compare_reports as lines (empty = the reports hold)."""
    return [str(c) for c in compare_reports(old, new)]
