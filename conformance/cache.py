"""A content-addressed cache of bytes on disk, for artefacts that are slow to make.

A dynamo ONNX export of one small attention module costs 1-3 s; the matrix
makes dozens, all fully determined by the case content and library versions.
So they are cached: `key(...)` hashes whatever determines the artefact (the
caller passes case fingerprint, runner name, variant and versions), and the
bytes live in `<root>/<namespace>/<key>`.

The root is the user's cache folder (`$XDG_CACHE_HOME/attention-conformance`, else
`~/.cache/attention-conformance`), shared by every clone on the machine, or the
directory named by the environment variable CONFORMANCE_CACHE_DIR (benchmarks point it
at a fresh temporary directory to measure a cold run); paths.cache_root resolves it.
A hit refreshes the entry's time, and `prune` (run at the end of every session) removes
the least recently used entries until the folder fits its size limit.  Writes are atomic
(temporary file in the same directory, then `os.replace`), so two processes
(the pytest process and a worker) never read a half-written entry.  A cache
that cannot be written (read-only checkout) is not an error: the artefact is
made again next time.

Every entry is verified before use: beside `<key><suffix>` lies `<key>.sha256`,
the SHA-256 of the key and the bytes together, so a truncated entry, a damaged one
or one swapped for another key's (even with its own digest file) fails the check;
it is evicted (both files removed), made again, and the eviction is reported on
stderr naming the file.  `covers` names source files whose code the artefact
depends on (the ONNX exports embed the weights of oracle/canonical.py's seeded
generator): their content is hashed into every key, so a change of that code
never reuses an old entry.
"""
from __future__ import annotations

import functools
import hashlib
import json
import os
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from conformance import progress
from conformance.paths import CACHE_ENV, ROOT, cache_root

__all__ = ["CACHE_ENV", "BytesCache", "cache_root", "key"]


def key(*parts: object) -> str:
    """A stable hash of JSON-able parts (order matters)."""
    text = json.dumps(parts, sort_keys=True, default=str, separators=(",", ":"))
    return hashlib.sha256(text.encode()).hexdigest()[:32]


@functools.lru_cache(maxsize=None)
def code_hash(*files: str) -> str:
    """A hash of the given source files (paths relative to the repository root)."""
    digest = hashlib.sha256()
    for name in files:
        digest.update(name.encode() + b"\0" + (ROOT / name).read_bytes() + b"\0")
    return digest.hexdigest()[:16]


def _digest(k: str, data: bytes) -> str:
    return hashlib.sha256(k.encode() + b"\0" + data).hexdigest()


def _touch(path: Path) -> None:
    try:
        os.utime(path)
    except OSError:
        pass


@dataclass(frozen=True)
class BytesCache:
    """key -> bytes in one namespace directory (e.g. "onnx"), each entry verified."""

    namespace: str  # sub-directory of the cache root
    suffix: str = ""  # file extension, for people browsing the directory (".onnx")
    covers: tuple[str, ...] = ()  # source files hashed into every key (see module doc)
    counts: bool = True  # its writes are conversions for the progress line (not an index)

    @property
    def directory(self) -> Path:
        # Resolved at each use, so a benchmark may change the env var mid-process.
        return cache_root() / self.namespace

    def full_key(self, k: str) -> str:
        return key(k, code_hash(*self.covers)) if self.covers else k

    def path(self, k: str) -> Path:
        return self.directory / f"{self.full_key(k)}{self.suffix}"

    def _sidecar(self, k: str) -> Path:
        return self.directory / f"{self.full_key(k)}.sha256"

    def get(self, k: str) -> bytes | None:
        """The entry's bytes when present and verified; a bad entry is evicted (None)."""
        path = self.path(k)
        try:
            data = path.read_bytes()
        except OSError:
            return None
        try:
            stored = self._sidecar(k).read_text(encoding="ascii").strip()
        except (OSError, UnicodeDecodeError):
            stored = ""
        if stored == _digest(self.full_key(k), data):
            _touch(path)  # least recently used goes first when the cache is pruned
            return data
        self.evict(k, "no digest beside it" if not stored else "its content does not match "
                   "its digest (truncated, damaged or another entry's)")
        return None

    def evict(self, k: str, why: str) -> None:
        for p in (self.path(k), self._sidecar(k)):
            try:
                p.unlink()
            except OSError:
                pass
        print(f"conformance cache: evicted {self.path(k)}: {why}; it is made again",
              file=sys.stderr)

    def _write(self, target: Path, data: bytes) -> None:
        fd, tmp = tempfile.mkstemp(dir=target.parent, prefix=f".{target.name}.", suffix=".tmp")
        try:
            with os.fdopen(fd, "wb") as fh:
                fh.write(data)
            os.replace(tmp, target)
        except BaseException:
            Path(tmp).unlink(missing_ok=True)
            raise

    def put(self, k: str, data: bytes) -> None:
        target = self.path(k)
        try:
            target.parent.mkdir(parents=True, exist_ok=True)
            self._write(target, data)  # the entry first: a digest never names missing bytes
            self._write(self._sidecar(k), _digest(self.full_key(k), data).encode())
        except OSError:
            return  # an unwritable cache only costs time
        if self.counts:
            progress.record(k=self.namespace)  # a conversion made: the run's progress line

    def get_or_make(self, k: str, make: Callable[[], bytes]) -> tuple[bytes, bool]:
        """(data, True) from the cache, else (make(), False) after storing it."""
        data = self.get(k)
        if data is not None:
            return data, True
        data = make()
        self.put(k, data)
        return data, False
