"""Cold against warm matrix time for the ONNX rows: what the export cache saves.

    .venv/bin/python benchmarks/onnx_cache.py [--runner NAME ...] [--repeat N]

Runs the ONNX rows of the matrix (`-m onnx`) as one pytest command, twice (or
2 x N times), with CONFORMANCE_CACHE_DIR pointing at a fresh temporary
directory: the first run exports every graph (cold), the second finds them
all in the cache (warm).  Reports go to a temporary directory too, so
reports/ and .cache/ are never touched.  Prints both wall times, their ratio
(target: warm at least 3x faster) and how many graphs were cached.
"""
from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def _env(cache: str) -> dict[str, str]:
    """The ONNX runners are registry lines: `-m onnx` selects them all."""
    sys.path.insert(0, str(ROOT))
    from conformance.paths import CACHE_ENV

    return {**os.environ, CACHE_ENV: cache}


def _run(env: dict[str, str], reports: str, runners: list[str]) -> tuple[float, int]:
    cmd = [sys.executable, "-m", "pytest", "cases", "-q", "-m", "onnx", "-p", "no:cacheprovider",
           f"--report-dir={reports}"]
    for r in runners:
        cmd += ["--runner", r]
    start = time.perf_counter()
    proc = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True)
    elapsed = time.perf_counter() - start
    summary = (proc.stdout.strip().splitlines() or ["(no output)"])[-1]
    print(f"    {summary}")
    return elapsed, proc.returncode


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runner", action="append", default=[],
                        help="only these ONNX runners (default: all)")
    parser.add_argument("--repeat", type=int, default=1, help="cold/warm pairs to run")
    args = parser.parse_args(argv)
    colds, warms = [], []
    for n in range(args.repeat):
        with tempfile.TemporaryDirectory(prefix="onnx-cache-bench-") as tmp:
            cache, reports = os.path.join(tmp, "cache"), os.path.join(tmp, "reports")
            env = _env(cache)
            print(f"pair {n + 1}: cold (empty cache {cache})")
            cold, _ = _run(env, reports, args.runner)
            graphs = len(list(Path(cache, "onnx").glob("*.onnx")))
            print(f"pair {n + 1}: warm ({graphs} cached graphs)")
            warm, _ = _run(env, reports, args.runner)
        colds.append(cold)
        warms.append(warm)
    cold, warm = min(colds), min(warms)
    print(f"cold {cold:.1f} s, warm {warm:.1f} s, ratio {cold / warm:.1f}x "
          f"({'meets' if cold / warm >= 3 else 'misses'} the 3x target); "
          f"{graphs} graphs cached")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
