"""The ledger's probe cells of each runner, cached on disk like every slow artefact.

A runner's probe cells (conventions/probes: `ledger_cells`) are fully determined by what
runs: the suite's own code, the cases and expectations it reads, the installed frameworks,
the CPU's instruction-set features that move kernels, the settings in the environment, and
the runner's name and parameters.  All of them are hashed into the entry's key, so a warm
run reads the cells instead of probing (tens of seconds of CPU), and a change of any of
them probes again.  The whole `conformance` package is hashed, not the probe modules alone:
a probe reaches runners, the oracle, the case reader and the contract.

Entries are a BytesCache namespace (cache.py: signed, verified, bounded, read once, pruned
with the rest); the bytes are JSON, never pickle, so an entry is only ever parsed, and a
sealed entry that does not parse as a list of cells is evicted and probed again.  A probe
that raised is never stored (the next run asks again), nor a cell that is not a plain
dataclass of strings.  The cell type is the caller's (the ledger's Convention, a layer
above this one), so this module stores flat records and the caller names their class.
"""
from __future__ import annotations

import functools
import hashlib
import json
import os
import platform
import sys
from dataclasses import fields
from importlib import metadata
from pathlib import Path

from conformance.cache import BytesCache, key
from conformance.paths import ROOT

NAMESPACE = "probe-cells"
FORMAT = 1  # bumped when the entry's JSON changes shape
MAX_CELLS = 1000  # a runner has one cell an axis: far under it
MAX_TEXT = 200_000  # characters in one field of a cell (evidence is a few hundred)
# Environment variables that change what a probe measures: the suite's own settings (the
# user's attention spec, limits, extra runners) and the frameworks' kernel and backend
# choices.  Those that name a place or a run (cache and progress folders, a profile file)
# or set how much a framework logs (benchmarks/readme_run.py quiets TensorFlow) move no
# cell and would make every run a miss.
SETTING_PREFIXES = ("CONFORMANCE_", "ONEDNN_", "DNNL_", "KERAS_", "JAX_", "XLA_", "TF_",
                    "TORCH_", "PYTORCH_", "OMP_", "MKL_", "OPENBLAS_", "MLX_", "ORT_")
PLACE_SETTINGS = frozenset({"CONFORMANCE_CACHE_DIR", "CONFORMANCE_CACHE_KEY_FILE",
                            "CONFORMANCE_CACHE_LIMIT", "CONFORMANCE_PROGRESS_DIR",
                            "CONFORMANCE_WORKER_PROFILE", "CONFORMANCE_TEST_SWAP_PAUSE",
                            "TF_CPP_MIN_LOG_LEVEL", "TF_CPP_MIN_VLOG_LEVEL"})
SOURCE_DIRS = ("conformance", "cases", "expectations")  # under the repository root


def _check(data: bytes) -> str | None:
    """Why verified bytes are no entry of this namespace (BytesCache evicts it), or None."""
    try:
        records(data)
    except ValueError as exc:
        return f"it holds no probe cells ({exc})"
    return None


CACHE = BytesCache(NAMESPACE, ".json", counts=False, check=_check)


def _tree_digest(folder: Path, digest) -> None:
    """Every file under `folder` (no bytecode), by its path and bytes."""
    for path in sorted(folder.rglob("*")):
        if "__pycache__" in path.parts or path.suffix == ".pyc" or not path.is_file():
            continue
        digest.update(str(path.relative_to(ROOT)).encode() + b"\0" + path.read_bytes() + b"\0")


@functools.lru_cache(maxsize=None)
def source_hash() -> str:
    """A hash of every file of the conformance package, cases/ and expectations/ (the
    default folders: the ones the probes read, whatever the run's options), once a process."""
    digest = hashlib.sha256()
    for folder in SOURCE_DIRS:
        if (ROOT / folder).is_dir():
            _tree_digest(ROOT / folder, digest)
    return digest.hexdigest()


@functools.lru_cache(maxsize=1)
def installed() -> tuple[tuple[str, str], ...]:
    """(name, version) of every installed distribution: each framework, and what it uses."""
    found = {(d.metadata["Name"] or "", d.version or "") for d in metadata.distributions()}
    return tuple(sorted(found))


