"""The conventions ledger files: reports/conventions.json and reports/conventions.md.

The Ledger (conformance/ledger.py) holds one cell per (system, axis); this
module only writes it.  The Markdown has one table per framework family
(torch, keras, onnx, others), split so that no table has more than
MAX_COLUMNS systems, one word per cell ("†": the cell contradicts the
system's documentation), then the evidence of every cell, axis by axis.
"""
from __future__ import annotations

import json
import re
from pathlib import Path

from conformance.conventions.ledger import NOT_PROBED, Ledger, LedgerCell

MAX_COLUMNS = 8  # systems per table (plus the axis column)
WORD_LIMIT = 28  # characters of a free-text value shown in a table
FAMILIES = ("torch", "keras", "onnx")  # then "others"
LEDGER_FILES = ("conventions.json", "conventions.md")
_CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f\u061c\u200e\u200f\u202a-\u202e"
                      r"\u2066-\u2069]")  # control and bidi characters


def escape(text: str) -> str:
    """One Markdown table cell or list line: no pipes, newlines or control characters."""
    text = _CONTROL.sub("", str(text).replace("\r\n", " ").replace("\n", " ").replace("\r", " ")
                        .replace("\t", " "))
    return text.replace("\\", "\\\\").replace("|", "\\|").replace("`", "'")


def word(cell: LedgerCell) -> str:
    """What a table shows: the value (a vocabulary word), or for a free-text value its
    head: 'in_proj_weight (3E, E) out x in' -> 'in_proj_weight(3E,E)', '4E^2 + 4E (+ 2E
    LayerNorm)' -> '4E^2 + 4E', at most WORD_LIMIT characters.  The evidence has it all."""
    value = cell.value
    m = re.match(r"^(\S+) \(([^)]*)\)", value)
    if m:
        shown = f"{m[1]}({m[2].replace(' ', '')})"
    else:
        cut = value.find(" (")
        shown = value[:cut] if cut > 0 else value
    if len(shown) > WORD_LIMIT:
        shown = shown[:WORD_LIMIT - 1] + "…"
    return escape(shown) + ("†" if cell.contradicts_documentation else "")


def family(framework: str) -> str:
    return framework if framework in FAMILIES else "others"


def tables(ledger: Ledger) -> list[tuple[str, list]]:
    """(heading, systems) per table: families in FAMILIES order then others, each
    split into chunks of at most MAX_COLUMNS systems."""
    out = []
    for fam in FAMILIES + ("others",):
        systems = [s for s in ledger.systems if family(s.framework) == fam]
        count = -(-len(systems) // MAX_COLUMNS)  # tables needed; columns spread evenly
        chunks = [systems[n * len(systems) // count:(n + 1) * len(systems) // count]
                  for n in range(count)]
        for n, chunk in enumerate(chunks, 1):
            out.append((fam if len(chunks) == 1 else f"{fam} ({n} of {len(chunks)})", chunk))
    return out


def _table(ledger: Ledger, systems) -> list[str]:
    lines = ["| axis | " + " | ".join(escape(s.label) for s in systems) + " |",
             "|---|" + "---|" * len(systems)]
    for axis in ledger.axes:
        cells = [word(ledger.cell(s.id, axis.id)) for s in systems]
        lines.append(f"| {escape(axis.id)} | " + " | ".join(cells) + " |")
    return lines


def _evidence(ledger: Ledger) -> list[str]:
    lines = ["## Evidence", ""]
    labels = {s.id: s.label for s in ledger.systems}
    for axis in ledger.axes:
        words = ", ".join(axis.vocabulary) if axis.vocabulary else "short free text"
        lines += [f"### {escape(axis.title)} (`{axis.id}`)", "",
                  f"{escape(axis.meaning)}. Words: {escape(words)}.", ""]
        for s in ledger.systems:
            c = ledger.cell(s.id, axis.id)
            line = f"- **{escape(labels[s.id])}**: `{escape(c.value)}` ({c.source}): " \
                   f"{escape(c.evidence)}"
            if c.documented is not None:
                mark = "contradicts" if c.contradicts_documentation else "agrees with"
                line += (f" — {mark} the documentation: `{escape(c.documented)}`"
                         + (f" ({escape(c.documented_source)})" if c.documented_source else ""))
            lines.append(line)
        lines.append("")
    return lines


def render_markdown(ledger: Ledger) -> str:
    missing = ledger.missing()
    lines = ["# Conventions ledger", "",
             "Every cell is observed by running the system (a documented model, marked "
             "(model): read from its cited documentation), by a probe of its runner or from "
             "this run's matrix rows; the evidence below says which. † = contradicts the "
             f"system's documentation; {NOT_PROBED} = nothing in this run settles it "
             f"({len(missing)} cell(s)). Words: conformance/axes.py.", ""]
    for heading, systems in tables(ledger):
        lines += [f"## {escape(heading)}", ""] + _table(ledger, systems) + [""]
    return "\n".join(lines + _evidence(ledger)).rstrip() + "\n"


def render_json(ledger: Ledger) -> str:
    return json.dumps(ledger.as_dict(), indent=1, ensure_ascii=False) + "\n"


def write_ledger(ledger: Ledger, out_dir) -> list[Path]:
    """Write conventions.json and conventions.md into out_dir; returns the paths."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    paths = [out / name for name in LEDGER_FILES]
    paths[0].write_text(render_json(ledger))
    paths[1].write_text(render_markdown(ledger))
    return paths
