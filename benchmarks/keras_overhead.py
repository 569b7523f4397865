"""How much wall time the Keras runners add to the matrix.

Runs the matrix twice, each in its own `python -m pytest cases` subprocess
(so worker start-up and framework imports are counted): once with the torch
runners only (the foundation's matrix), once with the torch and Keras runners.
Reports go to a temporary directory, never to reports/.  Acceptance target:
the Keras runners add less than 15 s.

    .venv/bin/python benchmarks/keras_overhead.py [--repeat N] [--cold]

By default it measures the steady state: when there is no JAX compilation
cache yet (a fresh clone), one untimed run with Keras fills it first.  --cold
deletes the JAX persistent compilation cache (<cache root>/jax-*) before each
run with Keras instead, to measure a first run (CI starts without that cache);
there JAX compiles ~45 programs, ~10 s of CPU.  The host line (a fixed pure
Python loop) shows how fast the machine was: on a shared host it varies
by half, and the figures with it.
"""
from __future__ import annotations

import argparse
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def runner_names(framework: str) -> list[str]:
    sys.path.insert(0, str(ROOT))
    from conformance.runners import all_runners

    return [r.name for r in all_runners() if r.framework == framework]


def timed_matrix(runners: list[str]) -> float:
    with tempfile.TemporaryDirectory(prefix="keras-overhead-") as out:
        cmd = [sys.executable, "-m", "pytest", "cases", "-q", "-p", "no:cacheprovider",
               f"--report-dir={out}", "--runner", ",".join(runners)]
        start = time.perf_counter()
        subprocess.run(cmd, cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                       check=False)  # failing items are rows, not errors of the benchmark
        return time.perf_counter() - start


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=1)
    parser.add_argument("--cold", action="store_true",
                        help="clear the JAX compilation cache before each run with Keras")
    args = parser.parse_args()
    torch_runners, keras_runners = runner_names("torch"), runner_names("keras")
    start = time.perf_counter()
    sum(range(3 * 10**7))
    print(f"host: a fixed Python loop took {time.perf_counter() - start:.2f} s")
    from conformance.paths import cache_root

    if not args.cold and not any(cache_root().glob("jax-*")):
        print("warm-up: one untimed run with Keras fills the JAX compilation cache")
        timed_matrix(torch_runners + keras_runners)
    added = []
    for i in range(args.repeat):
        torch_only = timed_matrix(torch_runners)
        if args.cold:
            for cache in cache_root().glob("jax-*"):
                shutil.rmtree(cache)
        with_keras = timed_matrix(torch_runners + keras_runners)
        print(f"run {i + 1}: torch runners {torch_only:.1f} s; torch + {len(keras_runners)} Keras "
              f"runners {with_keras:.1f} s; Keras adds {with_keras - torch_only:.1f} s "
              f"(target < 15 s)" + (" [cold JAX cache]" if args.cold else ""))
        added.append(with_keras - torch_only)
    if len(added) > 1:
        print(f"Keras adds: median {statistics.median(added):.1f} s, max {max(added):.1f} s "
              f"over {len(added)} runs (target < 15 s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
