"""Where the workers' time goes: wall and CPU seconds per runner and per operation.

    CONFORMANCE_WORKER_PROFILE=/tmp/prof.tsv .venv/bin/python -m pytest cases ...
    .venv/bin/python benchmarks/matrix_profile.py /tmp/prof.tsv [--top 30] [--by case]

Every worker subprocess appends one line per request it answers to the file that
CONFORMANCE_WORKER_PROFILE names (run/worker_process.py): pid, runner, operation (run,
count, conventions, call), case, wall seconds, CPU seconds of the worker process (all its
threads), reply status.  A runner's first request carries its framework's imports.  This
script sums them per runner (or per case, or per worker process) and prints the largest,
with the share of the total.  Prints figures; asserts nothing.
"""
from __future__ import annotations

import argparse
import collections
import sys


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("profile", help="the file CONFORMANCE_WORKER_PROFILE named")
    ap.add_argument("--top", type=int, default=30, help="rows to print")
    ap.add_argument("--by", choices=("runner", "case", "op", "pid"), default="runner")
    opts = ap.parse_args()
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
