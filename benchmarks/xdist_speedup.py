"""Wall time of the matrix serial against `-n N` (pytest-xdist), and whether the two
runs' reports agree (check-reports).  Prints figures, asserts nothing.

    python benchmarks/xdist_speedup.py [-n 2] [--repeat 1] [-- PYTEST ARGS]

Run it twice (or with a warm .cache/) for warm figures: a cold run is dominated by
ONNX exports and JAX compilation, which the cache keeps.
"""
from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def timed(args: list[str], out: Path) -> float:
    start = time.perf_counter()
    subprocess.run([sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-q",
                    f"--report-dir={out}", *args], cwd=ROOT, capture_output=True,
                   env={**os.environ, "TF_CPP_MIN_LOG_LEVEL": "3"})
    return time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("-n", default="2", help="xdist workers (default 2)")
    parser.add_argument("--repeat", type=int, default=1)
    parser.add_argument("pytest_args", nargs="*", default=["cases"])
    args = parser.parse_args()
    tmp = Path(tempfile.mkdtemp(prefix="xdist-bench-"))
    load = os.getloadavg()[0]
    for n in range(args.repeat):
        serial = timed(args.pytest_args, tmp / f"serial{n}")
        xdist = timed([*args.pytest_args, "-n", args.n], tmp / f"xdist{n}")
        check = subprocess.run([sys.executable, "-m", "conformance", "check-reports",
                                str(tmp / f"xdist{n}"), "--against", str(tmp / f"serial{n}")],
                               cwd=ROOT, capture_output=True, text=True)
        print(f"serial {serial:.1f} s, -n {args.n} {xdist:.1f} s "
              f"(x{serial / xdist:.2f}); reports "
              f"{'match' if check.returncode == 0 else 'DIFFER'}; load average at start "
              f"{load:.1f} on {os.cpu_count()} CPUs")


if __name__ == "__main__":
    main()
