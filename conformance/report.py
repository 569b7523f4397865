"""Render the rows of a run into reports/: results.json, results.csv,
index.md and index.html.

Deterministic by construction: rows come in case-file x registry order,
figures are rounded to 3 significant digits (the last bits of a float32
sum are not a result), and everything that changes between identical runs
(library versions, time) lives in ONE metadata block: the "metadata" key
of results.json and the block between METADATA_START and METADATA_END in
index.md / index.html.  `python -m conformance check-reports` compares two
report folders outside that block.

Sections are functions `(frame, cases) -> Section | None`; a runner family
that needs its own table adds one function to SECTIONS.
"""
from __future__ import annotations

import datetime as _dt
import html
import json
import math
import platform
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path
from typing import Callable

METADATA_START = "<!-- run-metadata: start (versions and time; excluded from freshness checks) -->"
METADATA_END = "<!-- run-metadata: end -->"
_PACKAGES = ("numpy", "pandas", "torch", "tensorflow-cpu", "tensorflow", "keras", "jax",
             "onnx", "onnxruntime", "onnxscript")
_FLOATS = ("max_abs_error", "max_rel_error", "weights_max_abs_error", "weights_max_rel_error")


def versions() -> dict[str, str]:
    """Versions without importing anything (collection must stay fast)."""
    found = {"python": platform.python_version()}
    for pkg in _PACKAGES:
        try:
            found[pkg] = metadata.version(pkg)
        except metadata.PackageNotFoundError:
            continue
    return found


def sig(x: float | None, digits: int = 3) -> float | None:
    return None if x is None else float(f"{x:.{digits - 1}e}")


def fmt(x: float | None) -> str:
    if x is None:
        return ""
    return "0" if x == 0 else f"{x:.2e}"


@dataclass(frozen=True)
class Section:
    title: str
    intro: str
    table: "object"  # pandas.DataFrame


def _pivot(frame, column: str, cases, runners):
    table = frame.pivot(index="case", columns="runner", values=column)
    return table.reindex(index=[c.id for c in cases if c.id in table.index],
                         columns=[r for r in runners if r in table.columns]).fillna("")


def _cell_parameters(r) -> str:
    if r.outcome in ("skipped", "not_expressible", "error"):
        return {"skipped": "skip", "not_expressible": "n/e", "error": "error"}[r.outcome]
    if r.projection_parameters is not None:
        return f"{r.parameters} (+{r.projection_parameters} given)"
    bad = "parameters" in r.reason
    return f"{r.parameters}{' ✗' if bad else ''}{'' if r.executed else ' (model)'}"


def _cell_numbers(r) -> str:
    if r.outcome in ("skipped", "not_expressible", "error"):
        return {"skipped": "skip", "not_expressible": "n/e", "error": "error"}[r.outcome]
    mark = "✓" if r.outcome in ("pass", "behaviour") else ("✗ known" if r.known_mismatch else "✗")
    model = "" if r.executed else " (model)"
    return f"{mark} {fmt(r.max_abs_error)} / {fmt(r.max_rel_error)}{model}"


def section_outcomes(frame, cases, runners):
    known = (frame["known_mismatch"] != "") & frame["outcome"].isin(["mismatch", "error"])
    frame = frame.assign(outcome=frame["outcome"].where(~known, "known mismatch"))
    table = frame.pivot_table(index="runner", columns="outcome", values="case",
                              aggfunc="count", fill_value=0)
    table = table.reindex(index=[r for r in runners if r in table.index])
    return Section("Outcomes", "Items per runner and outcome; a known mismatch is declared "
                   "in its case (expect.known_mismatch) and listed below.", table.astype(int))


def section_parameters(frame, cases, runners):
    frame = frame.assign(cell=frame.apply(_cell_parameters, axis=1))
    table = _pivot(frame, "cell", cases, runners)
    formula = frame.drop_duplicates("case").set_index("case")["parameters_formula"]
    typed = frame.drop_duplicates("case").set_index("case")["typed"].map(
        lambda t: ", ".join(f"{k}={v}" for k, v in t.items()))
    table.insert(0, "formula", formula.reindex(table.index))
    table.insert(0, "typed by the user", typed.reindex(table.index))
    return Section("Parameter counts",
                   "The framework's own count per runner, against the analytic formula. "
                   "n/e = not expressible, ✗ = differs from what the case expects; SDPA holds "
                   "no parameters and shows the projections it was given; (model) = a "
                   "documented model of a system that cannot run here (MATLAB).", table)


