"""Where the workers' time goes: wall and CPU seconds per runner and per operation.

    CONFORMANCE_WORKER_PROFILE=/tmp/prof.tsv .venv/bin/python -m pytest cases ...
    .venv/bin/python benchmarks/matrix_profile.py /tmp/prof.tsv [--top 30] [--by case]
    .venv/bin/python benchmarks/matrix_profile.py cold.tsv --against warm.tsv [--cores 2]

Every worker subprocess appends one line per request it answers to the file that
CONFORMANCE_WORKER_PROFILE names (run/worker_process.py): pid, runner, operation (run,
count, conventions, call), case, wall seconds, CPU seconds of the worker process (all its
threads), reply status.  A runner's first request carries its framework's imports.  This
script sums them per runner (or per case, or per worker process) and prints the largest,
with the share of the total.  `--against WARM` subtracts a warm run's profile from a cold
one (same selection, empty CONFORMANCE_CACHE_DIR): the CPU seconds each runner spends
converting and compiling, and the wall those alone take on `--cores` cores at best (the
floor a cold run cannot go under).  Only the matrix's own workers count (processes that
answered at least 20 requests; the suite's tests start smaller ones).  Prints figures;
asserts nothing.
"""
from __future__ import annotations

import argparse
import collections
import sys


def per_runner(path: str) -> dict[str, float]:
    """CPU seconds per runner, in the processes that answered >= 20 requests."""
    rows = [line.rstrip("\n").split("\t") for line in open(path, encoding="utf-8")]
    rows = [r for r in rows if len(r) == 7]
    count = collections.Counter(r[0] for r in rows)
    cpu: dict[str, float] = collections.defaultdict(float)
    for pid, name, _op, _case, _wall, seconds, _status in rows:
        if count[pid] >= 20:
            cpu[name] += float(seconds)
    return cpu


def floor(cold_path: str, warm_path: str, cores: int, top: int) -> int:
    cold, warm = per_runner(cold_path), per_runner(warm_path)
    extra = {name: cold[name] - warm.get(name, 0.0) for name in cold}
    total = sum(v for v in extra.values() if v > 0)
    print(f"cold {sum(cold.values()):.0f} s CPU, warm {sum(warm.values()):.0f} s CPU in the "
          f"matrix's workers; converting and compiling: {total:.0f} s CPU, at best "
          f"{total / cores / 60:.1f} min of wall on {cores} cores")
    print(f"{'runner':<44} {'cold - warm CPU s':>18}")
    for name, seconds in sorted(extra.items(), key=lambda kv: -kv[1])[:top]:
        print(f"{name[:44]:<44} {seconds:>18.1f}")
    return 0


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("profile", help="the file CONFORMANCE_WORKER_PROFILE named")
    ap.add_argument("--top", type=int, default=30, help="rows to print")
    ap.add_argument("--by", choices=("runner", "case", "op", "pid"), default="runner")
    ap.add_argument("--against", metavar="WARM", help="a warm run's profile to subtract")
    ap.add_argument("--cores", type=int, default=2, help="cores for the --against floor")
    opts = ap.parse_args()
    if opts.against:
        return floor(opts.profile, opts.against, opts.cores, opts.top)
    column = {"pid": 0, "runner": 1, "op": 2, "case": 3}[opts.by]
    sums: dict[str, list[float]] = collections.defaultdict(lambda: [0, 0.0, 0.0])
    with open(opts.profile, encoding="utf-8") as fh:
        for line in fh:
            parts = line.rstrip("\n").split("\t")
            if len(parts) != 7:
                continue
            entry = sums[parts[column]]
            entry[0] += 1
            entry[1] += float(parts[4])
            entry[2] += float(parts[5])
    total_wall = sum(v[1] for v in sums.values()) or 1.0
    total_cpu = sum(v[2] for v in sums.values()) or 1.0
    print(f"{sum(int(v[0]) for v in sums.values())} requests: {total_wall:.1f} s wall, "
          f"{total_cpu:.1f} s CPU in the workers")
    print(f"{opts.by:<44} {'requests':>8} {'wall s':>8} {'CPU s':>8} {'CPU %':>6}")
    for name, (count, wall, cpu) in sorted(sums.items(), key=lambda kv: -kv[1][2])[:opts.top]:
        print(f"{name[:44]:<44} {int(count):>8} {wall:>8.1f} {cpu:>8.1f} "
              f"{100 * cpu / total_cpu:>6.1f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
