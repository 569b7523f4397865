"""Where systems differ: the ledger (reports/conventions.json) grouped by value.

One reading of the ledger serves three views: the differences-only summary in
index.md (per axis, the systems grouped by word, the odd ones out first, an axis
where every system agrees collapsed to one line), the headline sentences
(findings.py) and the porting guide between two systems (porting.py, `python -m
conformance diff A B`).  Everything is read from the ledger data, never typed: a
new axis or system flows in.  Words are compared as the tables show them
(base.ledger_word), so a free-text formula groups by its head.
"""
from __future__ import annotations

from dataclasses import dataclass

from conformance.report.base import ledger_word, md
from conformance.report.escaping import md_code

SILENT = ("not_applicable", "not_probed")  # words that say nothing about a system
CONVENTIONS_PAGE = "conventions.md"
NAMED = 3  # the largest group is "the other N" once it has more than this many systems


@dataclass(frozen=True)
class Group:
    word: str  # the value as a table shows it (base.ledger_word)
    systems: tuple[str, ...]  # ledger system ids (runner names), in ledger order


@dataclass(frozen=True)
class AxisGroups:
    axis: str
    title: str
    groups: tuple[Group, ...]  # the systems with a word, smallest group first
    silent: tuple[str, ...]  # systems whose cell is not_applicable / not_probed / missing

    @property
    def unanimous(self) -> bool:
        return len(self.groups) <= 1


AXIS_PAGES = "conventions"  # the folder of the axis pages, beside conventions.md


def axis_page(axis: str) -> str:
    """An axis's page of evidence, relative to the report folder (report/ledger.py)."""
    return f"{AXIS_PAGES}/{axis}.md"


def evidence_link(axis: str) -> str:
    return axis_page(axis)


def cells_by_key(ledger: dict) -> dict[tuple[str, str], dict]:
    return {(str(c.get("system")), str(c.get("axis"))): c for c in ledger.get("cells", [])}


def system_ids(ledger: dict) -> list[str]:
    return [str(s["id"]) for s in ledger.get("systems", [])]


def axis_groups(ledger: dict) -> list[AxisGroups]:
    """Every axis of the ledger, its systems grouped by word (ledger order of axes)."""
    cells = cells_by_key(ledger)
    names = system_ids(ledger)
    out = []
    for axis in ledger.get("axes", []):
        aid = str(axis["id"])
        by_word: dict[str, list[str]] = {}
        silent = []
        for n in names:
            cell = cells.get((n, aid))
            value = "" if cell is None else str(cell.get("value", ""))
            if not value or value in SILENT:
                silent.append(n)
            else:
                by_word.setdefault(ledger_word(value), []).append(n)
        groups = sorted((Group(w, tuple(s)) for w, s in by_word.items()),
                        key=lambda g: len(g.systems))  # stable: ties keep first-seen order
        out.append(AxisGroups(aid, str(axis.get("title", aid)), tuple(groups), tuple(silent)))
    return out


def group_text(g: AxisGroups, code: bool = True) -> str:
    """'`true_blocks`: a, b, c; `true_attends`: the other 28' (Markdown when `code`)."""
    parts = []
    for n, group in enumerate(g.groups):
        word = f"`{md_code(group.word)}`" if code else group.word
        last = n == len(g.groups) - 1 and n > 0 and len(group.systems) > NAMED
        who = (f"the other {len(group.systems)}" if last
               else ", ".join(md(s) if code else s for s in group.systems))
        parts.append(f"{word}: {who}")
    return "; ".join(parts)


def difference_lines(ledger: dict | None) -> list[str]:
    """index.md's ledger summary: the axes where systems differ (the one with the
    smallest odd-one-out group first), then every unanimous axis on one line each."""
    if not ledger or not ledger.get("cells"):
        return []
    every = axis_groups(ledger)
    differ = sorted((g for g in every if not g.unanimous),
                    key=lambda g: (len(g.groups[0].systems), -len(g.groups)))
    same = [g for g in every if g.unanimous and g.groups]
    lines = ["## Conventions: where systems differ", "",
             "Per axis of the conventions ledger, the systems grouped by what they do, the "
             "odd ones out first; the full per-system grid and every cell's evidence are in "
             f"[{CONVENTIONS_PAGE}]({CONVENTIONS_PAGE}). Systems whose cell is not_applicable "
             "or not_probed are left out. `python -m conformance diff A B` compares two.", ""]
    for g in differ:
        lines.append(f"- [{md(g.title)}]({evidence_link(g.axis)}) (`{g.axis}`): "
                     f"{group_text(g)}")
    if same:
        lines += ["", "Every system with a cell agrees:", ""]
        lines += [f"- [{md(g.title)}]({evidence_link(g.axis)}): `{md_code(g.groups[0].word)}` "
                  f"({len(g.groups[0].systems)} systems)" for g in same]
    return lines + [""]
