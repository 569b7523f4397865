"""The case x runner matrix printed at the end of pytest: one symbol per cell."""
from __future__ import annotations

from conformance.compare.verdict import Outcome

LEGEND = (". pass, b behaviour, x mismatch, k known mismatch, - not expressible, "
          "s skipped, E error, (space) not run")
_SYMBOLS = {Outcome.PASS: ".", Outcome.BEHAVIOUR: "b", Outcome.MISMATCH: "x",
            Outcome.NOT_EXPRESSIBLE: "-", Outcome.SKIPPED: "s", Outcome.ERROR: "E"}


def symbol(row) -> str:
    if row.outcome.failed and row.known_mismatch:
        return "k"
    return _SYMBOLS[row.outcome]


def matrix_lines(rows, cases, runners) -> list[str]:
    """A legend of numbered runners, then one line per case: its symbols, runner columns
    grouped by five."""
    by_key = {(r.case, r.runner): r for r in rows}
    names = [r.name for r in runners if any(n == r.name for _, n in by_key)]
    ids = [c.id for c in cases if any(cid == c.id for cid, _ in by_key)]
    if not names or not ids:
        return []
    width = max(len(i) for i in ids)
    lines = [f"conformance matrix ({LEGEND}); columns: "
             + ", ".join(f"{n}={name}" for n, name in enumerate(names, 1))]
    header = "".join(str(n % 10) if n % 5 == 0 or n == 1 else " "
                     for n in range(1, len(names) + 1))
    lines.append(" " * (width + 2) + _group(header))
    for cid in ids:
        cells = "".join(symbol(by_key[(cid, n)]) if (cid, n) in by_key else " " for n in names)
        lines.append(f"{cid:<{width}}  {_group(cells)}")
    return lines


def _group(cells: str, size: int = 5) -> str:
    return " ".join(cells[i:i + size] for i in range(0, len(cells), size))


def headline_sentences(rows, cases, runners, report_dir, limit: int = 5) -> list[str]:
    """The run's 3-5 headline sentences (findings.py) for after the matrix, with the
    ledger the run wrote into `report_dir` (none there: the ledger sentences are left
    out)."""
    from conformance.report.base import results_frame, section_frame
    from conformance.report.findings import findings, terminal_lines
    from conformance.report.render import read_ledger

    rows = list(rows)
    if not rows:
        return []
    frame = section_frame(results_frame(rows), rows, runners)
    found = terminal_lines(findings(frame, list(cases), read_ledger(report_dir)), limit)
    return ["conformance answers:"] + [f"- {s}" for s in found] if found else []
