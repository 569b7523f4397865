"""Giant layers (#12): the GPT-3-scale case against a tiny one.

Runs `pytest cases --case gpt3-scale -m matrix` and the same on a tiny case
(causal-self-attention) in subprocesses under /usr/bin/time -v (wall, peak
RSS of the whole process tree's largest process), then times each runner's
`count()` of the GPT-3 case directly: one subprocess per worker environment
(the Keras backends), the framework imported and warmed on the tiny case
first, so the figure is the count alone, beyond imports.

    python benchmarks/giant_layers.py            # targets: count < 2 s, RSS within 500 MB
"""
from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
GIANT, TINY = "gpt3-scale", "causal-self-attention"
CHILD = r"""
import json, sys, time
from conformance.case.loader import load_cases
from conformance.runners import load
cases = {c.id: c for c in load_cases("cases")}
out = {}
for target, params in json.loads(sys.argv[1]):
    r = load(target, params)
    if r.available():
        continue
    r.count(cases[sys.argv[3]])  # imports and first-call costs
    start = time.perf_counter()
    c = r.count(cases[sys.argv[2]])
    out[r.name] = [time.perf_counter() - start, c.parameters, c.method]
print(json.dumps(out))
"""


def matrix_run(case: str) -> dict:
    """Wall seconds and peak RSS (MB) of one pytest run of a case's matrix items."""
    with tempfile.TemporaryDirectory() as out:
        cmd = ["/usr/bin/time", "-v", sys.executable, "-m", "pytest", "cases", "--case", case,
               "-m", "matrix", "-q", "-p", "no:cacheprovider", "--report-dir", out]
        start = time.perf_counter()
        proc = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True)
        wall = time.perf_counter() - start
    rss = re.search(r"Maximum resident set size \(kbytes\): (\d+)", proc.stderr)
    tail = proc.stdout.strip().splitlines()[-1] if proc.stdout.strip() else ""
    return {"wall_s": wall, "peak_rss_mb": int(rss.group(1)) / 1024 if rss else None,
            "summary": tail}


def count_times() -> dict:
    """{runner: [seconds, parameters, method]} for the GPT-3 case."""
    from conformance.contract.runner import Runner
    from conformance.runners import all_runners

    groups: dict[str, tuple[dict, list]] = {}
    for r in all_runners():
        native = r.worker and type(r).count is not Runner.count  # counted in its worker
        key = r.worker.key if native else "in-process"
        env = dict(r.worker.env) if key != "in-process" else {}
        groups.setdefault(key, (env, []))[1].append((r.target, dict(r.params)))
    times = {}
    for key, (env, lines) in groups.items():
        proc = subprocess.run([sys.executable, "-c", CHILD, json.dumps(lines), GIANT, TINY],
                              cwd=ROOT, env={**os.environ, **env}, capture_output=True,
                              text=True)
        if proc.returncode:
            print(f"  {key}: failed: {proc.stderr.strip()[-300:]}")
            continue
        times.update(json.loads(proc.stdout.strip().splitlines()[-1]))
    return times


def main() -> None:
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
    sys.path.insert(0, str(ROOT))
    giant, tiny = matrix_run(GIANT), matrix_run(TINY)
    print(f"machine: {os.uname().nodename}, {os.cpu_count()} cores, "
          f"{time.strftime('%Y-%m-%d %H:%M')}")
    for label, run in (("gpt3-scale", giant), ("tiny " + TINY, tiny)):
        print(f"{label:32s} wall {run['wall_s']:6.1f} s  peak RSS {run['peak_rss_mb']:7.0f} MB"
              f"  ({run['summary']})")
    extra = giant["peak_rss_mb"] - tiny["peak_rss_mb"]
    print(f"ratios gpt3/tiny: wall {giant['wall_s'] / tiny['wall_s']:.2f}, peak RSS "
          f"{giant['peak_rss_mb'] / tiny['peak_rss_mb']:.2f} ({extra:+.0f} MB; "
          "target <= +500 MB)")
    print("per-runner count() of the GPT-3 case, beyond imports (target < 2 s):")
    for name, (seconds, params, method) in count_times().items():
        print(f"  {name:28s} {seconds * 1000:8.1f} ms  {params}  {method}")


if __name__ == "__main__":
    main()
