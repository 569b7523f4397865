"""The conventions ledger files: reports/conventions.json, reports/conventions.md and a
page per axis, reports/conventions/<axis>.md.

The Ledger (conformance/conventions/ledger.py) holds one cell per (system, axis); this
module only writes it.  conventions.md has one table per framework family
(torch, keras, onnx, others), split so that no table has more than
MAX_COLUMNS systems, one word per cell ("†": the cell contradicts the
system's documentation), then a link per axis to its page, which holds the evidence of
every cell of that axis (a page a person reads, and no file near 1 MB as systems and
axes are added).
"""
from __future__ import annotations

import json
from pathlib import Path

from conformance.conventions.cells import unlabelled
from conformance.conventions.ledger import CONFLICT, NOT_PROBED, Ledger, LedgerCell
from conformance.report.base import FAMILIES, MAX_COLUMNS, chunks, family, ledger_word
from conformance.report.escaping import md_code, md_text
from conformance.report.ledger_groups import AXIS_PAGES, axis_page

LEDGER_FILES = ("conventions.json", "conventions.md")


def escape(text: str) -> str:
    """Untrusted text for a Markdown table cell or list line (escaping.md_text)."""
    return md_text(text)


def word(cell: LedgerCell) -> str:
    """A cell as a table shows it (base.ledger_word), "†" where it contradicts the
    system's documentation."""
    return escape(ledger_word(cell.value)) + ("†" if cell.contradicts_documentation else "")


def tables(ledger: Ledger) -> list[tuple[str, list]]:
    """(heading, systems) per table: families in FAMILIES order then others, each
    split into chunks of at most MAX_COLUMNS systems."""
    out = []
    for fam in FAMILIES + ("others",):
        systems = [s for s in ledger.systems if family(s.framework) == fam]
        parts = chunks(systems, MAX_COLUMNS) if systems else []
        for n, chunk in enumerate(parts, 1):
            out.append((fam if len(parts) == 1 else f"{fam} ({n} of {len(parts)})", chunk))
    return out


def _table(ledger: Ledger, systems) -> list[str]:
    lines = ["| axis | " + " | ".join(escape(s.label) for s in systems) + " |",
             "|---|" + "---|" * len(systems)]
    for axis in ledger.axes:
        cells = [word(ledger.cell(s.id, axis.id)) for s in systems]
        lines.append(f"| {escape(axis.id)} | " + " | ".join(cells) + " |")
    return lines


def _bullet(ledger: Ledger, system, axis: str) -> str:
    """One system's cell of `axis` with its evidence, its second witness and the
    documentation's word."""
    c = ledger.cell(system.id, axis)
    seen = f"{c.witnesses} witness{'' if c.witnesses == 1 else 'es'}"
    line = f"- **{escape(system.label)}**: `{md_code(c.value)}` ({c.source}, {seen}): " \
           f"{escape(unlabelled(system.id, c.evidence))}"  # the bullet names both
    if c.second and c.value != CONFLICT:
        line += (f" — and the rows agree: {escape(c.second)}" if c.witnesses == 2
                 else f" — the rows, quoted beside: {escape(c.second)}")
    if c.documented is not None:
        mark = "contradicts" if c.contradicts_documentation else "agrees with"
        line += (f" — {mark} the documentation: `{md_code(c.documented)}`"
                 + (f" ({escape(c.documented_source)})" if c.documented_source else ""))
    return line


def render_axis_page(ledger: Ledger, axis) -> str:
    """reports/conventions/<axis>.md: the axis's meaning and words, then every system's
    cell with its evidence."""
    words = ", ".join(axis.vocabulary) if axis.vocabulary else "short free text"
    lines = [f"# {escape(axis.title)} (`{axis.id}`)", "",
             f"{escape(axis.meaning)}. Words: {escape(words)}.", "",
             "[All axes](../conventions.md)", ""]
    lines += [_bullet(ledger, s, axis.id) for s in ledger.systems]
    return "\n".join(lines).rstrip() + "\n"


def _axis_links(ledger: Ledger) -> list[str]:
    lines = ["## Evidence, axis by axis", ""]
    for axis in ledger.axes:
        lines.append(f"- [{escape(axis.title)}]({axis_page(axis.id)}) (`{axis.id}`)")
    return lines + [""]


