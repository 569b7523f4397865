"""Fuzz surfaces of the files the suite keeps: expectations files and cache entries.

Expectations (conventions/expectations.py): the committed `expectations/*.yaml`,
mutated as case files are (cli/fuzz.py: raw YAML values and keys, tags, anchors, deep
nesting, binary junk, dropped and duplicated lines), then read by `load_file`.  An
accepted file must say what a plain YAML reader reads in it (the pinned cells, the
fully-masked-row word, the non-finite answers, the number of known mismatches): a value
coerced or a key read twice would change a verdict silently.  Then `update` (what
--update-expectations does) writes one answer into it: it must refuse cleanly, or leave a
file that reads back with that answer and the file's permissions.

Cache entries (cache.py, through its public BytesCache.put and get): an entry is stored,
then its bytes or its seal are damaged, swapped with another entry's, replaced by a
symlink, a FIFO, a folder or a huge file, or left alone.  `get` must hand out the bytes
that were stored or nothing (the entry evicted): other bytes are a forged hit (SILENT).
"""
from __future__ import annotations

import contextlib
import io
import os
import random
from functools import lru_cache
from pathlib import Path
from typing import Callable

import yaml

from conformance.cli.fuzz_surfaces import ACCEPTED, CLEAN, SILENT, TRACEBACK, clean_message
from conformance.paths import ROOT

RUNNER = "torch.mha"  # the file name the fuzzed expectations file takes
UPDATES = ({("behaviours", "fully_masked_row"): "zeros"},
           {("conventions", "softmax_scale"): "inv_sqrt_head_dim"},
           {("behaviours", "nonfinite_input", "extreme-nan-key"): "nan_spreads"},
           {("conventions", "causal_flag"): None})


@lru_cache(maxsize=1)
def _expectation_docs() -> tuple:
    docs = []
    for path in sorted((ROOT / "expectations").glob("*.yaml")):
        doc = yaml.safe_load(path.read_text(encoding="utf-8"))
        if isinstance(doc, dict) and doc:
            docs.append(doc)
    return tuple(docs)


def _words() -> list:
    """Every value of a pinned cell or behaviour in the committed files: words a mutation
    can move to another axis, where most are wrong and some are right."""
    out = set()
    for doc in _expectation_docs():
        for section in ("conventions", "behaviours"):
            values = (doc.get(section) or {}).values()
            out.update(v for v in values if isinstance(v, str))
    return sorted(out)


def _gentle(rng: random.Random) -> tuple[bytes, str]:
    """A well-formed file with one word moved, dropped or added: most reach `update`."""
    import copy

    doc = copy.deepcopy(rng.choice(_expectation_docs()))
    section = rng.choice(("conventions", "behaviours"))
    table = doc.setdefault(section, {}) if isinstance(doc.get(section, {}), dict) else {}
    op = rng.choice(("word", "word", "drop", "add"))
    if op == "drop" and table:
        del table[rng.choice(sorted(table))]
    elif op == "add" or not table:
        table[rng.choice(["softmax_scale", "causal_flag", "mask_fill", "fully_masked_row",
                          "x", "nonfinite_input"])] = rng.choice(_words())
    else:
        table[rng.choice(sorted(table))] = rng.choice(_words() + [1, None, [], "", "é"])
    text = yaml.safe_dump(doc, allow_unicode=True, sort_keys=rng.random() < 0.5)
    return text.encode("utf-8", "surrogatepass"), f"gentle_{op}"


def _plain(path: Path):
    """What a plain YAML reader makes of the file (None: it cannot read it)."""
    try:
        return yaml.safe_load(path.read_bytes())
    except (yaml.YAMLError, ValueError, RecursionError):
        return None


def _says(loaded, plain) -> str:
    """Why the loaded expectations differ from the plain reading ('' when they agree)."""
    if not isinstance(plain, dict):
        return ""
    behaviours = plain.get("behaviours") or {}
    conventions = plain.get("conventions") or {}
    want = {"conventions": conventions,
            "fully_masked_row": behaviours.get("fully_masked_row"),
            "nonfinite_input": behaviours.get("nonfinite_input") or {},
            "known_mismatches": len(plain.get("known_mismatches") or [])}
    got = {"conventions": dict(loaded.conventions), "fully_masked_row": loaded.fully_masked_row,
           "nonfinite_input": dict(loaded.nonfinite_input),
           "known_mismatches": len(loaded.known_mismatches)}
    differ = [k for k in want if want[k] != got[k]]
    return f"{differ[0]}: the file says {want[differ[0]]!r:.120}, read {got[differ[0]]!r:.120}" \
        if differ else ""


def expectations_surface(mutate: Callable[[random.Random, list], tuple[bytes, str]]):
    """The expectations surface; `mutate(rng, docs)`: the case fuzzer's YAML mutation."""
    def run(folder: Path, n: int, rng: random.Random) -> tuple[str, str, str]:
        data, label = _gentle(rng) if rng.random() < 0.5 else \
            mutate(rng, list(_expectation_docs()))
        return expectations_once(folder, n, data, label)

    return run


