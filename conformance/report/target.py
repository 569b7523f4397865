"""Your attention, judged: the report of a target (`probe`, `pytest --attention`).

From the run's ledger (conventions.json) and rows (results.json) and the known systems'
ledger (the committed reports/conventions.json, or the run's own where it ran them): per
axis the target's value, its evidence and which known systems share it; the nearest known
system (most axes with the same word, among the axes both measured); the porting guide
(report/porting.py) against it and against torch.sdpa; "matches the oracle on N of M
cases".  Every text from a file is escaped and bounded (report/ledger.escape).
"""
from __future__ import annotations

from dataclasses import dataclass, field

from conformance.report.base import ledger_word
from conformance.report.escaping import md_code
from conformance.report.ledger import escape
from conformance.report.ledger_groups import SILENT

BASELINE = "torch.sdpa"  # the documented sdpa every port is read against
EVIDENCE = 200  # characters of a cell's evidence in the table
# outcomes that match the oracle wherever it defines the answer (behaviour: a fully masked
# row or a non-finite input, where the answer is the system's, reported by the ledger)
MATCHING = ("pass", "behaviour")
COUNT_KINDS = {"parameters", "formula"}  # failure kinds of a count, not of the numbers
JUDGED = ("pass", "mismatch", "behaviour", "error", "fail")


@dataclass(frozen=True)
class Nearest:
    system: str
    equal: int  # axes with the same word
    compared: int  # axes both measured


@dataclass
class Judgement:
    """What the report says, as data (tests read it; render() writes it)."""

    name: str
    target: str
    kind: str
    cells: dict[str, dict]  # axis -> the target's cell
    sharing: dict[str, list[str]]  # axis -> known systems with the same word
    nearest: list[Nearest]  # best first
    guides: list = field(default_factory=list)  # porting.Porting, nearest then baseline
    matched: int = 0
    judged: int = 0
    counts_only: int = 0  # rows whose outputs match, their parameter count not
    not_expressible: int = 0
    failed_cases: list[str] = field(default_factory=list)


def measured(value: str) -> bool:
    return bool(value) and value not in SILENT


def judge(name: str, target: str, kind: str, ledger: dict, known: dict,
          rows: list[dict]) -> Judgement:
    """The judgement of runner `name` in `ledger` against the systems of `known`."""
    from conformance.report.porting import porting

    mine = {str(c["axis"]): c for c in ledger.get("cells", []) if c.get("system") == name}
    others: dict[str, dict[str, str]] = {}
    for c in known.get("cells", []):
        if c.get("system") != name:
            others.setdefault(str(c["system"]), {})[str(c["axis"])] = str(c.get("value", ""))
    sharing = {axis: sorted(s for s, cells in others.items()
                            if measured(cells.get(axis, ""))
                            and ledger_word(cells[axis]) == ledger_word(str(c["value"])))
               for axis, c in mine.items() if measured(str(c.get("value", "")))}
    scores = []
    order = [str(s["id"]) for s in known.get("systems", [])]
    for system in order:
        cells = others.get(system, {})
        both = [a for a, c in mine.items() if measured(str(c.get("value", "")))
                and measured(cells.get(a, ""))]
        equal = sum(ledger_word(cells[a]) == ledger_word(str(mine[a]["value"])) for a in both)
        if both:
            scores.append(Nearest(system, equal, len(both)))
    scores.sort(key=lambda n: (-n.equal, n.compared - n.equal, order.index(n.system)))
    merged = overlay(known, ledger, {name})  # one ledger for porting.porting
    guides = []
    for other in dict.fromkeys([n.system for n in scores[:1]] + [BASELINE]):
        if other in others:
            guides.append(porting(merged, name, other, systems={}))
    mine_rows = [r for r in rows if r.get("runner") == name]
    judged = [r for r in mine_rows if r.get("outcome") in JUDGED]
    counts = [r for r in judged if r["outcome"] == "mismatch" and r.get("failure_kinds")
              and set(r["failure_kinds"]) <= COUNT_KINDS]
    return Judgement(name, target, kind, mine, sharing, scores, guides,
                     matched=sum(r["outcome"] in MATCHING for r in judged), judged=len(judged),
                     counts_only=len(counts), not_expressible=sum(
                         r.get("outcome") == "not_expressible" for r in mine_rows),
                     failed_cases=sorted(str(r["case"]) for r in judged
                                         if r["outcome"] not in MATCHING))


def overlay(base: dict, top: dict, ids: set[str]) -> dict:
    """`base` with the systems `ids` (and their cells) taken from `top` instead."""
    return {"axes": base.get("axes") or top.get("axes", []),
            "systems": [s for s in base.get("systems", []) if s.get("id") not in ids]
            + [s for s in top.get("systems", []) if s.get("id") in ids],
            "cells": [c for c in base.get("cells", []) if c.get("system") not in ids]
            + [c for c in top.get("cells", []) if c.get("system") in ids]}


def _clip(text: str, limit: int = EVIDENCE) -> str:
    text = " ".join(str(text).split())
    return text if len(text) <= limit else text[:limit - 1] + "…"


