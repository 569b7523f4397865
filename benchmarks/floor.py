"""The floor and the ratios (#12 part 4), measured in one run on this machine.

floor             = each framework's import in a fresh subprocess, plus, for a
                    sample of cases x each in-process runner, the minimal
                    translate + build + forward (`runner.run`, warm caches),
                    scaled to the default matrix's item count
floor-with-exports= the floor plus one export per ONNX export row (the same
                    runs against an empty CONFORMANCE_CACHE_DIR)
matrix cold/warm  = `pytest cases -m matrix` with an empty cache dir, then again
                    with it filled; serial, and `-n 2` where pytest-xdist works
Prints medians of --repeat N runs (default 3; --quick: 1) and the ratios
warm/floor and cold/floor-with-exports (targets <= 1.5).
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
FRAMEWORKS = ("torch", "tensorflow", "jax", "flax", "keras", "transformers", "onnx",
              "onnxruntime")
SAMPLE = ("causal-self-attention", "key-padding", "cross-attention-kv-features")
ITEMS = r"""
import json, sys, time
from conformance.case.loader import load_cases
from conformance.runners import all_runners
from conformance.contract.runner import Translation
from conformance.oracle.canonical import case_data
cases = {c.id: c for c in load_cases("cases")}
out = {}
for r in all_runners():
    if r.worker or r.available():
        continue
    for cid in json.loads(sys.argv[1]):
        t = r.translate(cases[cid])
        if not isinstance(t, Translation):
            continue
        data = case_data(cases[cid])
        start = time.perf_counter()
        try:
            r.run(cases[cid], t, data)
        except Exception:
            continue
        out.setdefault(r.name, []).append(time.perf_counter() - start)
print(json.dumps(out))
"""


def _run(cmd, env=None) -> tuple[float, subprocess.CompletedProcess]:
    start = time.perf_counter()
    proc = subprocess.run(cmd, cwd=ROOT, env={**os.environ, **(env or {})},
                          capture_output=True, text=True)
    return time.perf_counter() - start, proc


def import_seconds() -> dict[str, float]:
    out = {}
    for fw in FRAMEWORKS:
        code = f"import time; t = time.perf_counter(); import {fw}; print(time.perf_counter() - t)"
        _, proc = _run([sys.executable, "-c", code], {"KERAS_BACKEND": "jax"})
        if proc.returncode == 0:
            out[fw] = float(proc.stdout.strip().splitlines()[-1])
    return out


def item_seconds(cache: str) -> dict[str, list[float]]:
    """Per in-process runner, the run time of each sample case (imports excluded:
    each runner's first run pays them, so the first sample case is run twice)."""
    cases = [SAMPLE[0], *SAMPLE]
    _, proc = _run([sys.executable, "-c", ITEMS, json.dumps(cases)],
                   {"CONFORMANCE_CACHE_DIR": cache})
    if proc.returncode:
        raise SystemExit(proc.stderr[-2000:])
    return {k: v[1:] for k, v in json.loads(proc.stdout.strip().splitlines()[-1]).items()}


def matrix_seconds(cache: str, extra: list[str]) -> tuple[float, str]:
    with tempfile.TemporaryDirectory() as out:
        wall, proc = _run([sys.executable, "-m", "pytest", "cases", "-m", "matrix", "-q",
                           "-p", "no:cacheprovider", "--report-dir", out, *extra],
                          {"CONFORMANCE_CACHE_DIR": cache})
    last = proc.stdout.strip().splitlines()[-1] if proc.stdout.strip() else proc.stderr[-300:]
    return wall, last


def n_items() -> int:
    sys.path.insert(0, str(ROOT))
    from conformance.case.loader import load_cases
    from conformance.runners import all_runners

    return len(load_cases(ROOT / "cases")) * len(all_runners())


def n_cases() -> int:
    from conformance.case.loader import load_cases

    return len(load_cases(ROOT / "cases"))


def one_round(xdist: bool) -> dict[str, float]:
    res: dict[str, float] = {}
    imports = import_seconds()
    res["imports"] = sum(imports.values())
    with tempfile.TemporaryDirectory() as cold:
        cold_items = item_seconds(cold)
        warm_items = item_seconds(cold)  # the cache is filled now
    per_item = statistics.mean(t for v in warm_items.values() for t in v)
    exports = sum(max(0.0, statistics.mean(cold_items[k]) - statistics.mean(warm_items[k]))
                  for k in warm_items if k.startswith("onnx."))
    res["floor"] = res["imports"] + per_item * n_items()
    res["floor_with_exports"] = res["floor"] + exports * n_cases()  # each export row, each case
    for label, extra in (("serial", []), ("n2", ["-n", "2"])) if xdist else (("serial", []),):
        with tempfile.TemporaryDirectory() as cache:
            res[f"cold_{label}"], res[f"cold_{label}_tail"] = matrix_seconds(cache, extra)
            res[f"warm_{label}"], res[f"warm_{label}_tail"] = matrix_seconds(cache, extra)
    return res


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--quick", action="store_true", help="one round")
    args = ap.parse_args()
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
    import importlib.util

    xdist = importlib.util.find_spec("xdist") is not None
    rounds = [one_round(xdist) for _ in range(1 if args.quick else args.repeat)]
    med = {k: statistics.median(r[k] for r in rounds) for k in rounds[0]
           if not k.endswith("_tail")}
    print(f"{time.strftime('%Y-%m-%d %H:%M')}, {os.uname().nodename}, {os.cpu_count()} cores, "
          f"load {os.getloadavg()[0]:.2f}, {len(rounds)} round(s), {n_items()} items")
    for k, v in med.items():
        print(f"  {k:20s} {v:8.1f} s" + (f"   ({rounds[-1][k + '_tail']})"
                                         if k + "_tail" in rounds[-1] else ""))
    if not xdist:
        print("  -n 2: pytest-xdist not installed; line skipped")
    for label in ("serial", "n2"):
        if f"warm_{label}" in med:
            print(f"  {label}: warm/floor {med[f'warm_{label}'] / med['floor']:.2f} (target <= 1.5)"
                  f", cold/floor-with-exports "
                  f"{med[f'cold_{label}'] / med['floor_with_exports']:.2f} (target <= 1.5)")


if __name__ == "__main__":
    main()
