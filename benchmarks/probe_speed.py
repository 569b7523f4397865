"""`probe` on a NumPy function, warm, against its budget (issue 31: <= 20 s on 2 cores).

Runs `python -m conformance probe examples.textbook:attention --kind sdpa` REPEAT times in
a subprocess (as a user does) and prints the wall seconds of each, the best, the budget and
the ratio; the floor is the same command on `--help` (the interpreter and the CLI's own
start, nothing of the suite's matrix).

    .venv/bin/python benchmarks/probe_speed.py [REPEAT]
"""
from __future__ import annotations

import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
BUDGET = 20.0


def timed(args: list[str]) -> float:
    start = time.perf_counter()
    subprocess.run([sys.executable, "-m", "conformance", *args], cwd=ROOT, check=True,
                   capture_output=True)
    return time.perf_counter() - start


def main() -> None:
    repeat = int(sys.argv[1]) if len(sys.argv) > 1 else 3
    floor = timed(["--help"])
    runs = []
    with tempfile.TemporaryDirectory() as out:
        for _ in range(repeat):
            runs.append(timed(["probe", "examples.textbook:attention", "--kind", "sdpa",
                               "--out", out]))
    best = min(runs)
    print(f"probe (numpy sdpa, warm): {', '.join(f'{s:.1f}' for s in runs)} s; best "
          f"{best:.1f} s; budget {BUDGET:.0f} s ({best / BUDGET:.0%} of it); floor (CLI "
          f"start) {floor:.2f} s, ratio {best / floor:.1f}x")


if __name__ == "__main__":
    main()