def measured_differences(guide) -> list:
    """The guide's differences where both sides measured the axis (a not_probed or
    not_applicable side is listed in the guide's table, not named as a difference)."""
    return [d for d in guide.differences if measured(d.a) and measured(d.b)]


def sentences(j: Judgement) -> list[str]:
    """The answers first, as sentences from the data."""
    out = [f"**{escape(j.target)}** matches the oracle on {j.matched} of {j.judged} cases "
           f"it can express, wherever the oracle defines the answer ({j.not_expressible} "
           "cases it cannot express)."]
    if j.counts_only:
        out.append(f"{j.counts_only} more match in their outputs but count other parameters "
                   "than the formula (see parameter_formula).")
    if j.nearest:
        n = j.nearest[0]
        out.append(f"Nearest known system: **{escape(n.system)}** ({n.equal} of {n.compared} "
                   "axes with the same word).")
    for g in j.guides:
        both = measured_differences(g)
        if both:
            named = "; ".join(f"{escape(d.axis)}: {escape(ledger_word(d.a))} here, "
                              f"{escape(ledger_word(d.b))} in {escape(g.b)}" for d in both)
            out.append(f"Where it differs from {escape(g.b)}, measured on both sides "
                       f"({len(both)} axes): {named}.")
        else:
            out.append(f"Nothing measured on both sides differs from {escape(g.b)} "
                       f"({g.agreeing} axes agree).")
    return out


def render(j: Judgement) -> str:
    lines = [f"# Your attention, judged: {escape(j.name)}", "",
             f"`{md_code(j.target)}` (--kind {escape(j.kind)}), run through every case of the "
             "suite its kind can express and asked every axis of the conventions ledger. "
             "The full reports of this run: [details.md](details.md), "
             "[conventions.md](conventions.md).", ""]
    lines += [f"- {s}" for s in sentences(j)] + [""]
    if j.failed_cases:
        lines += ["## Cases that do not match the oracle", "",
                  ", ".join(f"[{escape(c)}](cases/{escape(c)}.md)" for c in j.failed_cases),
                  ""]
    for g in j.guides:
        lines += [f"## Porting guide: {escape(g.a)} -> {escape(g.b)}", ""]
        if not g.differences:
            lines += [f"Nothing differs ({g.agreeing} axes agree).", ""]
            continue
        lines += ["| axis | here | there | what to do |", "|---|---|---|---|"]
        lines += [f"| {escape(d.axis)} | {escape(ledger_word(d.a))} | "
                  f"{escape(ledger_word(d.b))} | {escape(d.advice)} |" for d in g.differences]
        lines.append("")
    lines += ["## Every axis", "", "| axis | value | known systems with the same word | "
              "evidence |", "|---|---|---|---|"]
    for axis, c in j.cells.items():
        share = j.sharing.get(axis)
        shown = ", ".join(share[:8]) + (f" and {len(share) - 8} more" if len(share) > 8
                                        else "") if share else ("—" if share is not None
                                                                else "(not measured)")
        lines.append(f"| {escape(axis)} | {escape(ledger_word(str(c.get('value', ''))))} | "
                     f"{escape(shown)} | {escape(_clip(c.get('evidence', '')))} |")
    lines.append("")
    if j.nearest:
        lines += ["## Nearest known systems", "", "| system | same word | axes compared |",
                  "|---|---|---|"]
        lines += [f"| {escape(n.system)} | {n.equal} | {n.compared} |" for n in j.nearest[:8]]
        lines.append("")
    return "\n".join(lines)


def write_target_report(out, name: str, target: str, kind: str, page) -> Judgement:
    """Judge runner `name` from the run's files in `out` and write its page."""
    from pathlib import Path

    j = judge_files(out, name, target, kind)
    Path(page).write_text(render(j) + "\n", encoding="utf-8")
    return j


def judge_files(out, name: str, target: str, kind: str) -> Judgement:
    """The judgement of runner `name` from the run's files in `out`.  The known systems
    are the run's own where it ran others, else the committed ledger
    (reports/conventions.json)."""
    import json
    from pathlib import Path

    from conformance.paths import REPORTS_DIR
    from conformance.report.results_files import read_results

    out = Path(out)
    ledger = json.loads((out / "conventions.json").read_text(encoding="utf-8"))
    rows = read_results(out / "results.json").get("rows", [])
    committed = REPORTS_DIR / "conventions.json"
    known = json.loads(committed.read_text(encoding="utf-8")) if committed.is_file() \
        else {"axes": ledger.get("axes", []), "systems": [], "cells": []}
    return judge(name, target, kind, ledger, known_systems(ledger, known, rows, name), rows)


def known_systems(ledger: dict, committed: dict, rows: list[dict], name: str) -> dict:
    """The known systems' ledger: the run's cells for the systems this run ran, the
    committed ledger's for the others (a probe run runs the target alone)."""
    return overlay(committed, ledger, {str(r.get("runner")) for r in rows} - {name})
