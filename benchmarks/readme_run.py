"""The README's two commands and a new case against their budgets, on 2 cores.

    .venv/bin/python benchmarks/readme_run.py [--only main-cold,main-warm,tests,new-case]
                                              [--durations 15]

Budgets (the issue "The first hour of a new user"):
  main-cold  `python -m pytest -n 2` on an empty cache folder            <= 7 min
  main-warm  the same again, its cache now filled                         <= 2 min
  tests      `python -m pytest tests -n 2` on that filled cache           <= 2.5 min
  new-case   one new case file (a fresh seed: every artefact of it cold)
             through every runner, `-m matrix`, on that filled cache      <= 60 s
Each figure is printed with its floor and the ratios wall / floor and wall / budget.  The
floor is the frameworks' own work in that run: the CPU seconds of every worker subprocess
request (framework imports, conversions, compilations and calls; CONFORMANCE_WORKER_PROFILE,
run/worker_process.py) spread over the cores, the wall no scheduling of that work can go
under; what lies above it is the suite (collection, the oracle, judging, reports, and the
in-process framework work of the suite's own tests).  The runs use a temporary cache
folder (CONFORMANCE_CACHE_DIR) and write their reports to a temporary folder, so neither
the user's cache nor reports/ moves (`--user-cache`: the user's cache folder as it is, for
warm figures without the cold run).  Prints figures; asserts nothing.
"""
from __future__ import annotations

import argparse
import os
import resource
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
BUDGET = {"main-cold": 420.0, "main-warm": 120.0, "tests": 150.0, "new-case": 60.0}
NEW_CASE = """id: readme-run-new-case
description: "a new case a user drops into cases/, a fresh seed: nothing of it is cached"
attention: {{num_heads: 4, query_features: 32}}
inputs: {{batch: 2, query_len: 5, seed: {seed}}}
"""


@dataclass(frozen=True)
class Timed:
    wall: float  # seconds
    cpu: float  # user + system seconds of pytest and all its children
    floor_cpu: float  # CPU seconds the worker subprocesses' requests took
    code: int
    summary: str  # pytest's last line
    output: str


def timed(args: list[str], env: dict[str, str], profile: Path) -> Timed:
    """One pytest run with its worker profile in `profile` (emptied first)."""
    profile.write_text("")
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    done = subprocess.run([sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-q",
                           *args], cwd=ROOT, capture_output=True, text=True,
                          env={**env, "CONFORMANCE_WORKER_PROFILE": str(profile)})
    wall = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    lines = [line for line in done.stdout.splitlines() if " in " in line and (
        "passed" in line or "failed" in line or "error" in line)]
    return Timed(wall, cpu, worker_cpu(profile), done.returncode,
                 lines[-1] if lines else done.stdout[-300:] + done.stderr[-300:], done.stdout)


def worker_cpu(profile: Path) -> float:
    """The CPU seconds column (6th) of every request line of a worker profile."""
    total = 0.0
    for line in profile.read_text(encoding="utf-8", errors="replace").splitlines():
        fields = line.split("\t")
        try:
            total += float(fields[5])
        except (IndexError, ValueError):
            continue
    return total


def worker_cpu_by_op(profile: Path) -> dict[str, float]:
    """CPU seconds of the worker requests per operation (3rd column: run, conventions,
    count): how much of the floor the matrix's rows take and how much the ledger's probes."""
    total: dict[str, float] = {}
    for line in profile.read_text(encoding="utf-8", errors="replace").splitlines():
        fields = line.split("\t")
        try:
            total[fields[2]] = total.get(fields[2], 0.0) + float(fields[5])
        except (IndexError, ValueError):
            continue
    return total


def runs(tmp: Path, durations: int) -> dict[str, list[str]]:
    """The pytest arguments of each measured run."""
    cases = tmp / "new-cases"
    cases.mkdir()
    (cases / "readme_run_new_case.yaml").write_text(NEW_CASE.format(
        seed=int(time.time()) % 100_000 + 1000))
    slowest = [f"--durations={durations}"] if durations else []
    main = ["-n", "2", f"--report-dir={tmp / 'reports'}", *slowest]
    return {"main-cold": main, "main-warm": main, "tests": ["tests", "-n", "2", *slowest],
            "new-case": ["-n", "2", "-m", "matrix", f"--cases-dir={cases}",
                         f"--report-dir={tmp / 'new-case-reports'}"]}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--only", default=",".join(BUDGET),
                    help="comma-separated: " + ", ".join(BUDGET) + " (in that order; "
                    "main-warm, tests and new-case are warm only after main-cold)")
    ap.add_argument("--durations", type=int, default=0, help="print the N slowest items")
    ap.add_argument("--user-cache", action="store_true",
                    help="run on the user's cache folder as it is (warm figures without a "
                    "cold run first; the new case is still cold)")
    opts = ap.parse_args()
    chosen = [name for name in BUDGET if name in opts.only.split(",")]
    cores = os.cpu_count() or 1
    with tempfile.TemporaryDirectory(prefix="readme-run-") as tmp_name:
        tmp = Path(tmp_name)
        env = {**os.environ, "TF_CPP_MIN_LOG_LEVEL": "3"}
        if not opts.user_cache:
            env["CONFORMANCE_CACHE_DIR"] = str(tmp / "cache")
        args = runs(tmp, opts.durations)
        print(f"{time.strftime('%Y-%m-%d %H:%M')}, {cores} cores, load "
              f"{os.getloadavg()[0]:.2f}; floor = worker CPU / {cores} cores")
        for name in chosen:
            t = timed(args[name], env, tmp / f"{name}.profile.tsv")
            floor = t.floor_cpu / cores
            print(f"{name:9s} {t.wall:6.0f} s wall (budget {BUDGET[name]:.0f} s: "
                  f"{t.wall / BUDGET[name]:.2f} x) | floor {floor:5.0f} s "
                  f"(wall / floor {t.wall / floor if floor else float('inf'):.2f}) | "
                  f"CPU {t.cpu:.0f} s, {t.cpu / t.wall:.2f} cores busy | exit {t.code}")
            print(f"          {t.summary}")
            ops = worker_cpu_by_op(tmp / f"{name}.profile.tsv")
            print("          worker CPU by operation: " + ", ".join(
                f"{op} {seconds:.0f} s" for op, seconds in sorted(ops.items(),
                                                                  key=lambda kv: -kv[1])))
            if opts.durations and "slowest" in t.output:
                block = t.output.split("slowest")[-1].splitlines()[1:opts.durations + 1]
                print("\n".join("          " + line for line in block))
    return 0


if __name__ == "__main__":
    sys.exit(main())