def expectations_once(folder: Path, n: int, data: bytes, label: str) -> tuple[str, str, str]:
    """One expectations file: read, compared, then updated (module doc)."""
    from conformance.case.model import CaseError
    from conformance.conventions.expectations import load_file, update

    path = folder / f"{RUNNER}.yaml"
    path.write_bytes(data)
    try:
        loaded = load_file(path, RUNNER)
    except CaseError as exc:  # ExpectationError is one
        return (CLEAN, label, str(exc)) if clean_message(str(exc), path) else (
            TRACEBACK, label, str(exc))
    why = _says(loaded, _plain(path))
    if why:
        return SILENT, label, why
    entries = UPDATES[n % len(UPDATES)]
    os.chmod(path, 0o640)
    try:
        update(path, RUNNER, entries)
    except CaseError as exc:
        return (CLEAN, label + "+update", str(exc)) if clean_message(str(exc), path) else (
            TRACEBACK, label + "+update", str(exc))
    fresh = load_file(path, RUNNER)  # a written file that cannot be read: a traceback
    (keys, value), = entries.items()
    got = fresh.fully_masked_row if keys[1] == "fully_masked_row" else \
        fresh.nonfinite_input.get(keys[-1]) if keys[1] == "nonfinite_input" else \
        fresh.conventions.get(keys[-1])
    mode = path.stat().st_mode & 0o777
    if got != value or mode != 0o640:
        return SILENT, label + "+update", f"wrote {value!r}, read back {got!r}, mode {mode:o}"
    return ACCEPTED, label + "+update", ""


CACHE_OPS = ("keep", "flip", "truncate", "junk", "empty", "huge", "swap_entry",
             "swap_both", "seal_flip", "seal_lines", "seal_crlf", "seal_missing",
             "seal_huge", "seal_other", "link_entry", "link_zero", "fifo_entry",
             "dir_entry", "fifo_seal", "link_seal", "dir_seal")


def _damage(rng: random.Random, op: str, entry: Path, seal: Path, other: tuple) -> None:
    """Do `op` to a stored entry (its bytes at `entry`, its seal at `seal`); `other`: the
    entry and seal of another stored key."""
    from conformance.cli.fuzz_files import byte_op

    def replace(path: Path, make) -> None:
        path.unlink()
        make(path)

    if op in ("flip", "truncate", "junk"):
        data = entry.read_bytes()
        entry.write_bytes(byte_op(rng, data, op, rng.randrange(len(data) + 1)) or b"")
    elif op in ("empty", "huge"):
        entry.write_bytes(b"" if op == "empty" else b"\0" * (9 * 2**20))
    elif op in ("swap_entry", "swap_both"):
        entry.write_bytes(other[0].read_bytes())
        if op == "swap_both":
            seal.write_bytes(other[1].read_bytes())
    elif op == "seal_other":
        seal.write_bytes(other[1].read_bytes())
    elif op in ("seal_flip", "seal_lines", "seal_crlf", "seal_huge"):
        text = seal.read_bytes()
        seal.write_bytes(byte_op(rng, text, "flip", 0) if op == "seal_flip"
                         else text.replace(b"\n", b"\r\n") if op == "seal_crlf"
                         else text * 3 if op == "seal_lines" else text + b"x" * 2**20)
    elif op == "seal_missing":
        seal.unlink()
    elif op in ("link_entry", "link_zero", "fifo_entry", "dir_entry"):
        target = {"link_entry": other[0], "link_zero": Path("/dev/zero")}.get(op)
        replace(entry, lambda p: p.symlink_to(target) if target else
                os.mkfifo(p) if op == "fifo_entry" else p.mkdir())
    elif op in ("fifo_seal", "link_seal", "dir_seal"):
        replace(seal, lambda p: os.mkfifo(p) if op == "fifo_seal" else
                p.symlink_to(other[1]) if op == "link_seal" else p.mkdir())


@contextlib.contextmanager
def _cache_env(folder: Path):
    """The cache rooted in `folder`, its secret key beside it (never the user's)."""
    from conformance import cache

    saved = {k: os.environ.get(k) for k in (cache.CACHE_ENV, "CONFORMANCE_CACHE_KEY_FILE")}
    os.environ[cache.CACHE_ENV] = str(folder / "cache")
    os.environ["CONFORMANCE_CACHE_KEY_FILE"] = str(folder.parent / "key" / "cache.key")
    try:
        yield cache
    finally:
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


def cache_surface(folder: Path, n: int, rng: random.Random) -> tuple[str, str, str]:
    """One stored entry, damaged one way, then read with BytesCache.get (module doc)."""
    with _cache_env(folder) as cache:
        store = cache.BytesCache("fuzz", ".bin", counts=False)
        stored = rng.randbytes(rng.randint(0, 4096))
        store.put("k", stored)
        store.put("other", rng.randbytes(64))
        entry, seal = store.path("k"), store.path("k").with_suffix(cache.SEAL_SUFFIX)
        if not entry.is_file() or not seal.is_file():
            return TRACEBACK, "put", "put stored no entry and seal"
        op = rng.choice(CACHE_OPS)
        other = store.path("other"), store.path("other").with_suffix(cache.SEAL_SUFFIX)
        _damage(rng, op, entry, seal, other)
        try:
            with contextlib.redirect_stderr(io.StringIO()):  # its eviction notices
                got = store.get("k")
        except Exception as exc:  # noqa: BLE001 - any exception get lets out is a traceback
            return TRACEBACK, op, f"{type(exc).__name__}: {str(exc)[:300]}"
    if got is None:
        return (SILENT, op, "an intact entry was refused") if op == "keep" else (CLEAN, op, "")
    if got != stored:
        return SILENT, op, f"a forged hit: {len(got)} bytes, not the {len(stored)} stored"
    return ACCEPTED, op, ""
