"""The ONNX specification's test vectors in every engine, cached (spec_vectors.py runs them).

Each engine runs in its own subprocess (`python -m conformance.runners.onnx.spec_vectors
ENGINE`, the three at once), so an engine that crashes or hangs costs its own rows
(outcome `error`, with the exit status) and nothing else.  An engine's rows are cached
under `.cache/spec-vectors/` keyed by the engine, the versions of onnx (which makes the
cases), of the engine's package, of NumPy and ml_dtypes, and the code of spec_vectors.py:
a warm run reads them back without importing any engine.  Rows of a crashed engine are
never cached.
"""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time

from conformance.cache import BytesCache, key
from conformance.paths import ROOT
from conformance.runners.onnx.spec_vectors import ENGINES, PACKAGE
from conformance.versions import package_versions

CACHE = BytesCache("spec-vectors", ".json", covers=("conformance/runners/onnx/spec_vectors.py",))
MODULE = "conformance.runners.onnx.spec_vectors"
TIMEOUT = 600.0  # seconds for one engine's cases (OpenVINO compiles ~93 models: ~25 s)
FORMAT = 1  # bump when the rows' fields change


def engine_versions(engine: str) -> dict[str, str]:
    """The versions an engine's results depend on (its cache key, the report's metadata)."""
    return package_versions(tuple(dict.fromkeys(("onnx", PACKAGE[engine], "numpy",
                                                 "ml_dtypes"))))


def _key(engine: str) -> str:
    return key("spec-vectors", FORMAT, engine, engine_versions(engine))


def _start(engine: str) -> subprocess.Popen:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(
        [str(ROOT), *filter(None, [os.environ.get("PYTHONPATH")])])}
    return subprocess.Popen([sys.executable, "-m", MODULE, engine], cwd=ROOT, env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def _died(engine: str, code: int | None, stderr: str) -> list[dict]:
    """One `error` row naming how the engine's process ended (its cases are unknown)."""
    if code is None:
        what = f"timed out after {TIMEOUT:.0f} s and was killed"
    elif code < 0:
        try:
            name = signal.Signals(-code).name
        except ValueError:
            name = "an unknown signal"
        what = f"died (exit {code}, {name})"
    else:
        what = f"exited with status {code}"
    tail = " ".join(stderr.split())[-200:]
    return [{"case": "(all)", "runner": engine, "opset": 0, "outcome": "error",
             "kind": "process", "reason": f"the {engine} process {what}"
             + (f": {tail}" if tail else ""), "max_abs_error": None}]


def _collect(engine: str, proc: subprocess.Popen, deadline: float) -> tuple[list[dict], bool]:
    """(rows, cacheable) of one engine's process."""
    try:
        out, err = proc.communicate(timeout=max(1.0, deadline - time.monotonic()))
    except subprocess.TimeoutExpired:
        proc.kill()
        out, err = proc.communicate()
        return _died(engine, None, err), False
    if proc.returncode != 0:
        return _died(engine, proc.returncode, err), False
    try:
        rows = json.loads(out)
    except ValueError:
        return _died(engine, proc.returncode, "unreadable output: " + out[:100]), False
    return rows, True


def spec_results(engines: tuple[str, ...] = ENGINES) -> dict:
    """{"engines", "versions", "rows", "cached"}: every engine's rows (from the cache where
    they are there), rows in engine order, each engine's cases in onnx's order."""
    found: dict[str, list[dict]] = {}
    for engine in engines:
        data = CACHE.get(_key(engine))
        if data is not None:
            found[engine] = json.loads(data)
    cached = list(found)
    started = {e: _start(e) for e in engines if e not in found}
    deadline = time.monotonic() + TIMEOUT
    for engine, proc in started.items():
        rows, keep = _collect(engine, proc, deadline)
        found[engine] = rows
        if keep:
            CACHE.put(_key(engine), json.dumps(rows, allow_nan=False).encode())
    return {"engines": list(engines),
            "versions": {e: engine_versions(e) for e in engines},
            "rows": [r for e in engines for r in found[e]], "cached": cached}
