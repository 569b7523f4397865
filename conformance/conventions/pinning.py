"""Pinned conventions: the `conventions:` section of `expectations/<runner>.yaml`
(axis -> value; words: conventions/axes.py).

The conventions items (plugin/conventions_items.py) compare each runner's observed
ledger cells with its file and fail on drift; `--update-expectations` writes the
observations into the file instead (expectations.update: only the lines that change).
Files are read and validated by expectations.py.  Layer conventions, beside ledger.py.
"""
from __future__ import annotations

from pathlib import Path
from typing import Iterable

import yaml

from conformance.conventions import expectations
from conformance.conventions.ledger import LedgerCell

PinError = expectations.ExpectationError  # a malformed file: names the file and the field


def yaml_lines(cells: Iterable[LedgerCell]) -> str:
    """The lines to paste under `conventions:` to pin `cells` of one runner."""
    block = {"conventions": {c.axis: c.value for c in cells}}
    return yaml.safe_dump(block, sort_keys=False, default_flow_style=False, width=1000,
                          allow_unicode=True).rstrip()


def check(runner: str, cells: list[LedgerCell], pinned: dict[str, str] | None,
          compared: set[str], path: Path | str) -> list[str]:
    """Failure messages for one runner: drift of a pinned value, and observed axes not
    pinned (with the YAML to paste).  `compared`: the axes this run settles."""
    messages, unpinned = [], []
    for c in cells:
        if c.axis not in compared:
            continue
        want = (pinned or {}).get(c.axis)
        if want is None:
            if c.observed:
                unpinned.append(c)
        elif want != c.value:
            messages.append(f"{runner}, axis {c.axis}: expected {want!r}, observed {c.value!r}"
                            f"\n    evidence: {c.evidence}")
    if unpinned:
        what = "not pinned" if not pinned else f"{len(unpinned)} observed axis(es) not pinned"
        messages.append(f"{runner}: {what} in {path}; add (or run with "
                        f"--update-expectations):\n" + yaml_lines(unpinned))
    return messages


def update(path: Path | str, runner: str, cells: Iterable[LedgerCell],
           compared: set[str]) -> None:
    """Write the observed values of one runner into its file, keeping everything else; a
    pinned axis this run compares but no longer observes (not_probed) loses its pin."""
    expectations.update(path, runner, {("conventions", c.axis): c.value if c.observed
                                       else None for c in cells if c.axis in compared})
