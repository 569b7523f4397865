"""Keep the shared cache folder within a size limit: least recently used entries go first.

The cache outlives a clone (paths.cache_root: the user's cache folder), so without a limit
it grows with every version of every framework a machine has run.  An entry is the files
of one key (`<key><suffix>` and its `<key>.sha256`, or a compiler's own files), removed
together so that no digest is left without its bytes; a hit refreshes its time
(cache.BytesCache.get), JAX's compilation cache refreshes its own.  The limit is 2 GB
unless `--cache-limit` or CONFORMANCE_CACHE_LIMIT says otherwise (`0` = no limit).
The drift command's folder (`drift/`: one virtualenv per release and uv's own cache) is no
set of keyed entries: deleting a file inside an env breaks that env, so the pruner neither
counts nor touches it (`python -m conformance drift --prune` removes it).  It once did:
a 1.3 GB drift build pushed every converted artefact out as "least recently used" and
deleted files from a uv install in progress.
"""
from __future__ import annotations

import os
import re
from dataclasses import dataclass
from pathlib import Path

from conformance.paths import cache_root

LIMIT_ENV = "CONFORMANCE_CACHE_LIMIT"
OWN_LIFECYCLE = ("drift",)  # top-level folders managed by their own command, never pruned
DEFAULT_LIMIT = "2GB"
UNITS = {"": 1, "B": 1, "K": 1e3, "KB": 1e3, "M": 1e6, "MB": 1e6, "G": 1e9, "GB": 1e9,
         "KIB": 2 ** 10, "MIB": 2 ** 20, "GIB": 2 ** 30, "T": 1e12, "TB": 1e12}


def parse_size(text: str, source: str = LIMIT_ENV) -> int:
    """'2GB', '500 MB', '1.5GiB', '0' -> bytes; anything else is a usage error naming
    where it came from and the form it takes."""
    m = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*([A-Za-z]*)\s*", str(text))
    unit = m.group(2).upper() if m else None
    if m is None or unit not in UNITS:
        raise ValueError(f"{source}: {text!r} is not a size; write a number with an optional "
                         "unit, e.g. 2GB, 500MB, 1.5GiB (0 = no limit)")
    return int(float(m.group(1)) * UNITS[unit])


def limit_bytes(option: str | None = None) -> int:
    """The limit from the option, else the environment, else 2 GB."""
    if option is not None:
        return parse_size(option, "--cache-limit")
    return parse_size(os.environ.get(LIMIT_ENV) or DEFAULT_LIMIT)


@dataclass(frozen=True)
class Pruned:
    """What one prune did."""

    root: Path
    removed: int  # entries removed
    freed: int  # bytes
    kept: int  # bytes left

    def line(self) -> str:
        return (f"conformance cache {self.root}: removed {self.removed} least recently used "
                f"entries ({self.freed / 1e6:.1f} MB); {self.kept / 1e6:.1f} MB kept")


def _entries(root: Path) -> list[tuple[float, int, list[Path]]]:
    """(last use, bytes, files) per entry: the files of a folder that share the part of their
    name before the first dot (a key and its digest)."""
    groups: dict[tuple[Path, str], list[Path]] = {}
    for folder, dirs, names in os.walk(root):
        if folder == str(root):  # never descend into a folder with its own lifecycle (a
            dirs[:] = [d for d in dirs if d not in OWN_LIFECYCLE]  # drift build: ~500k files)
        for name in names:
            path = Path(folder, name)
            if path.is_file() and not path.is_symlink():
                stem = name.lstrip(".").split(".")[0] or name
                groups.setdefault((path.parent, stem), []).append(path)
    out = []
    for files in groups.values():
        stats = [f.stat() for f in files]
        out.append((max(s.st_mtime for s in stats), sum(s.st_size for s in stats), files))
    return sorted(out, key=lambda e: e[0])


def prune(limit: int, root: Path | None = None) -> Pruned:
    """Remove the oldest entries until the folder holds at most `limit` bytes (0: none)."""
    root = root or cache_root()
    if limit <= 0 or not root.is_dir():
        return Pruned(root, 0, 0, 0)
    entries = _entries(root)
    total = sum(size for _, size, _ in entries)
    removed = freed = 0
    for _, size, files in entries:
        if total - freed <= limit:
            break
        for f in files:
            try:
                f.unlink()
            except OSError:
                pass
        removed, freed = removed + 1, freed + size
    return Pruned(root, removed, freed, total - freed)
