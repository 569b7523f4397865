"""A content-addressed cache of bytes on disk, for artefacts that are slow to make.

A dynamo ONNX export of one small attention module costs 1-3 s; the matrix
makes dozens, all fully determined by the case content and library versions.
So they are cached: `key(...)` hashes whatever determines the artefact (the
caller passes case fingerprint, runner name, variant and versions), and the
bytes live in `<root>/<namespace>/<key>`.

The root is `.cache/` at the repository root (git-ignored), or the directory
named by the environment variable CONFORMANCE_CACHE_DIR (benchmarks point it
at a fresh temporary directory to measure a cold run); paths.cache_root
resolves it.  Writes are atomic
(temporary file in the same directory, then `os.replace`), so two processes
(the pytest process and a worker) never read a half-written entry.  A cache
that cannot be written (read-only checkout) is not an error: the artefact is
made again next time.
"""
from __future__ import annotations

import hashlib
import json
import os
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from conformance.paths import CACHE_ENV, cache_root

__all__ = ["CACHE_ENV", "BytesCache", "cache_root", "key"]


def key(*parts: object) -> str:
    """A stable hash of JSON-able parts (order matters)."""
    text = json.dumps(parts, sort_keys=True, default=str, separators=(",", ":"))
    return hashlib.sha256(text.encode()).hexdigest()[:32]


@dataclass(frozen=True)
class BytesCache:
    """key -> bytes in one namespace directory (e.g. "onnx")."""

    namespace: str  # sub-directory of the cache root
    suffix: str = ""  # file extension, for people browsing the directory (".onnx")

    @property
    def directory(self) -> Path:
        # Resolved at each use, so a benchmark may change the env var mid-process.
        return cache_root() / self.namespace

    def path(self, k: str) -> Path:
        return self.directory / f"{k}{self.suffix}"

    def get(self, k: str) -> bytes | None:
        try:
            return self.path(k).read_bytes()
        except OSError:
            return None

    def put(self, k: str, data: bytes) -> None:
        target = self.path(k)
        try:
            target.parent.mkdir(parents=True, exist_ok=True)
            fd, tmp = tempfile.mkstemp(dir=target.parent, prefix=f".{k}.", suffix=".tmp")
            try:
                with os.fdopen(fd, "wb") as fh:
                    fh.write(data)
                os.replace(tmp, target)
            except BaseException:
                Path(tmp).unlink(missing_ok=True)
                raise
        except OSError:
            return  # an unwritable cache only costs time

    def get_or_make(self, k: str, make: Callable[[], bytes]) -> tuple[bytes, bool]:
        """(data, True) from the cache, else (make(), False) after storing it."""
        data = self.get(k)
        if data is not None:
            return data, True
        data = make()
        self.put(k, data)
        return data, False