def section_numbers(frame, cases, runners):
    frame = frame.assign(cell=frame.apply(_cell_numbers, axis=1))
    return Section("Numerical agreement",
                   "Max abs / max rel error of the output against the float64 reference "
                   "(fully masked rows excluded: see edge cases); (model) = not executed, "
                   "a documented model in NumPy: it checks layout and translation only.",
                   _pivot(frame, "cell", cases, runners))


def section_weights(frame, cases, runners):
    has = frame[frame["weights_max_abs_error"].notna()]
    if has.empty:
        return None
    has = has.assign(cell=has.apply(lambda r: f"{fmt(r.weights_max_abs_error)} / "
                                              f"{fmt(r.weights_max_rel_error)}", axis=1))
    return Section("Per-head attention weights",
                   "Max abs / max rel error of the returned per-head weights (B, H, T, S).",
                   _pivot(has, "cell", cases, runners))


def section_edge_cases(frame, cases, runners):
    masked = frame[frame["case"].isin([c.id for c in cases if c.has_fully_masked_rows])]
    masked = masked[masked["outcome"].isin(["pass", "behaviour", "mismatch"])]
    if masked.empty:
        return None
    masked = masked.assign(cell=masked.apply(
        lambda r: (r.fully_masked_row or "") + (f" (weights: {r.fully_masked_row_weights})"
                                               if r.fully_masked_row_weights else "")
        + ("" if r.fully_masked_row == r.fully_masked_row_declared
           else f" ✗ declared {r.fully_masked_row_declared}"), axis=1))
    return Section("Edge case: fully masked query rows",
                   "What each system returns for a query row whose every key is masked: "
                   "nan, zeros (all weights 0: the output is the output bias), uniform (equal "
                   "weight on every key), finite_other.", _pivot(masked, "cell", cases, runners))


def _listing(frame, outcomes, title, intro, column="reason"):
    sub = frame[frame["outcome"].isin(outcomes)]
    if sub.empty:
        return None
    return Section(title, intro, sub[["case", "runner", column]].set_index(["case", "runner"]))


def section_not_expressible(frame, cases, runners):
    return _listing(frame, ["not_expressible"], "Not expressible",
                    "Configurations a system cannot express, in its own words.")


def section_failures(frame, cases, runners):
    return _listing(frame[frame["known_mismatch"] == ""], ["mismatch", "error", "skipped"],
                    "Failures and skips", "Mismatches, runner errors and missing frameworks.")


def section_known_mismatches(frame, cases, runners):
    sub = frame[(frame["known_mismatch"] != "") & frame["outcome"].isin(["mismatch", "error"])]
    if sub.empty:
        return None
    sub = sub.assign(known=sub["known_mismatch"], observed=sub["reason"])
    return Section("Known mismatches",
                   "Declared in the case (expect.known_mismatch): the item is an expected "
                   "failure, and fails again if the mismatch goes away.",
                   sub[["case", "runner", "known", "observed"]].set_index(["case", "runner"]))


def section_calls(frame, cases, runners):
    sub = frame[frame["native_call"] != ""]
    sub = sub.assign(shapes=sub["weight_shapes"].map(
        lambda d: ", ".join(f"{k} {tuple(v)}" for k, v in d.items())))
    return Section("How each system was called",
                   "The native call a user would type, and the weights it holds (native names "
                   "and shapes).",
                   sub[["case", "runner", "native_call", "shapes"]].set_index(["case", "runner"]))


# Report sections shared by all runners; runner families add theirs through
# Runner.sections.
SECTIONS: list[Callable] = [
    section_outcomes, section_parameters, section_numbers, section_weights,
    section_edge_cases, section_not_expressible, section_known_mismatches, section_failures,
    section_calls,
]


def _markdown_table(table) -> str:
    frame = table.reset_index() if table.index.name or any(table.index.names) else table
    cols = [str(c) for c in frame.columns]

    def cell(v) -> str:
        return str(v).replace("|", "\\|").replace("\n", " ")

    lines = ["| " + " | ".join(cols) + " |", "|" + "---|" * len(cols)]
    lines += ["| " + " | ".join(cell(v) for v in row) + " |" for row in frame.itertuples(False)]
    return "\n".join(lines)


