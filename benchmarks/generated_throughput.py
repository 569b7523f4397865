"""Throughput of generated cases (conformance/plugin/generated.py) after warm-up.

    python benchmarks/generated_throughput.py [--small 20] [--large 220] [--seed 0]
        [--runner torch.mha,torch.sdpa,keras.tensorflow,onnx.attention-op.ort]

Runs `pytest --generated N` twice in fresh processes, N = small and large, with
the named runners (default: the torch, Keras-on-TensorFlow and onnxruntime
attention-op rows; JAX and the export runners compile or export per shape and
are left out of this figure on purpose).  Both runs pay the same warm-up
(imports, the Keras worker's start, first calls), so the steady-state rate is
(large - small) / (t_large - t_small).  Failures are not shrunk here
(--generated-shrink 0): shrinking is a cost of a failure, not of throughput.
Prints figures; asserts nothing.
"""
from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
RUNNERS = "torch.mha,torch.sdpa,keras.tensorflow,onnx.attention-op.ort"
SUMMARY = re.compile(r"conformance generated: (\d+) cases, (\d+) items in ([\d.]+) s")


def run(n: int, seed: int, runners: str, out: str) -> tuple[float, str]:
    cmd = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "--generated",
           str(n), "--generated-seed", str(seed), "--runner", runners,
           "--generated-shrink", "0", f"--generated-dir={out}"]
    start = time.perf_counter()
    proc = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True,
                          env={**os.environ, "TF_CPP_MIN_LOG_LEVEL": "3"})
    wall = time.perf_counter() - start
    lines = [ln for ln in proc.stdout.splitlines() if ln.startswith("conformance generated:")]
    tail = proc.stdout.strip().splitlines()[-1] if proc.stdout.strip() else proc.stderr[-300:]
    return wall, (lines[0] if lines else "") + f" | {tail}"


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--small", type=int, default=20)
    ap.add_argument("--large", type=int, default=220)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--runner", default=RUNNERS)
    args = ap.parse_args(argv)
    walls, in_session = {}, {}
    with tempfile.TemporaryDirectory() as out:
        for n in (args.small, args.large):
            walls[n], line = run(n, args.seed, args.runner, out)
            m = SUMMARY.search(line)
            in_session[n] = float(m.group(3)) if m else float("nan")
            items = m.group(2) if m else "?"
            print(f"--generated {n:4d}: {items} items, wall {walls[n]:.1f} s, items phase "
                  f"{in_session[n]:.1f} s | {line.split(' | ')[-1]}")
    cases = args.large - args.small
    for label, t in (("wall", walls), ("items phase", in_session)):
        dt = t[args.large] - t[args.small]
        rate = cases / dt if dt > 0 else float("inf")
        print(f"steady state ({label}): {cases} cases in {dt:.1f} s = {rate:.1f} cases/s "
              f"through {args.runner}")
    print(f"machine: {os.cpu_count()} CPUs, load average {os.getloadavg()[0]:.1f}")


if __name__ == "__main__":
    main()
