"""The ONNX specification's test vectors in every engine, cached (spec_vectors.py runs them).

Each engine runs in its own subprocess (`python -m conformance.runners.onnx.spec_vectors
ENGINE`, the three at once), so an engine that crashes or hangs costs its own rows
(outcome `error`, with the exit status) and nothing else.  An engine's rows are cached
under `.cache/spec-vectors/` keyed by the engine, the versions of onnx (which makes the
cases), of the engine's package, of NumPy and ml_dtypes, and the code of spec_vectors.py:
a warm run reads them back without importing any engine.  Rows of a crashed engine are
never cached.

OpenVINO dispatches its kernels on the CPU's instruction sets, so it runs twice: at the
ISA floor (cpu_isa.py: ONEDNN_MAX_CPU_ISA=AVX2), whose rows are the report's and hold on
any CPU, and at this CPU's own level, whose outcome is recorded on a floor row only where
it differs (`isa_moved`: the CPU's features and that outcome; CPU-dependent, never
compared by check-reports).
"""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time

from conformance.cache import BytesCache, key
from conformance.cpu_isa import ISA_ENV, cpu_features, floor_env
from conformance.paths import ROOT
from conformance.runners.onnx.spec_vectors import ENGINES, PACKAGE
from conformance.versions import package_versions

CACHE = BytesCache("spec-vectors", ".json", covers=("conformance/runners/onnx/spec_vectors.py",))
MODULE = "conformance.runners.onnx.spec_vectors"
TIMEOUT = 600.0  # seconds for one engine's cases (OpenVINO compiles ~93 models: ~25 s)
FORMAT = 2  # bump when the rows' fields change
FLOORED = ("openvino",)  # engines that dispatch on the CPU's ISA: run at the floor, and native


def engine_versions(engine: str) -> dict[str, str]:
    """The versions an engine's results depend on (its cache key, the report's metadata)."""
    return package_versions(tuple(dict.fromkeys(("onnx", PACKAGE[engine], "numpy",
                                                 "ml_dtypes"))))


def _isa(engine: str, native: bool) -> list:
    """What the engine's kernels depend on: the ISA cap it runs under and, native, the CPU's
    features."""
    if engine not in FLOORED:
        return []
    if native:
        return ["native", os.environ.get(ISA_ENV, ""), list(cpu_features())]
    return ["floor", floor_env()[ISA_ENV]]


def _key(engine: str, native: bool = False) -> str:
    return key("spec-vectors", FORMAT, engine, engine_versions(engine), _isa(engine, native))


def _start(engine: str, native: bool = False) -> subprocess.Popen:
    base = os.environ if native or engine not in FLOORED else floor_env()
    env = {**base, "PYTHONPATH": os.pathsep.join(
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
    """{"engines", "versions", "rows", "cached", "isa"}: every engine's rows (from the cache
    where they are there), rows in engine order, each engine's cases in onnx's order; a
    floored engine's rows carry `isa_moved` where the CPU's own level gives another outcome."""
    jobs = [(e, False) for e in engines] + [(e, True) for e in engines if e in FLOORED]
    found: dict[tuple[str, bool], list[dict]] = {}
    for job in jobs:
        data = CACHE.get(_key(*job))
        if data is not None:
            found[job] = json.loads(data)
    cached = [e for e, native in jobs if (e, native) in found and not native]
    started = {job: _start(*job) for job in jobs if job not in found}
    deadline = time.monotonic() + TIMEOUT
    for job, proc in started.items():
        rows, keep = _collect(job[0], proc, deadline)
        found[job] = rows
        if keep:
            CACHE.put(_key(*job), json.dumps(rows, allow_nan=False).encode())
    for engine in engines:
        if engine in FLOORED:
            moved(found[(engine, False)], found[(engine, True)])
    return {"engines": list(engines),
            "versions": {e: engine_versions(e) for e in engines},
            "rows": [r for e in engines for r in found[(e, False)]], "cached": cached,
            "isa": {"floor": floor_env()[ISA_ENV], "features": list(cpu_features())}}


def moved(floor: list[dict], native: list[dict]) -> None:
    """Mark each floor row whose outcome (or failure kind) the CPU's own level changes."""
    at = {r["case"]: r for r in native}
    features = " ".join(cpu_features()) or "unknown"
    for row in floor:
        other = at.get(row["case"])
        if other and (other["outcome"], other["kind"]) != (row["outcome"], row["kind"]):
            row["isa_moved"] = {"features": features, "outcome": other["outcome"],
                                "kind": other["kind"], "max_abs_error": other["max_abs_error"]}