def render_markdown(ledger: Ledger) -> str:
    missing = ledger.missing()
    two = sum(c.witnesses == 2 for c in ledger.cells)
    split = sum(c.value == CONFLICT for c in ledger.cells)
    lines = ["# Conventions ledger", "",
             "Every cell is observed by running the system (a documented model, marked "
             "(model): read from its cited documentation), by a probe of its runner or from "
             "this run's matrix rows; the evidence below says which. † = contradicts the "
             f"system's documentation; {NOT_PROBED} = nothing in this run settles it "
             f"({len(missing)} cell(s)). Words: conformance/axes.py.", "",
             f"Witnesses: {two} cell(s) are read twice, by a probe and by this run's rows "
             f"(agreeing, or `{CONFLICT}`: {split} cell(s)); every other cell has one witness "
             "or none (each evidence line says how many).", ""]
    for heading, systems in tables(ledger):
        lines += [f"## {escape(heading)}", ""] + _table(ledger, systems) + [""]
    return "\n".join(lines + _axis_links(ledger)).rstrip() + "\n"


KEPT = ("system", "axis", "value", "evidence")  # every cell has them, even when empty
# a cell's fields the axis page holds whole and conventions.json leaves out (it keeps the
# documented word and the contradiction, which drift and check-reports compare)
PAGE_ONLY = ("documented_source",)
JSON_EVIDENCE = 72  # characters of a cell's evidence in conventions.json (its page: all)
# characters of a not_applicable cell's evidence: its head, which names the witness (most
# are a signature read: "no argument among [...]")
SILENT_EVIDENCE = 40
CUT = " [...]"  # where an evidence was cut: its axis page, conventions/<axis>.md, has all


def json_evidence(text: str, axis: str = "", limit: int | None = None) -> str:
    """A cell's evidence for conventions.json: a head and a pointer to its axis page
    (conventions/<axis>.md, every word): whole up to `limit` characters, else its head
    cut between words, then CUT.  The file stays well under 1 MB as systems are added.
    Only a head: the end of a long evidence is often a framework's message quoted up to a
    fixed length, whose words move with the CPU (a kernel's name a few characters longer);
    the head names the witness and what it ran, the same on every machine.
    The cut falls between words, so no figure is cut in two (a figure's first digits alone
    are no figure the CPU mask of check-reports can read)."""
    limit = JSON_EVIDENCE if limit is None else limit
    if len(text) <= limit:
        return text
    space = text.rfind(" ", limit // 2, limit - len(CUT) + 1)
    return text[:space if space > 0 else limit - len(CUT)] + CUT


def silent_evidence(text: str) -> str:
    """A not_applicable cell's evidence: its head only (json_evidence, SILENT_EVIDENCE)."""
    return json_evidence(text, limit=SILENT_EVIDENCE)


def json_cell(cell: dict) -> dict:
    """One cell as conventions.json holds it: the KEPT fields, the optional ones only where
    they say something (no documented word, no contradiction, no second witness, one
    witness: left out), PAGE_ONLY left out, the texts cut (json_evidence; a
    not_applicable cell's evidence: silent_evidence).  Deterministic: the same cell gives
    the same line."""
    out = {}
    for k, v in cell.items():
        if k in PAGE_ONLY or k not in KEPT and (
                v == "" or v is None or v is False or (k == "witnesses" and v == 1)):
            continue
        if k == "evidence" and cell.get("value") == "not_applicable":
            v = silent_evidence(v)
        elif k in ("evidence", "second_witness"):
            v = json_evidence(v, cell["axis"])
        out[k] = v
    return out


def render_json(ledger: Ledger) -> str:
    """One axis, system or cell per line (a diff names the cell that changed), each cell as
    json_cell gives it: the file stays well under 1 MB as systems are added.  Readers take
    the missing fields as empty (`.get`; witnesses: 1); the axis pages hold every word."""
    return render_json_data(ledger.as_dict())


def render_json_data(data: dict) -> str:
    """render_json of a ledger's as_dict() (or of a conventions.json read back: cutting
    again changes nothing)."""
    def item(x) -> str:
        if isinstance(x, dict) and "axis" in x and "system" in x:
            x = json_cell(x)
        return json.dumps(x, ensure_ascii=False, separators=(",", ":"))

    parts = [json.dumps(k) + ": " + ("[\n" + ",\n".join(item(x) for x in v) + "\n]"
                                     if isinstance(v, list) else json.dumps(v))
             for k, v in data.items()]
    return "{\n" + ",\n".join(parts) + "\n}\n"


def write_ledger(ledger: Ledger, out_dir) -> list[Path]:
    """Write conventions.json, conventions.md and the axis pages into out_dir (an axis page
    of an axis no longer in the ledger is removed); returns the paths."""
    out = Path(out_dir)
    (out / AXIS_PAGES).mkdir(parents=True, exist_ok=True)
    paths = [out / name for name in LEDGER_FILES]
    paths[0].write_text(render_json(ledger))
    paths[1].write_text(render_markdown(ledger))
    pages = {out / axis_page(a.id): render_axis_page(ledger, a) for a in ledger.axes}
    for stale in set((out / AXIS_PAGES).glob("*.md")) - set(pages):
        stale.unlink()
    for path, text in pages.items():
        path.write_text(text)
    return paths + sorted(pages)