def settings(environ=None) -> dict[str, str]:
    """The environment's settings that may move a probe cell (SETTING_PREFIXES)."""
    env = os.environ if environ is None else environ
    return {k: v for k, v in sorted(env.items())
            if k.startswith(SETTING_PREFIXES) and k not in PLACE_SETTINGS}


def parameters(runner) -> dict[str, str]:
    """The runner's class and target and the parameters it was made with
    (`Runner(**params)` keeps them as `params`; the class's defaults are its source)."""
    cls = type(runner)
    return {"class": f"{cls.__module__}:{cls.__qualname__}", "target": runner.target,
            "params": repr(sorted(dict(runner.params).items()))}


def entry_key(runner, function: str | None) -> str:
    """Everything the runner's probe cells depend on (module doc), hashed."""
    from conformance.cpu_isa import cpu_features

    return key(FORMAT, runner.name, parameters(runner), function, source_hash(),
               installed(), sys.version, platform.machine(), cpu_features(), settings())


def encode(cells, cell_type) -> bytes | None:
    """The cells as JSON, or None where one is not a plain `cell_type` of strings."""
    rows = []
    for cell in cells:
        if type(cell) is not cell_type:
            return None
        row = {f.name: getattr(cell, f.name) for f in fields(cell_type)}
        if not all(v is None or isinstance(v, str) for v in row.values()):
            return None
        rows.append(row)
    return json.dumps({"format": FORMAT, "cells": rows}, sort_keys=True).encode()


def records(data: bytes) -> list[dict]:
    """The flat records (str or None fields) an entry holds; ValueError for anything else
    (bounded: no deeper than a list of flat objects, no field over MAX_TEXT)."""
    try:
        doc = json.loads(data.decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError, RecursionError) as exc:
        raise ValueError(f"not JSON: {type(exc).__name__}") from None
    if not isinstance(doc, dict) or doc.get("format") != FORMAT \
            or not isinstance(doc.get("cells"), list) or len(doc["cells"]) > MAX_CELLS:
        raise ValueError("not a probe-cells document of this format")
    for row in doc["cells"]:
        if not isinstance(row, dict) or not all(
                v is None or (isinstance(v, str) and len(v) <= MAX_TEXT) for v in row.values()):
            raise ValueError(f"a cell that is not flat text of at most {MAX_TEXT} characters")
    return doc["cells"]


def decode(data: bytes, cell_type) -> list:
    """The `cell_type` dataclasses an entry holds: each record has exactly its fields, and
    None only where the field's type allows it; ValueError for anything else."""
    names = {f.name for f in fields(cell_type)}
    optional = {f.name for f in fields(cell_type) if "None" in str(f.type)}
    cells = []
    for row in records(data):
        if set(row) != names or any(row[k] is None for k in names - optional):
            raise ValueError(f"a cell without exactly the fields {sorted(names)} as text")
        cells.append(cell_type(**row))
    return cells


def cacheable(runner) -> bool:
    """Only the suite's own runners: their source is in the key.  A runner defined outside
    the package (CONFORMANCE_EXTRA_RUNNERS, a test's fake) or one wrapping the user's code
    (runners/target/: `probe TARGET`) is probed every time, its code being no part of it."""
    import inspect

    try:
        path = Path(inspect.getsourcefile(type(runner)) or "").resolve()
    except TypeError:  # a class without a source file
        return False
    package = ROOT / "conformance"
    return path.is_relative_to(package) and not path.is_relative_to(
        package / "runners" / "target")


def holds(runner, function: str) -> bool:
    """Whether the cache has an entry for the runner's probe cells (so none is queued)."""
    return cacheable(runner) and CACHE.get(entry_key(runner, function)) is not None


def read(runner, function: str, cell_type) -> list | None:
    """The runner's cached probe cells, or None (a miss: never stored, stale, or evicted)."""
    if not cacheable(runner):
        return None
    k = entry_key(runner, function)
    data = CACHE.get(k)
    if data is None:
        return None
    try:
        return decode(data, cell_type)
    except ValueError as exc:
        CACHE.evict(k, f"it holds no probe cells ({exc})")
        return None


def write(runner, function: str, cells, cell_type) -> None:
    """Store the cells of a probe that answered (a probe that raised has none to store)."""
    data = encode(cells, cell_type) if cacheable(runner) else None
    if data is not None:
        CACHE.put(entry_key(runner, function), data)
