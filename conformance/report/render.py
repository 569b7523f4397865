"""The writers: results.json (+ results/<runner>.json|csv), index.md, index.html, cases/<id>.md.

Deterministic by construction: rows come in case-file x registry order,
figures are rounded to 3 significant digits, and everything that changes
between identical runs (library versions, machine, time) lives in ONE
metadata block: the "metadata" key of results.json and the block between
METADATA_START and METADATA_END in index.md / index.html.  What varies with
the CPU (error figures, low-precision digests, kernel names in quoted
messages) is left out by drift.py (`python -m conformance check-reports`).  index.md opens with the
answers (sections.ANSWERS), then the details; the native calls and weight
shapes of each case sit on its own page (pages.py).
"""
from __future__ import annotations

import datetime as _dt
import json
import sys
from pathlib import Path

from conformance.versions import versions
from conformance.report.base import (
    METADATA_END, METADATA_START, md, results_frame, section_frame)
from conformance.report.escaping import one_line
from conformance.report.ledger_groups import difference_lines
from conformance.report.findings import DRIFT_FILES, findings, headline_lines, read_drift
from conformance.report.clusters import clusters, section_clusters, write_clusters
from conformance.report.html import write_html as write_html_page
from conformance.report.pages import write_pages
from conformance.report.records import RUNNER_WORDS
from conformance.report.results_files import write_results
from conformance.report.sections import ANSWERS, DETAILS
from conformance.report.spec_vectors import SPEC_JSON
from conformance.report.spec_vectors import summary_finding as spec_finding

REPORT_FILES = ("results.json", "index.md", "details.md", "index.html")  # + results/<runner>.*
LEDGER_FILE = "conventions.json"
_TITLE = "Attention conformance report"
DETAILS_FILE = "details.md"


CELL_LIMIT = 80  # characters of a table cell in index.md / details.md (the rest: case pages)


def clip(text, limit: int = CELL_LIMIT) -> str:
    """A cell cut to `limit` characters as shown ('…' marks the cut), then escaped."""
    shown = one_line(text)  # controls shown (escaping.py), counted in the limit
    return md(shown if len(shown) <= limit else shown[:limit - 1] + "…")


def markdown_table(table) -> str:
    frame = table.reset_index() if table.index.name or any(table.index.names) else table
    lines = ["| " + " | ".join(clip(c) for c in frame.columns) + " |",
             "|" + "---|" * len(frame.columns)]
    lines += ["| " + " | ".join(clip(v) for v in row) + " |" for row in frame.itertuples(False)]
    return "\n".join(lines)


def machine() -> dict[str, str]:
    """The CPU and the instruction sets kernels may use: read from /proc/cpuinfo and
    from frameworks only when already imported (never imports one)."""
    out = {}
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.lower().startswith("model name"):
                out["cpu"] = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    from conformance.cpu_isa import cpu_features

    out["cpu features that move kernels"] = " ".join(cpu_features()) or "none"
    np_core = sys.modules.get("numpy._core._multiarray_umath") or sys.modules.get(
        "numpy.core._multiarray_umath")
    features = getattr(np_core, "__cpu_features__", None)
    if features:
        wanted = ("SSE42", "AVX", "AVX2", "FMA3", "AVX512F", "AVX512_SKX", "AVX512_SPR",
                  "ASIMD", "SVE")
        out["numpy cpu features"] = " ".join(f for f in wanted if features.get(f)) or "none"
    torch = sys.modules.get("torch")
    backends = getattr(torch, "backends", None)
    cpu = getattr(backends, "cpu", None)
    if cpu is not None and hasattr(cpu, "get_cpu_capability"):
        out["torch cpu capability"] = str(cpu.get_cpu_capability())
    return out


def _section_md(s, level: str = "##") -> list[str]:
    lines = [f"{level} {s.title}", "", s.intro, ""]
    for label, table in s.tables:
        if label:
            lines += [f"**{md(label)}**", ""]
        lines += [markdown_table(table), ""]
    return lines


def _case_links(cases, written: list[str]) -> list[str]:
    if not written:
        return []
    titles = {c.id: getattr(c, "title", c.id) for c in cases}
    return ["## Per-case pages", "",
            "How each runner was called (native call or refusal), its weight names and shapes "
            "and its figures, one page per case:", ""] + [
        f"- [{md(cid)}](cases/{cid}.md): {md(titles.get(cid, cid))}" for cid in written] + [""]


CUT_NOTE = (f"Table cells are cut at {CELL_LIMIT} characters (…): the per-case pages "
            "(cases/<id>.md) and results.json hold the full text.")


def _metadata_lines(meta: dict) -> list[str]:
    return [METADATA_START, "## Run metadata", "",
            *[f"- {md(k)}: {md(v)}" for k, v in meta.items()], METADATA_END, ""]


