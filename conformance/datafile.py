"""Reading back a file the suite wrote, as untrusted data: results.json, shard files,
report folders given to check-reports.

Such a file may come from another machine (a CI artifact, a fork's pull request)
or be damaged (a full disk, an interrupted run), so it is read as data only: a
regular file (never a FIFO, a device or a directory: a symlink to /dev/zero is
refused before it is opened), at most a bounded number of bytes, UTF-8, JSON
(no code runs: never pickle), nested at most MAX_DEPTH levels.  Every failure is
one DataFileError naming the file and what is wrong, never a traceback.
Checks of the content (types, ids) belong to each format's reader.
"""
from __future__ import annotations

import json
import os
import re
import stat
from pathlib import Path
from typing import Any

MAX_DEPTH = 32  # results and shard records nest about 6 levels deep
BYTES_ENV = "CONFORMANCE_MAX_RESULTS_BYTES"
# The full matrix's rows take about 9 MB of JSON (a one-shard shard file holds them all).
# Parsed JSON takes about 4x its bytes for rows, but up to 30x for a file of tiny
# containers ('[{},{},...]': 30 MB took 885 MB), so both are bounded: MAX_CONTAINERS
# objects and arrays keep the parse of a file at the byte bound near 4x (about 150 MB).
DEFAULT_MAX_BYTES = 32 * 1024 * 1024
MAX_CONTAINERS = 1_000_000  # '{' and '[' in the text (the full matrix's rows: ~60,000)
SLUG = re.compile(r"[a-z0-9][a-z0-9._-]*")  # the case loader's id rule (fullmatch)
MAX_ID = 100  # characters of a case id (the loader enforces the same bound)
_UNSAFE = re.compile(r"[\x00-\x1f\x7f-\x9f\u061c\u200e\u200f\u202a-\u202e\u2066-\u2069]")


class DataFileError(ValueError):
    """A file read back that cannot be used: its path and the problem, in one line."""

    def __init__(self, path: Path | str, problem: str):
        super().__init__(f"{excerpt(str(path), 300)}: {problem}")
        self.path, self.problem = Path(path), problem


def excerpt(text: str, limit: int = 80) -> str:
    """`text` for a message: control and bidi characters as escapes, at most `limit`."""
    text = _UNSAFE.sub(lambda m: f"\\u{ord(m.group()):04x}", str(text))
    return text if len(text) <= limit else text[:limit - 3] + "..."


def max_bytes(environ=None) -> int:
    """The size bound of a results or shard file: BYTES_ENV (bytes; 1e9 and 1_000 read
    as written) or DEFAULT_MAX_BYTES."""
    from conformance.settings import positive_number

    value = positive_number(environ, BYTES_ENV, DEFAULT_MAX_BYTES, "bytes")
    return int(value)


def regular_file(path: Path, what: str) -> None:
    """Refuse, before opening, anything but a regular file (stat follows symlinks)."""
    try:
        mode = os.stat(path).st_mode
    except FileNotFoundError:
        raise DataFileError(path, f"no such file (or a dangling symlink); expected {what}") \
            from None
    except OSError as exc:
        raise DataFileError(path, f"cannot be read: {exc.strerror}") from None
    if not stat.S_ISREG(mode):
        kind = ("a directory" if stat.S_ISDIR(mode) else "a FIFO" if stat.S_ISFIFO(mode)
                else "a device" if stat.S_ISCHR(mode) or stat.S_ISBLK(mode) else "not a file")
        raise DataFileError(path, f"is {kind}, not a regular file; expected {what}")


def read_text(path: Path | str, what: str, limit: int | None = None) -> str:
    """The UTF-8 text of a regular file of at most `limit` bytes."""
    path, limit = Path(path), max_bytes() if limit is None else limit
    regular_file(path, what)
    try:
        with open(path, "rb") as f:
            data = f.read(limit + 1)
    except OSError as exc:
        raise DataFileError(path, f"cannot be read: {exc.strerror}") from None
    if len(data) > limit:
        raise DataFileError(path, f"larger than {limit:,} bytes (raise the bound with "
                            f"{BYTES_ENV}=BYTES if the file is genuine)")
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise DataFileError(path, f"not UTF-8 (byte {data[exc.start]:#04x} at offset "
                            f"{exc.start})") from None


def depth(value: Any) -> int:
    """How deep `value` nests: 1 for a scalar or an empty dict or list, else 1 + the
    deepest item; counting stops at MAX_DEPTH + 1.  Iterative, one level at a time (a
    deep value cannot exhaust the stack; each value is looked at once)."""
    level, d = [value], 1
    while d <= MAX_DEPTH:
        below = []
        for v in level:
            if isinstance(v, dict):
                below += v.values()
            elif isinstance(v, list):
                below += v
        if not below:
            return d
        level, d = below, d + 1
    return d


def read_json(path: Path | str, what: str, limit: int | None = None) -> Any:
    """The JSON value of `path`, read within the bounds above, or a DataFileError."""
    text = read_text(path, what, limit)
    containers = text.count("{") + text.count("[")  # an upper bound (strings hold some)
    if containers > MAX_CONTAINERS:
        raise DataFileError(path, f"holds {containers:,} JSON objects and arrays, more than "
                            f"{MAX_CONTAINERS:,} (a bound on the memory reading it takes); "
                            f"expected {what}")
    try:
        value = json.loads(text)
    except RecursionError:
        raise DataFileError(path, f"nested deeper than {MAX_DEPTH} levels") from None
    except ValueError as exc:
        raise DataFileError(path, f"not valid JSON: {excerpt(str(exc), 120)}; expected "
                            f"{what}") from None
    if depth(value) > MAX_DEPTH:
        raise DataFileError(path, f"nested deeper than {MAX_DEPTH} levels")
    return value


def check_id(path: Path | str, value: Any, where: str) -> str:
    """A case id read back: the loader's slug rule and length bound, so that it can
    name a file (cases/<id>.md) without leaving its folder."""
    if not isinstance(value, str) or len(value) > MAX_ID or not SLUG.fullmatch(value):
        raise DataFileError(path, f"{where}: {excerpt(repr(value))} is not a case id (a "
                            f"lowercase slug of a-z, 0-9, '.', '_', '-', at most {MAX_ID} "
                            "characters)")
    if value in (".", "..") or "/" in value:
        raise DataFileError(path, f"{where}: {excerpt(repr(value))} is not a case id")
    return value


def inside(folder: Path, path: Path) -> Path:
    """`path`, checked to lie inside `folder` (both resolved): no file is written
    outside the output folder, whatever an id holds."""
    root, target = Path(folder).resolve(), Path(path).resolve()
    if target != root and root not in target.parents:
        raise DataFileError(path, f"lies outside the output folder {root}; refused")
    return Path(path)