def _json_safe(obj):
    """Strict JSON: NaN becomes null, an infinity the string 'inf' / '-inf'."""
    if isinstance(obj, float) and not math.isfinite(obj):
        return None if math.isnan(obj) else str(obj)
    if isinstance(obj, dict):
        return {k: _json_safe(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [_json_safe(v) for v in obj]
    return obj


def _rows_frame(rows):
    import pandas as pd

    # object dtype keeps None as None (not NaN) and counts as ints
    return pd.DataFrame([r.as_dict() for r in rows], dtype=object)


def write_reports(rows, cases, runners, out: Path, selection: str) -> None:
    """`runners`: the Runner objects of the run, in column order."""
    import pandas as pd

    out.mkdir(parents=True, exist_ok=True)
    frame = _rows_frame(rows)
    for col in _FLOATS:  # object Series: a missing figure stays None (JSON null), not NaN
        frame[col] = pd.Series([sig(v) for v in frame[col]], index=frame.index, dtype=object)
    functions = list(SECTIONS)
    for runner in runners:
        functions += [f for f in runner.sections if f not in functions]
    names = [r.name for r in runners]
    sections = [s for s in (f(frame, cases, names) for f in functions) if s is not None]
    meta = {**versions(), "time": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds")}
    # extras keys starting with "_" serve report sections only (e.g. output
    # digests for cross-backend tables); the results files leave them out.
    frame["extras"] = frame["extras"].map(
        lambda d: {k: v for k, v in d.items() if not k.startswith("_")})
    payload = {"metadata": meta, "selection": selection,
               "rows": _json_safe(frame.to_dict(orient="records"))}
    (out / "results.json").write_text(
        json.dumps(payload, indent=1, ensure_ascii=False, allow_nan=False) + "\n",
        encoding="utf-8")
    flat = frame.copy()
    for col in ("weight_shapes", "extras", "typed"):
        flat[col] = flat[col].map(lambda v: json.dumps(v, sort_keys=True))
    for col in ("notes", "failures"):
        flat[col] = flat[col].map(" | ".join)
    flat.to_csv(out / "results.csv", index=False, lineterminator="\n")
    meta_lines = [f"- {k}: {v}" for k, v in meta.items()]
    md = ["# Attention conformance report", "",
          f"Selection: {selection}. Generated by `python -m pytest`; do not edit by hand.", ""]
    for s in sections:
        md += [f"## {s.title}", "", s.intro, "", _markdown_table(s.table), ""]
    md += [METADATA_START, "## Run metadata", "", *meta_lines, METADATA_END, ""]
    (out / "index.md").write_text("\n".join(md), encoding="utf-8")
    body = [f"<h1>Attention conformance report</h1><p>Selection: {html.escape(selection)}</p>"]
    for s in sections:
        body += [f"<h2>{html.escape(s.title)}</h2><p>{html.escape(s.intro)}</p>",
                 s.table.to_html(border=0)]
    body += [METADATA_START, "<h2>Run metadata</h2><ul>"
             + "".join(f"<li>{html.escape(k)}: {html.escape(str(v))}</li>" for k, v in meta.items())
             + "</ul>", METADATA_END]
    (out / "index.html").write_text(
        "<!doctype html><html><head><meta charset='utf-8'><title>Attention conformance"
        "</title><style>body{font-family:sans-serif}table{border-collapse:collapse}"
        "td,th{padding:2px 8px;border-bottom:1px solid #ddd;text-align:left}</style></head>"
        "<body>\n" + "\n".join(body) + "\n</body></html>\n", encoding="utf-8")


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


REPORT_FILES = ("results.json", "results.csv", "index.md", "index.html")


def differences(a: Path, b: Path) -> list[str]:
    """Report files that differ outside the metadata block (empty = fresh)."""
    diffs = []
    for name in REPORT_FILES:
        pa, pb = Path(a) / name, Path(b) / name
        if not pa.exists() or not pb.exists():
            diffs.append(f"{name}: missing in {a if not pa.exists() else b}")
        elif strip_metadata(pa.read_text(encoding="utf-8"), name) != strip_metadata(
                pb.read_text(encoding="utf-8"), name):
            diffs.append(f"{name}: differs outside the run-metadata block")
    return diffs
