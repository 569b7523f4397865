"""index.html: one self-contained page (inline CSS and JS, figures as data: URIs).

- the case x runner matrix, each cell coloured by outcome, showing the max abs
  error (or, with the "parameters" toggle, the system's parameter count);
- filters by framework and runner (columns), tag and outcome (rows);
- a per-case view (click a case): its configuration, each runner's native call,
  weight names and shapes, figures, reason, and its conventions-ledger cells
  when a ledger is passed;
- the figures of plots.py, then every report section as a table, then the run
  metadata.

Safety: every string from a case file or a framework is escaped with
html.escape; the data the script reads is JSON in a <script type=
"application/json"> with '<', '>' and '&' written as \\u escapes (so neither
'</script>' nor '<!--' can end it); the script writes only with textContent; a
Content-Security-Policy allows no network and only this page's own script (by
hash), so even an unescaped <script> would not run.

Deterministic: no time outside the run-metadata block; the figures, whose PNG
bytes differ across machines (font rasterisation), sit between FIGURES_START
and FIGURES_END so a freshness check can leave them out.
"""
from __future__ import annotations

import base64
import dataclasses
import hashlib
import json
import math
import re
from collections.abc import Mapping
from importlib import resources
from pathlib import Path
from urllib.parse import quote

from conformance.conventions.cells import unlabelled
from conformance.report import plots
from conformance.report.answers_html import diff_axes, diff_block, headline_block
from conformance.report.base import fmt
from conformance.report.escaping import html_text, shown
from conformance.report.html_figures import figures_data, figures_text  # noqa: F401
from conformance.report.html_matrix import (STABLE_REASONS, expand_matrix_cell, matrix_cell,
                                            matrix_rows, matrix_table)

FIGURES_START = "<!-- figures: start (PNG bytes differ across machines) -->"
FIGURES_END = "<!-- figures: end -->"
KNOWN = "known mismatch"  # the label of a declared failure (sections.KNOWN_MISMATCH)
FILTERS = ("framework", "runner", "tag", "outcome")
_CASE_FIELDS = ("attention", "inputs", "mask", "expect", "weights", "typed")
_TITLE = "Attention conformance report"


def _asset(name: str) -> str:
    return resources.files(__package__).joinpath("assets", name).read_text(encoding="utf-8")


def _markers() -> tuple[str, str]:
    from conformance.report.base import METADATA_END, METADATA_START

    return METADATA_START, METADATA_END

_UNSAFE = re.compile("[\x00-\x08\x0b\x0c\x0e-\x1f\x7f-\x9f\u061c\u200e\u200f\u202a-\u202e"
                     "\u2066-\u2069]")


def e(value) -> str:
    """Text or attribute value, escaped (quotes too, bidi shown: escaping.html_text)."""
    return html_text(value)


