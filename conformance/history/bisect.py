"""Compare adjacent releases cell by cell and name the first release that changed a cell.

Where two adjacent releases of the table disagree on a cell (both envs working, neither
value a probe error), the releases in between (the registry's list)
are bisected: each probe of a release answers every cell at once, and results are
shared between cells.  The first release is the first whose value differs from the
older side's; bisection assumes the cell changed once in the interval (a release whose
env is broken is skipped, and the walk says so).  A cell going from `api_absent` to a
value is an API that appeared (kind `api_added`), bisected the same way but kept apart
from the convention changes (kind `convention`).
"""
from __future__ import annotations

import subprocess
import sys
from dataclasses import dataclass, field

NOT_COMPARABLE = ("probe_error",)  # the probe failed: says nothing about the release
ABSENT = "api_absent"


@dataclass
class Change:
    cell: str
    before: str  # the older table release
    after: str  # the newer table release
    old_value: str
    new_value: str
    first_release: str = ""  # the first release with a value other than old_value
    last_old_release: str = ""  # the release just before it that still had old_value
    evidence_old: str = ""
    evidence_new: str = ""
    walked: list[str] = field(default_factory=list)  # releases probed in between
    skipped: list[str] = field(default_factory=list)  # releases with no comparable value

    @property
    def kind(self) -> str:
        """convention, api_added or api_removed: the outcomes stay apart in the report."""
        if self.old_value == ABSENT:
            return "api_added"
        return "api_removed" if self.new_value == ABSENT else "convention"


def release_list(package: str, index_args: list[str] | None = None) -> list[str]:
    """The registry's releases of `package`, oldest first (pip's own index settings)."""
    from packaging.version import Version
    cmd = [sys.executable, "-m", "pip", "index", "versions", package, *(index_args or [])]
    done = subprocess.run(cmd, capture_output=True, text=True)
    for line in done.stdout.splitlines():
        if line.startswith("Available versions:"):
            found = [v.strip() for v in line.split(":", 1)[1].split(",") if v.strip()]
            return sorted(found, key=Version)
    raise RuntimeError(f"`{' '.join(cmd)}` listed no versions: {done.stderr.strip()[-300:]}")


def cell_value(probed, cell: str) -> str | None:
    """The cell's value in a working env, None where it cannot be compared."""
    if probed is None or probed.status != "ok" or cell not in probed.cells:
        return None
    value = probed.cells[cell]["value"]
    return None if value in NOT_COMPARABLE else value


def changes(results: list) -> list[Change]:
    """Per cell, every pair of successive comparable releases whose values differ (a
    broken env or a probe error in between is stepped over, not a change)."""
    found = []
    cells = sorted({cell for r in results if r.status == "ok" for cell in r.cells})
    for cell in cells:
        previous = None
        for newer in results:
            value = cell_value(newer, cell)
            if value is None:
                continue
            if previous is not None and cell_value(previous, cell) != value:
                found.append(Change(cell, previous.version, newer.version,
                                    cell_value(previous, cell), value,
                                    first_release=newer.version,
                                    last_old_release=previous.version,
                                    evidence_old=previous.cells[cell]["evidence"],
                                    evidence_new=newer.cells[cell]["evidence"]))
            previous = newer
    return found


def bisect(change: Change, releases: list[str], probe, memo: dict) -> Change:
    """Narrow `change` to the first release with a new value; `probe(version)` -> Probed."""
    from packaging.version import Version
    lo, hi = Version(change.before), Version(change.after)
    between = [v for v in releases if lo < Version(v) < hi]
    old_side, new_side = memo[change.before], memo[change.after]
    while between:
        mid = between[len(between) // 2]
        if mid not in memo:
            memo[mid] = probe(mid)
            change.walked.append(mid)
        value = cell_value(memo[mid], change.cell)
        if value is None:  # broken env or no such cell: drop it and go on
            change.skipped.append(mid)
            between.remove(mid)
            continue
        index = between.index(mid)
        if value == change.old_value:
            old_side, between = memo[mid], between[index + 1:]
        else:
            new_side, between = memo[mid], between[:index]
    change.last_old_release, change.first_release = old_side.version, new_side.version
    change.new_value = new_side.cells[change.cell]["value"]
    change.evidence_old = old_side.cells[change.cell]["evidence"]
    change.evidence_new = new_side.cells[change.cell]["evidence"]
    return change
