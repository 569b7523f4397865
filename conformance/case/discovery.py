"""Which entries of a cases folder are case files, before any is read.

`*.yaml` in a folder is not always a case file: an editor's lock file
(`.#causal.yaml`, usually a dangling symlink), a directory or a FIFO named
`x.yaml`, a dangling symlink.  Each such entry is skipped with a message naming
it (never opened: a FIFO would block, a device would never end), so it cannot
empty the matrix.  A symlink that leads outside the folder is refused as an error
of that entry, without reading the linked file (its content never reaches a
message).  Only regular files inside the folder are loaded.
"""
from __future__ import annotations

import os
import stat
from dataclasses import dataclass, field
from pathlib import Path

from conformance.case.model import CaseError
from conformance.datafile import excerpt

LOCK_PREFIX = ".#"  # Emacs (and others) lock files


@dataclass(frozen=True)
class Discovery:
    """The entries of one cases folder, sorted by name."""

    files: list[Path] = field(default_factory=list)  # regular case files, to load
    skipped: list[str] = field(default_factory=list)  # "<entry>: why", never read
    refused: list[CaseError] = field(default_factory=list)  # links leaving the folder


def _kind(mode: int) -> str:
    if stat.S_ISDIR(mode):
        return "a directory"
    if stat.S_ISFIFO(mode):
        return "a FIFO"
    if stat.S_ISSOCK(mode):
        return "a socket"
    return "a device" if stat.S_ISCHR(mode) or stat.S_ISBLK(mode) else "not a regular file"


def entry_problem(path: Path, root: Path) -> tuple[str, str] | None:
    """None for a regular case file inside `root`; else ("skip" | "refuse", why)."""
    if path.name.startswith(LOCK_PREFIX):
        return "skip", "an editor lock file"
    try:
        mode = os.stat(path).st_mode
    except FileNotFoundError:
        return "skip", "a dangling symlink" if path.is_symlink() else "vanished"
    except OSError as exc:
        return "skip", f"cannot be inspected ({exc.strerror})"
    if path.is_symlink() and root not in path.resolve().parents:
        return "refuse", ("a symlink leading outside the cases folder: refused, not read "
                          "(copy the file into the folder)")
    if not stat.S_ISREG(mode):
        return "skip", _kind(mode)
    return None


def discover(directory: Path | str) -> Discovery:
    """The `*.yaml` entries of `directory`, sorted: files to load, entries skipped,
    entries refused."""
    root = Path(directory).resolve()
    found = Discovery()
    for path in sorted(Path(directory).glob("*.yaml")):
        problem = entry_problem(path, root)
        if problem is None:
            found.files.append(path)
        elif problem[0] == "skip":
            found.skipped.append(f"{excerpt(str(path), 200)}: skipped, {problem[1]}")
        else:
            found.refused.append(CaseError(path, None, "(file)", problem[1]))
    return found