def write_markdown(answers, details, meta: dict, selection: str, out: Path,
                   pages: list[str] = (), opening: list[str] = ()) -> None:
    """index.md: the headline findings and the ledger's differences (`opening`) and the
    answers; details.md: the details and the per-case links (`pages`: lines)."""
    lines = [f"# {_TITLE}", "",
             f"Selection: {md(selection)}. Generated by `python -m pytest` (or re-rendered "
             "from results.json by `python -m conformance report`); do not edit by hand. "
             f"Details (outcomes, counts, figures, ONNX graphs): [{DETAILS_FILE}]"
             f"({DETAILS_FILE}).", ""]
    lines += list(opening)
    for s in answers:
        lines += _section_md(s)
    if pages:  # the list of pages is navigation: it sits with the details
        lines += [f"Each case's page (every runner's native call, weights, figures and notes): "
                  f"listed in [{DETAILS_FILE}]({DETAILS_FILE}#per-case-pages).", ""]
    lines += [CUT_NOTE, ""] + _metadata_lines(meta)
    (out / "index.md").write_text("\n".join(lines), encoding="utf-8")
    lines = [f"# {_TITLE}: details", "", f"[Back to the answers](index.md). {CUT_NOTE}", ""]
    for s in details:
        lines += _section_md(s)
    lines += list(pages)
    (out / DETAILS_FILE).write_text("\n".join(lines + _metadata_lines(meta)),
                                    encoding="utf-8")


def read_ledger(out: Path) -> dict | None:
    """reports/conventions.json as written by the ledger (report/ledger.py), if there."""
    path = Path(out) / LEDGER_FILE
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None


def build_sections(results, rows, cases, runners):
    """(answers, details): every section that has something to show for these rows
    (`results`: their results frame).  Nothing rides in the frame's `attrs`: pandas
    deep-copies them on every operation (the ledger there once cost 21 s of a report)."""
    frame = section_frame(results, rows, runners)
    made = [[s for s in (f(frame, cases, runners) for f in group) if s is not None]
            for group in (ANSWERS, DETAILS)]
    return made[0], made[1]


def describe(cases, runners) -> dict:
    """What sections read of the runners and the cases, for results.json."""
    return {"runners": [{"name": r.name, "framework": r.framework,
                         **{d: getattr(r, d, "") or "" for d in RUNNER_WORDS[1:]}}
                        for r in runners],
            "cases": [{"id": c.id, "title": getattr(c, "title", c.id),
                       "has_fully_masked_rows": bool(c.has_fully_masked_rows),
                       "key_padding": (None if c.mask.key_padding is None
                                       else list(c.mask.key_padding)),
                       "causal": getattr(c.mask, "causal", "none"),
                       "tags": [str(t) for t in getattr(c, "tags", ()) or ()],
                       "heads": _heads(c)} for c in cases]}


def _heads(case) -> list[int] | None:
    """[num_heads, query_features, qk_head_dim] of a case (findings.py's seed question)."""
    a = getattr(case, "attention", None)
    try:
        return [int(a.num_heads), int(a.query_features), int(a.qk_head_dim)]
    except (AttributeError, TypeError, ValueError):
        return None


def write_reports(rows, cases, runners, out: Path, selection: str,
                  meta: dict | None = None) -> list[Path]:
    """`rows`: the run's Rows; `cases` in file order; `runners`: the Runner objects
    of the run, in column order.  `meta`: kept as given (re-rendering), else this run's.
    Written whole (staging.py: a staging folder swapped in, or nothing changes).
    Returns the paths written."""
    from conformance.report.staging import staged

    out = Path(out)
    with staged(out, seed=(LEDGER_FILE, *DRIFT_FILES, SPEC_JSON)) as stage:
        written = _write_into(rows, cases, runners, stage, selection, meta)
        return [out / p.relative_to(stage) for p in written]


def _write_into(rows, cases, runners, out: Path, selection: str, meta: dict | None):
    results = results_frame(rows)
    ledger = read_ledger(out)
    answers, details = build_sections(results, rows, cases, runners)
    groups = clusters(rows, cases)
    agreement = section_clusters(groups)
    details = details + ([agreement] if agreement is not None else [])
    if meta is None:
        meta = {**versions(), **machine(),
                "time": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds")}
    data_files = write_results(results, meta, selection, out, describe(cases, runners))
    pages = write_pages(rows, cases, runners, out, groups)
    written = [p.stem for p in pages]
    found = findings(section_frame(results, rows, runners), cases, ledger, read_drift(out))
    found += [f for f in (spec_finding(out),) if f is not None]  # spec_vectors.json's
    opening = headline_lines(found) + difference_lines(ledger)
    write_markdown(answers, details, meta, selection, out, _case_links(cases, written),
                   opening)
    write_html_page(results, cases, runners, answers, meta, out, selection, ledger, found)
    # re-rendered from results.json, the cases are records without an oracle: the run's
    # agreement.json stays as it was
    oracle = any(hasattr(c, "expect") for c in cases)
    return data_files + [out / name for name in REPORT_FILES[1:]] + (
        [write_clusters(groups, out)] if oracle else []) + pages


def strip_metadata(text: str, name: str) -> str:
    """The part of a report file that must be identical across runs."""
    if name.endswith(".json"):
        data = json.loads(text)
        data.pop("metadata", None)
        return json.dumps(data, indent=1, sort_keys=True)
    if METADATA_START in text:
        head, rest = text.split(METADATA_START, 1)
        return head + rest.split(METADATA_END, 1)[-1]
    return text