def _shown_strings(obj):
    """Every string of `obj` (keys too) with its control and bidi characters shown as
    ‹U+XXXX› (escaping.shown): report.js writes them with textContent, where an escaped
    U+202E would still reorder what the reader sees."""
    if isinstance(obj, str):
        return shown(obj)
    if isinstance(obj, Mapping):
        return {shown(k) if isinstance(k, str) else k: _shown_strings(v)
                for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [_shown_strings(v) for v in obj]
    return obj


def script_json(obj) -> str:
    """JSON safe inside <script>: no '<', '>' or '&' (so no '</script>', no '<!--')."""
    text = json.dumps(_shown_strings(obj), ensure_ascii=False, allow_nan=False,
                      separators=(",", ":"))
    return (text.replace("<", "\\u003c").replace(">", "\\u003e").replace("&", "\\u0026")
            .replace("\u2028", "\\u2028").replace("\u2029", "\\u2029"))


def plain(obj):
    """A case's field as JSON-able data (dataclasses, mappings, tuples; NaN -> None), a
    dataclass without the fields it leaves unset (None, False)."""
    if dataclasses.is_dataclass(obj) and not isinstance(obj, type):
        return {f.name: plain(v) for f in dataclasses.fields(obj)
                if (v := getattr(obj, f.name)) is not None and v is not False}
    if isinstance(obj, Mapping):
        return {str(k): plain(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [plain(v) for v in obj]
    if isinstance(obj, float) and not math.isfinite(obj):
        return None if math.isnan(obj) else str(obj)
    if obj is None or isinstance(obj, (bool, int, float, str)):
        return obj
    return str(obj)


def _number(v) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)


def label(r) -> str:
    """The outcome word a cell is coloured by (a declared failure: 'known mismatch')."""
    outcome = str(r["outcome"])
    return KNOWN if r["known_mismatch"] and outcome in ("mismatch", "error") else outcome


def _short(outcome: str) -> str:
    return {"skipped": "skip", "not_expressible": "n/e"}.get(outcome, outcome)


def cell_texts(r) -> tuple[str, str]:
    """(error view, parameter view) of one row's cell."""
    outcome = str(r["outcome"])
    if outcome not in ("pass", "behaviour", "mismatch"):
        return _short(outcome), _short(outcome)
    err = fmt(r["max_abs_error"]) if _number(r["max_abs_error"]) else outcome
    if r.get("count_method"):  # over the numbers budget: parameters only (counting.py)
        err = "count only"
    params = r["parameters"] if _number(r["parameters"]) else ""
    if _number(r["projection_parameters"]):
        params = f"+{r['projection_parameters']} given"
    model = "" if r["executed"] else " (m)"
    return err + model, f"{params}{model}"


def order(frame, cases, runners) -> tuple[list[str], list[str]]:
    """Case ids and runner names of the frame, in case-file and column order."""
    ids = list(dict.fromkeys([c.id for c in cases] + list(frame["case"])))
    names = list(dict.fromkeys([r.name for r in runners] + list(frame["runner"])))
    have_c, have_r = set(frame["case"]), set(frame["runner"])
    return [c for c in ids if c in have_c], [n for n in names if n in have_r]


def _options(name: str, values) -> str:
    opts = "".join(f'<option value="{e(v)}">{e(v)}</option>' for v in values)
    return (f'<label>{name} <select id="filter-{name}"><option value="">all</option>'
            f"{opts}</select></label>")


def controls(frameworks, names, tags, outcomes) -> str:
    legend = "".join(f'<span class="o-{e(o.replace(" ", "-"))}">{e(o)}</span>'
                     for o in outcomes)
    return ('<div id="controls">' + _options("framework", frameworks)
            + _options("runner", names) + _options("tag", tags) + _options("outcome", outcomes)
            + '<label><input type="checkbox" id="view-params"> show parameter counts</label>'
            + f'<span class="legend">{legend}</span></div>')


SILENT_CELLS = ("not_applicable", "not_probed")  # left out of the page (conventions.md has them)
EVIDENCE_LIMIT = 40  # characters of a cell's evidence in the page (its axis page: all)
NOTE_LIMIT = 90  # characters of a row's note in the page (the case's page, cases/<id>.md: all)


LEDGER_FIELDS = ("axis", "value", "source", "evidence")  # a cell of the page's ledger


def ledger_data(ledger, names, strings: "Strings | None" = None) -> list[dict]:
    """[{system, cells: [[axis, value, source, evidence]]}] (LEDGER_FIELDS: lists, not
    mappings, the keys once in the page) of the ledger (a Ledger or
    its as_dict()), for the runners shown; [] when no ledger is passed.  Cells that say
    nothing (SILENT_CELLS) are left out and evidence is cut at EVIDENCE_LIMIT, so the
    page stays small as axes are added.  With `strings`, the axis, the source and a value
    without a CPU figure are indices into its table (each repeats over systems)."""
    if ledger is None:
        return []
    cells = ledger["cells"] if isinstance(ledger, Mapping) else [c.as_dict() for c in ledger.cells]
    by_system: dict[str, list] = {}
    for c in cells:
        if str(c.get("value", "")) in SILENT_CELLS:
            continue
        cell = {k: str(c.get(k, "")) for k in ("axis", "value", "source", "evidence")}
        cell["evidence"] = unlabelled(str(c.get("system")), cell["evidence"])  # named beside
        if len(cell["evidence"]) > EVIDENCE_LIMIT:
            cell["evidence"] = cell["evidence"][:EVIDENCE_LIMIT - 1] + "…"
        if strings is not None:
            cell.update(axis=strings(cell["axis"]), source=strings(cell["source"]))
            if not CPU_FIGURE.search(cell["value"]):
                cell["value"] = strings(cell["value"])
            if not DIGIT.search(cell["evidence"]):  # the same head over systems: once
                cell["evidence"] = strings(cell["evidence"])
        by_system.setdefault(str(c.get("system")), []).append(
            [cell[k] for k in LEDGER_FIELDS])
    return [{"system": n, "cells": by_system[n]} for n in names if n in by_system]


# the case view's cells; each runner's native call and weight names and shapes are on the
# case's own page (cases/<id>.md, linked from the view): in the page they were a fifth of it
CELL_FIELDS = ("runner", "label", "figures", "reason", "notes")


class Strings:
    """One table of the stable texts the case view shows (runner names, refusals, stable
    notes): a cell holds indices into it, so a text repeated over cases is
    written once.  Texts that may quote CPU-dependent figures (figures, reason, notes)
    stay in the cell: interning them would make the table's length depend on the CPU."""

    def __init__(self):
        self.index: dict[str, int] = {}

    def __call__(self, text) -> int:
        return self.index.setdefault(str(text), len(self.index))

    @property
    def table(self) -> list[str]:
        return list(self.index)


FROM_MATRIX = 2  # the first CELL_FIELDS (runner, label): the matrix's column and word
STORED = CELL_FIELDS[FROM_MATRIX:]  # what a case-view cell of the data holds
# a figure CPU kernels move (1.23e-07): a text holding one stays in its cell, never interned
CPU_FIGURE = re.compile(r"\d\.\d+e[-+]\d+")
# a row's reason is interned only without any digit: a count of values beyond tolerance
# ("2954 of 3072 values differ") may move with the CPU too
DIGIT = re.compile(r"\d")


def _row_data(r, s: Strings) -> list:
    """One case-view cell, as STORED: figures, reason and notes (a list), a stable reason or
    note as an index into the string table.  Its runner and outcome word are its matrix
    cell's (the k-th cell of a case is its k-th non-empty matrix cell), so not repeated."""
    reason = str(r["reason"] or "")
    if reason and (label(r) in STABLE_REASONS or not DIGIT.search(reason)):
        reason = s(reason)  # a refusal's words, or a reason with no figure at all: stable
    notes = [n if len(n) <= NOTE_LIMIT else n[:NOTE_LIMIT - 1] + "…"
             for n in (str(n) for n in r["notes"] or ())]
    notes = [n if CPU_FIGURE.search(n) else s(n) for n in notes]  # stable: interned
    cell = [figures_data(r), reason, notes]
    while cell and cell[-1] in ("", []):  # empty trailing fields left out
        cell.pop()
    return cell


def expand_cells(data: dict, index: int) -> list[dict]:
    """The case-view cells of data["cases"][index] as mappings of CELL_FIELDS, the runner
    and outcome word taken from its matrix row (what report.js rebuilds; for tests and
    tools)."""
    def one(v):
        return data["strings"][v] if isinstance(v, int) else v

    stored, out = iter(data["cases"][index]["cells"]), []
    for runner, drawn in zip(data["runners"], data["matrix"][index]):
        if drawn is None:
            continue
        cell = next(stored)
        full = [*cell, *([] if f in ("figures", "notes") else "" for f in STORED[len(cell):])]
        full[0] = figures_text(full[0])
        out.append({"runner": runner, "label": expand_matrix_cell(drawn, data["strings"])[
            "word"], **{f: [one(x) for x in v] if isinstance(v, list) else one(v)
                        for f, v in zip(STORED, full)}})
    return out


def case_data(case, cid: str, rows: list, strings: Strings | None = None) -> dict:
    strings = strings if strings is not None else Strings()
    path = getattr(case, "path", "") or ""
    return {"id": cid, "title": str(getattr(case, "title", "") or cid),
            "description": str(getattr(case, "description", "") or ""),
            "source": str(getattr(case, "source", "") or ""),
            "tags": [str(t) for t in getattr(case, "tags", ()) or ()],
            "file": Path(path).name if path else "",
            "config": {f: plain(getattr(case, f)) for f in _CASE_FIELDS if hasattr(case, f)},
            "cells": [_row_data(r, strings) for r in rows]}


def figures_block(figures: dict[str, bytes]) -> str:
    """The figures as links to their PNG files beside index.html (kept out of the page:
    they would be most of its bytes)."""
    if not figures:
        return ""
    items = "".join(f'<li><a href="{e(quote(name))}">{e(plots.CAPTIONS[name])}</a> '
                    f"({e(name)})</li>" for name in figures)
    return f"{FIGURES_START}<h2>Figures</h2><ul>{items}</ul>{FIGURES_END}"


def _slug(title: str) -> str:
    """The id of a section heading, as GitHub's Markdown writes it ('#known-mismatches')."""
    return re.sub(r"[^\w\- ]", "", title.lower()).strip().replace(" ", "-")


def sections_block(sections) -> str:
    """Every section: title, intro, its table(s) (a split section: one per part)."""
    out = []
    for s in sections:
        out.append(f'<h2 id="{e(_slug(s.title))}">{e(s.title)}</h2><p>{e(s.intro)}</p>')
        for part, table in getattr(s, "tables", None) or [("", s.table)]:
            out.append((f"<h3>{e(part)}</h3>" if part else "")
                       + table.to_html(border=0, escape=True))
    return "".join(out)


def metadata_block(meta: dict) -> str:
    start, end = _markers()
    items = "".join(f"<li>{e(k)}: {e(v)}</li>" for k, v in meta.items())
    return f"{start}<h2>Run metadata</h2><ul>{items}</ul>{end}"


def _head(script: str) -> str:
    digest = base64.b64encode(hashlib.sha256(script.encode("utf-8")).digest()).decode("ascii")
    csp = (f"default-src 'none'; img-src data:; style-src 'unsafe-inline'; "
           f"script-src 'sha256-{digest}'")
    return (f'<!doctype html><html lang="en"><head><meta charset="utf-8">'
            f'<meta http-equiv="Content-Security-Policy" content="{csp}">'
            f"<title>{_TITLE}</title><style>{_asset('report.css')}</style></head>")


def page(frame, cases, runners, sections, meta: dict, selection: str = "",
         ledger=None, figures: dict[str, bytes] | None = None, found=()) -> str:
    """The whole index.html as text."""
    case_ids, names = order(frame, cases, runners)
    records = frame.to_dict(orient="records")
    by_cell = {(r["case"], r["runner"]): r for r in records}
    framework_of = {str(r["runner"]): str(r["framework"]) for r in records}
    case_of = {c.id: c for c in cases}
    tags_of = {c.id: tuple(getattr(c, "tags", ()) or ()) for c in cases}
    labels = {label(r) for r in records}
    outcomes = [o for o in ("pass", "behaviour", KNOWN, "mismatch", "not_expressible",
                            "skipped", "error") if o in labels]
    strings = Strings()
    data = {"cases": [case_data(case_of.get(cid), cid, [by_cell[(cid, n)] for n in names
                                                         if (cid, n) in by_cell], strings)
                      for cid in case_ids],
            "cell_fields": list(STORED), "runners": names,
            "ledger_fields": list(LEDGER_FIELDS),
            "ledger": ledger_data(ledger, names, strings), "axes": diff_axes(ledger)}
    data["matrix"] = matrix_rows(case_ids, names, lambda cid, n: None if (
        r := by_cell.get((cid, n))) is None else matrix_cell(strings(label(r)), label(r),
                                                                cell_texts(r), figures_data(r)))
    data["strings"] = strings.table  # after the matrix: its words are the cells' labels
    systems = [d["system"] for d in data["ledger"]]
    script = _asset("report.js")
    body = [f"<h1>{_TITLE}</h1><p>Selection: {e(selection)}. Click a case for its "
            "configuration and each runner's call; hover a cell for its reason. The details "
            'are in <a href="details.md">details.md</a>, every ledger cell in <a href='
            '"conventions.md">conventions.md</a>.</p>', headline_block(found),
            diff_block(systems),
            controls(list(dict.fromkeys(framework_of[n] for n in names)), names,
                     sorted({tag for tags in tags_of.values() for tag in tags}), outcomes),
            matrix_table(names, framework_of),
            figures_block(figures or {}), sections_block(sections), metadata_block(meta),
            f'<script type="application/json" id="report-data">{script_json(data)}</script>',
            f"<script>{script}</script>"]
    return _head(script) + "<body>\n" + "\n".join(b for b in body if b) + "\n</body></html>\n"


def write_html(frame, cases, runners, sections, meta: dict, out_dir, selection: str = "",
               ledger=None, found=()) -> Path:
    """Write the figures (plots.FIGURES, when matplotlib is installed) and index.html
    into out_dir.  `frame`: the results frame (base.results_frame), `cases` in file
    order, `runners` in column order, `sections` as build_sections gives them, `ledger`:
    a conformance.conventions.ledger.Ledger (or its as_dict()) or None."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    figures = plots.make_figures(frame, cases, runners)
    plots.write_figures(figures, out)
    path = out / "index.html"
    text = page(frame, cases, runners, sections, meta, selection, ledger, figures, found)
    path.write_text(_UNSAFE.sub("", text), encoding="utf-8")  # no raw ESC, bidi, C1 anywhere
    return path
