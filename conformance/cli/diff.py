"""`python -m conformance diff A B`: what differs between two systems, and what to do.

Reads the conventions ledger of a run (reports/conventions.json; the matrix writes
it) and prints report/porting.py's guide: every axis where A and B differ with
both values, the evidence and what to do; with --typed, what the typed numbers
mean on each side and their parameter counts; a converter snippet that runs.
--json prints the same as one JSON object.
"""
from __future__ import annotations

from conformance.cli.text_safety import say  # untrusted text: shown, not obeyed
import json
import sys
from pathlib import Path

EVIDENCE = 240  # characters of a cell's evidence shown in the terminal (the rest: --json)


def _clip(text: str, limit: int = EVIDENCE) -> str:
    return text if len(text) <= limit else text[:limit - 1] + "…"


LEDGER_WHAT = "a conventions ledger (conventions.json, written by the matrix)"
_SHAPE = {"systems": ("id",), "axes": ("id",), "cells": ("system", "axis")}


def _read_ledger(path: Path) -> dict | None:
    """The ledger at `path` read as untrusted data (datafile.py: a regular file, bounded,
    depth-checked JSON; a FIFO or /dev/zero is refused before it is opened) and checked
    for the fields the guide reads; None when there is no file.  A bad file is one
    DataFileError naming the file and the field."""
    from conformance.datafile import DataFileError, read_json

    if not path.exists() and not path.is_symlink():
        return None
    ledger = read_json(path, LEDGER_WHAT)
    if not isinstance(ledger, dict):
        raise DataFileError(path, f"(document): expected a JSON object, {LEDGER_WHAT}")
    for key, names in _SHAPE.items():
        items = ledger.get(key, [])
        ok = isinstance(items, list) and all(isinstance(i, dict) and all(
            isinstance(i.get(n), str) for n in names) for i in items)
        if not ok:
            raise DataFileError(path, f"{key}: expected a list of objects with string "
                                f"{', '.join(names)}; rerun the matrix (python -m pytest)")
    return ledger


def text_lines(guide) -> list[str]:
    """The guide as the terminal shows it."""
    if not guide.differences:
        lines = [f"{guide.a} and {guide.b}: nothing differs ({guide.agreeing} axes agree)."]
    else:
        lines = [f"{guide.a} -> {guide.b}: {len(guide.differences)} axes differ, "
                 f"{guide.agreeing} agree.", ""]
    width = max(len(guide.a), len(guide.b)) + 1
    for d in guide.differences:
        lines += [f"{d.title} ({d.axis})",
                  f"  {guide.a + ':':<{width}} {d.a or '(no cell)'}",
                  f"  {guide.b + ':':<{width}} {d.b or '(no cell)'}",
                  f"  what to do: {d.advice}",
                  f"  evidence ({d.link}):",
                  f"    {guide.a}: {_clip(d.a_evidence)}",
                  f"    {guide.b}: {_clip(d.b_evidence)}", ""]
    if guide.readings:
        lines += ["The typed numbers on each side:"]
        for r in guide.readings:
            count = "" if r.parameters is None else f"{r.parameters:,} parameters"
            lines.append(f"  {r.system}: {r.call}: {r.per_head or '?'} per head, "
                         f"{r.total or '?'} in all, {count}" + (f" ({r.note})" if r.note
                                                                   else ""))
        lines.append("")
    if guide.snippet:
        lines += ["Converter (runs as it is; replace `state` with your weights):", "",
                  *[f"    {line}" if line else "" for line in guide.snippet.splitlines()], ""]
    elif guide.snippet_note:
        lines += [f"Converter: {guide.snippet_note}", ""]
    return lines


def diff(args) -> int:
    from conformance.report.porting import PortingError, porting

    path = Path(args.ledger)
    ledger = _read_ledger(path)
    if ledger is None:
        say(f"diff: no conventions ledger at {path}; run the matrix first "
              "(python -m pytest) or pass --ledger FILE", file=sys.stderr)
        return 1
    try:
        guide = porting(ledger, args.a, args.b, args.typed or "", args.features)
    except PortingError as exc:
        say(f"diff: {exc}", file=sys.stderr)
        return 2
    if args.json:
        print(json.dumps(guide.as_dict(), indent=1))  # \u escapes: nothing a terminal obeys
    else:
        say(*"\n".join(text_lines(guide)).rstrip().split("\n"))
    return 0
