"""One page per case: reports/cases/<id>.md.

For every runner: its outcome, the native call it made or why it cannot,
its parameter count, the native weight names and shapes, its figures and
notes.  Everything from a case file or a framework passes through base.md.
"""
from __future__ import annotations

from pathlib import Path

from conformance.report.base import fmt, md

PAGES_DIR = "cases"


def _figures(r) -> str:
    if r.max_abs_error is None and r.max_rel_error is None:
        return ""
    text = f"output max abs {fmt(r.max_abs_error)}, max rel {fmt(r.max_rel_error)}"
    if r.weights_max_abs_error is not None:
        text += (f"; weights max abs {fmt(r.weights_max_abs_error)}, max rel "
                 f"{fmt(r.weights_max_rel_error)}")
    return text + f" (rtol {r.rtol:g}, atol {r.atol:g})"


def _runner_lines(r) -> list[str]:
    word = "known mismatch" if (r.known_mismatch and r.outcome.failed) else r.outcome.value
    lines = [f"### {md(r.runner)}: {md(word)}", ""]
    if r.native_call:
        lines.append(f"- call: {md(r.native_call)}")
    if r.reason:
        label = "why not" if r.outcome.skips else "reason"
        lines.append(f"- {label}: {md(r.reason)}")
    if r.known_mismatch:
        lines.append(f"- declared known mismatch: {md(r.known_mismatch)}")
    if r.parameters is not None:
        given = (f" (+{r.projection_parameters} given)" if r.projection_parameters is not None
                 else "")
        model = "" if r.executed else " (model: a documented model, not executed)"
        lines.append(f"- parameters: {r.parameters}{given}{model}")
    if r.weight_shapes:
        shapes = ", ".join(f"{md(k)} {tuple(v)}" for k, v in r.weight_shapes.items())
        lines.append(f"- weights: {shapes}")
    figures = _figures(r)
    if figures:
        lines.append(f"- figures: {figures}")
    if r.fully_masked_row:
        lines.append(f"- fully masked row: {md(r.fully_masked_row)}"
                     + (f" (weights: {md(r.fully_masked_row_weights)})"
                        if r.fully_masked_row_weights else ""))
    lines += [f"- note: {md(n)}" for n in r.notes]
    return lines + [""]


def _cluster_lines(found) -> list[str]:
    """The case's agreement clusters (report/clusters.py), when computed."""
    if found is None:
        return []
    lines = ["## Agreement clusters", "",
             "Runners whose outputs agree with one another within 2 x the tolerance, the "
             "reference left out (docs/reports.md: Agreement clusters)"
             + (": **reference suspect**" + (f" (declared: {md(found.declared)})"
                                             if found.declared else "")
                if found.reference_suspect else "") + ".", ""]
    for i, (group, kinds) in enumerate(zip(found.clusters, found.implementations)):
        ref = " (the reference agrees)" if i == found.reference_cluster else ""
        lines.append(f"- {md(', '.join(group))}: {len(kinds)} implementation(s), "
                     f"{md(', '.join(kinds))}{ref}")
    return lines + [""]


def render_page(case, rows, runners, found=None) -> str:
    order = {r.name: n for n, r in enumerate(runners)}
    rows = sorted(rows, key=lambda r: order.get(r.runner, len(order)))
    first = rows[0]
    typed = ", ".join(f"{md(k)}={md(v)}" for k, v in first.typed.items())
    lines = [f"# {md(case.id)}: {md(getattr(case, 'title', case.id))}", "",
             "[Back to the report](../index.md). Figures vary with the CPU in their last "
             "digits (docs/reports.md: check-reports).", "",
             f"- dtype: {md(first.dtype)}; parameters by the formula: "
             f"{first.parameters_formula}"]
    if typed:
        lines.append(f"- typed by the user: {typed}")
    lines += [""] + _cluster_lines(found) + ["## Runners", ""]
    for r in rows:
        lines += _runner_lines(r)
    return "\n".join(lines).rstrip() + "\n"


def write_pages(rows, cases, runners, out: Path, clusters=()) -> list[Path]:
    """cases/<id>.md for every case with rows (into a fresh staging folder: the swap
    removes the pages of ids no longer there, staging.py), each path checked to lie
    inside `out` whatever the id holds; `clusters`: the cases' CaseClusters."""
    found = {c.case: c for c in clusters}
    from conformance.datafile import inside

    folder = Path(out) / PAGES_DIR
    folder.mkdir(parents=True, exist_ok=True)
    by_case: dict[str, list] = {}
    for r in rows:
        by_case.setdefault(r.case, []).append(r)
    written = []
    for case in cases:
        if case.id in by_case:
            path = inside(folder, folder / f"{case.id}.md")
            path.write_text(render_page(case, by_case[case.id], runners, found.get(case.id)),
                            encoding="utf-8")
            written.append(path)
    return written
