"""One isolated env per (library, release), built with uv and probed in one process.

The env holds the release, its companions and PyYAML; this package is read from the
repository's source (PYTHONPATH), never installed, so none of its own dependencies is
pinned into an old era.

uv does not read pip's configuration, so the machine's local wheel folder
(`find-links`) and constraints file are read from pip's settings and passed on; without
them uv resolves a multi-GB CUDA torch.  Envs and uv's cache live under the project's
cache folder (conformance.paths.cache_root()), so a rerun reuses both.
"""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

from conformance.paths import CACHE_ENV, ROOT, cache_root

PROBES = Path(__file__).resolve().parent / "probes" / "run_probes.py"
MARK = "DRIFT-RESULT "


@dataclass
class Probed:
    """What one env gave: its cells, or why it is broken (install or import)."""
    version: str
    requirements: list[str]
    status: str = "ok"  # ok | broken
    error: str = ""  # the install or import error, for a broken env
    installed: dict[str, str] = field(default_factory=dict)
    cells: dict[str, dict] = field(default_factory=dict)
    seconds: float = 0.0  # install + probe wall time (printed, never committed)


def drift_root() -> Path:
    return cache_root() / "drift"


def uv_cache() -> Path:
    return drift_root() / "uv-cache"


def find_uv() -> str:
    """The uv binary: $CONFORMANCE_UV, uv on PATH, or the `uv` package's own binary."""
    if os.environ.get("CONFORMANCE_UV"):
        return os.environ["CONFORMANCE_UV"]
    if shutil.which("uv"):
        return shutil.which("uv")
    try:
        from uv import find_uv_bin
        return find_uv_bin()
    except (ImportError, FileNotFoundError) as e:
        raise SystemExit("drift: uv is not installed; install it with `pip install uv` (or "
                         "`pip install -e '.[drift]'`), or point CONFORMANCE_UV at it") from e


def pip_settings() -> list[str]:
    """--find-links and -c options for uv, read from pip's own configuration."""
    listed = subprocess.run([sys.executable, "-m", "pip", "config", "list"],
                            capture_output=True, text=True).stdout
    found: dict[str, list[str]] = {"find-links": [], "constraint": []}
    for line in listed.splitlines():
        key, _, value = line.partition("=")
        name = key.rsplit(".", 1)[-1]
        if name in found:
            found[name] += value.strip().strip("'\"").split()
    for name, var in (("find-links", "PIP_FIND_LINKS"), ("constraint", "PIP_CONSTRAINT")):
        found[name] += os.environ.get(var, "").split()
    args: list[str] = []
    for link in dict.fromkeys(found["find-links"]):
        args += ["--find-links", link]
    for path in dict.fromkeys(found["constraint"]):
        if Path(path).exists():
            args += ["-c", path]
    return args


def _uv(args: list[str], extra_env: dict | None = None) -> subprocess.CompletedProcess:
    env = {**os.environ, "UV_CACHE_DIR": str(uv_cache()), "UV_NO_PROGRESS": "1",
           **(extra_env or {})}
    return subprocess.run([find_uv(), *args], capture_output=True, text=True, env=env)


def build(name: str, requirements: list[str], index_args: list[str]) -> tuple[Path, str]:
    """The env's Python, and "" or the install error (its last lines)."""
    env_dir = drift_root() / "envs" / name
    done = env_dir / "requirements.json"
    python = env_dir / "bin" / "python"
    if done.exists() and json.loads(done.read_text()) == requirements and python.exists():
        return python, ""
    shutil.rmtree(env_dir, ignore_errors=True)
    made = _uv(["venv", "-q", str(env_dir), "--python", sys.executable])
    if made.returncode:
        return python, _tail(made.stderr)
    got = _uv(["pip", "install", "-q", "--python", str(python), *index_args, *requirements])
    if got.returncode:
        shutil.rmtree(env_dir, ignore_errors=True)
        return python, _tail(got.stderr)
    done.write_text(json.dumps(requirements))
    return python, ""


def _tail(text: str, lines: int = 4) -> str:
    kept = [s for s in text.strip().splitlines() if s.strip()][-lines:]
    return " / ".join(s.strip() for s in kept)[:600]


def probe(python: Path, spec: dict, env: dict[str, str], timeout: float = 600) -> dict:
    """Ask the ledger's probes of `spec`'s runners (Library.spec) in the env's Python: one
    process, one JSON object.  This repository's root is its PYTHONPATH (before any the
    library's `env` adds), and the runners' artefacts go to a cache folder of the env's own
    (a graph or program made by one release is never read by another)."""
    extra = env.get("PYTHONPATH", "")
    full = {**os.environ, "TF_CPP_MIN_LOG_LEVEL": "3", "JAX_PLATFORMS": "cpu",
            "PYTHONNOUSERSITE": "1", CACHE_ENV: str(python.parent.parent / "artefacts"),
            **env, "PYTHONPATH": os.pathsep.join(p for p in (str(ROOT), extra) if p)}
    try:
        done = subprocess.run([str(python), str(PROBES), json.dumps(spec)],
                              capture_output=True, text=True, env=full, timeout=timeout,
                              cwd=str(python.parent.parent))
    except subprocess.TimeoutExpired:
        return {"broken": f"the probes outlived {timeout:.0f} s"}
    for line in done.stdout.splitlines():
        if line.startswith(MARK):
            return json.loads(line[len(MARK):])
    return {"broken": f"the probe process exited {done.returncode}: {_tail(done.stderr)}"}


def probe_release(library, version: str, index_args: list[str] | None = None) -> Probed:
    """Build (or reuse) the env of one release and probe it; never raises for the release."""
    from conformance.history.table import requirement
    start = time.monotonic()
    reqs = requirement(library, version)
    args = pip_settings() if index_args is None else index_args
    python, error = build(f"{library.id}-{version}", reqs, args)
    result = Probed(version, reqs)
    if error:
        result.status, result.error = "broken", f"install failed: {error}"
    else:
        got = probe(python, library.spec(), library.env)
        result.installed = got.get("versions", {})
        if "broken" in got:
            result.status, result.error = "broken", got["broken"]
        result.cells = got.get("cells", {})
    result.seconds = round(time.monotonic() - start, 1)
    return result


def prune() -> str:
    """Remove every drift env and let uv prune its cache; says what is left."""
    shutil.rmtree(drift_root() / "envs", ignore_errors=True)
    done = _uv(["cache", "prune"])
    return (done.stderr or done.stdout).strip() or f"pruned {uv_cache()}"
