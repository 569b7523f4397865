"""The README run against its budget: 4 minutes warm, 8 minutes cold, on 2 cores.

    .venv/bin/python benchmarks/readme_run.py [--cold] [--serial] [--parts] [--durations 15]

Runs the README's command (`python -m pytest -n 2`; `--serial`: without `-n`) with its
reports written to a temporary
folder (`--report-dir`, so the committed reports/ stay as they are), and prints its wall
time, the CPU time of it and its children (user + system), the cores it kept busy on
average (CPU / wall), and the ratio to the budget.  `--cold` points CONFORMANCE_CACHE_DIR
at an empty temporary folder (ONNX exports, ExecuTorch and LiteRT programs, OpenVINO
models and JAX's compilation cache all start empty); without it the repository's `.cache/`
is used as it is.  `--parts` also times `pytest tests` and `pytest cases` alone, so the
share of the suite's own tests and of the matrix shows.  `--durations N` prints pytest's N
slowest items of the whole run.  Prints figures; asserts nothing.
"""
from __future__ import annotations

import argparse
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
BUDGET = {"warm": 240.0, "cold": 480.0}  # seconds, on 2 cores (the developers' guide)


def timed(args: list[str], env: dict[str, str]) -> tuple[float, float, int, str]:
    """(wall s, CPU s of the children, exit code, its output) of one pytest run."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    done = subprocess.run([sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-q",
                           *args], cwd=ROOT, env=env, capture_output=True, text=True)
    wall = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return wall, cpu, done.returncode, done.stdout


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--cold", action="store_true", help="start from an empty cache dir")
    ap.add_argument("--serial", action="store_true", help="one pytest process (no -n 2)")
    ap.add_argument("--parts", action="store_true", help="also time tests/ and cases/ alone")
    ap.add_argument("--durations", type=int, default=0, help="print the N slowest items")
    opts = ap.parse_args()
    kind = "cold" if opts.cold else "warm"
    with tempfile.TemporaryDirectory(prefix="readme-run-") as tmp:
        env = dict(os.environ)
        if opts.cold:
            env["CONFORMANCE_CACHE_DIR"] = str(Path(tmp) / "cache")
        xdist = [] if opts.serial else ["-n", "2"]
        runs = [(f"README run (python -m pytest{'' if opts.serial else ' -n 2'})",
                 [*xdist, f"--report-dir={tmp}/all"]
                 + ([f"--durations={opts.durations}"] if opts.durations else []))]
        if opts.parts:
            runs += [("tests/ alone", [*xdist, "tests"]),
                     ("cases/ alone (the matrix)", [*xdist, "cases", f"--report-dir={tmp}/cases"])]
        print(f"{kind} run on {os.cpu_count()} cores; budget {BUDGET[kind]:.0f} s")
        for label, args in runs:
            wall, cpu, code, out = timed(args, env)
            print(f"{label}: {wall:.0f} s wall, {cpu:.0f} s CPU, {cpu / wall:.2f} cores busy, "
                  f"{wall / BUDGET[kind]:.2f} x the {kind} budget, exit {code}")
            summary = [line for line in out.splitlines() if " in " in line and "passed" in line]
            print("   ", summary[-1] if summary else out[-500:])
            if opts.durations and label.startswith("README") and "slowest" in out:
                block = out.split("slowest")[-1].splitlines()[1:opts.durations + 1]
                print("\n".join("    " + line for line in block))
    return 0


if __name__ == "__main__":
    sys.exit(main())
