"""Fuzz the case loader: mutate the shipped cases and feed each document to it.

    python -m conformance.cli.fuzz --count 10000 [--seed 0] [--format SURFACE|all]

Surfaces: case (this module), expectations and cache (cli/fuzz_stores.py), results and
shard (cli/fuzz_files.py); cli/fuzz_surfaces.py runs each document in a folder of its own
and counts tracebacks, writes outside that folder and silent verdict changes.

Each mutated document (wrong types, huge and negative sizes, nulls, deep
nesting, unicode and control characters, anchors and alias bombs, binary junk,
non-string keys, inf/nan, dropped and duplicated fields) is written as bytes to
a temporary file, read with `load_file` one at a time, and timed.  A document is
*accepted* (then checked: usable without a crash, within budget), a *clean*
error (a CaseError naming the file, with a bounded message) or *unclean*
(anything else, a timeout included).  Memory: the growth of the process's max
RSS over the run bounds what any one document took; `--tracemalloc` adds each
document's traced peak (and slows the YAML composer about tenfold, so timings
are then not the loader's).  Exit status 1 when any document was unclean, over
1 s or over 200 MB.
"""
from __future__ import annotations

import argparse
import copy
import json
import math
import random
import resource
import signal
import sys
import tempfile
import threading
import time
import tracemalloc
from collections import Counter
from pathlib import Path

import yaml

from conformance.case.loader import CaseError, element_counts, load_budget, load_file
from conformance.case.model import MAX_MESSAGE
from conformance.cli.fuzz_files import byte_op
from conformance.paths import CASES_DIR

CASES = CASES_DIR
SLOW_S, BIG_BYTES, DEADLINE_S = 1.0, 200 * 2**20, 10


def _nest(n: int) -> str:
    return "[" * n + "]" * n


def _bomb(levels: int = 9, width: int = 9) -> str:
    """About 400 bytes that expand to width**levels scalars."""
    names = "abcdefghijklmnopqrstuvwxyz"
    parts = [f"&a [{', '.join(['1'] * width)}]"]
    for i in range(1, levels):
        parts.append(f"&{names[i]} [{', '.join([f'*{names[i - 1]}'] * width)}]")
    return "[" + ", ".join(parts) + "]"


# Raw YAML put where a value (or a key) was: what yaml.safe_dump would never write.
RAW_VALUES = [
    "null", "~", "-1", "0", "-0", "1000000", "1000000000000", "99999999999999999999999",
    "9" * 5000, ".inf", "-.inf", ".nan", "1.0e+400", "1e-15", "0x7fffffff", "0o17", "1_000",
    "2024-01-01", "2024-13-45", "2001-12-14t21:59:43.10-05:00", "!!binary aGVsbG8=",
    "!!set {a, b}", "!!omap [{a: 1}]", "!!python/object/apply:os.system [ls]", "!!str 1",
    "!!int x", "!!float .nan", "!!bool 'abc'", "!!int ''", "!!float ''", "!!bool ''",
    "!!null x", "!!int '0x'", "!!float 'abc'", "[]", "{}", "[1]", "[[1, 0], [0, 1]]",
    "{random: .nan}",
    "{1: 2}", "{2024-01-01: 3}", "{null: 1}", "{[1]: 2}", "{.inf: 1}", "{true: 1}",
    '""', '"\\0"', '"\\u202e\\u200b"', '"\\x07\\x1b[31m"', '"é ü 漢字 🙂"', "yes", "no", "'x\\n'",
    '"tiny\\n"', _nest(500), _nest(40), _nest(30), _bomb(), _bomb(6, 12), "&a [*a]",
    "*nowhere", "[&x 1, *x, *x]", "{<<: {a: 1}}", '"' + "x" * 200_000 + '"',
    "[" + ", ".join(["1"] * 30_000) + "]", "[" + ", ".join(["[1, 1]"] * 5_000) + "]",
]
RAW_KEYS = ["1", "2024-01-01", "null", "[1]", "{a: 1}", "true", ".inf", "3.5", "!!binary aGk=",
            "*nowhere", "? [1, 2]"]
PY_VALUES = [None, True, False, 0, -1, -(2**70), 2**64, 10**6, 10**9, 1.5, -0.0, "", "x",
             "float16", "upper_left", [], {}, [None], {"a": None}, "\u0000", "\ud800"]
TEXT_OPS = ("flip", "junk", "truncate", "bom", "utf16", "latin1", "control", "drop_line",
            "dup_line", "tab", "binary")


def _paths(doc, prefix=()):
    """Every (container, key) pair in a parsed document."""
    out = []
    items = doc.items() if isinstance(doc, dict) else enumerate(doc) if isinstance(
        doc, list) else ()
    for k, v in items:
        out.append((doc, k))
        out.extend(_paths(v, prefix + (k,)))
    return out


def _structural(rng: random.Random, doc, raws: list[str]) -> str:
    """Mutate `doc` in place; raw snippets go in as placeholders. Returns the op name."""
    paths = _paths(doc)
    if not paths:
        return "noop"
    container, key = rng.choice(paths)
    op = rng.choice(("raw", "raw", "value", "size", "drop", "add", "raw_key", "nest"))
    if op == "raw":
        raws.append(rng.choice(RAW_VALUES))
        container[key] = f"RAWVALUE{len(raws) - 1}Z"
    elif op == "value":
        container[key] = copy.deepcopy(rng.choice(PY_VALUES))
    elif op == "size":
        container[key] = rng.choice([-1, 0, 10**6, 10**9, 2**31, 2**63, rng.randint(-99, 10**7)])
    elif op == "drop" and isinstance(container, dict):
        del container[key]
    elif op == "drop":
        container.pop(key)
    elif op in ("add", "raw_key"):
        target = rng.choice([c for c, _ in paths if isinstance(c, dict)] or [doc])
        if not isinstance(target, dict):
            return "noop"
        raws.append(rng.choice(RAW_KEYS if op == "raw_key" else RAW_VALUES))
        name = f"RAWVALUE{len(raws) - 1}Z" if op == "raw_key" else rng.choice(
            ["dropout", "num_heads", "id", "seed", "random", "formula", "float32", "x"])
        target[name] = f"RAWVALUE{len(raws) - 1}Z" if op == "add" else 1
    else:  # wrap the value in lists
        container[key] = json.loads(json.dumps(container[key], default=str))
        for _ in range(rng.choice([2, 30, 40])):
            container[key] = [container[key]]
    return op


def _text(rng: random.Random, data: bytes) -> tuple[bytes, str]:
    op = rng.choice(TEXT_OPS)
    i = rng.randrange(len(data) + 1)
    lines = data.split(b"\n")
    j = rng.randrange(len(lines))
    shared = byte_op(rng, data, op, i)
    if shared is not None:
        data = shared
    elif op == "bom":
        data = b"\xef\xbb\xbf" + data
    elif op == "control":
        data = data[:i] + bytes([rng.choice([0, 7, 8, 11, 12, 27, 127])]) + data[i:]
    elif op in ("drop_line", "dup_line", "tab"):
        new = {"drop_line": [], "dup_line": [lines[j]] * 2, "tab": [b"\t" + lines[j]]}[op]
        data = b"\n".join(lines[:j] + new + lines[j + 1:])
    return data, op


def mutate(rng: random.Random, docs: list) -> tuple[bytes, str]:
    """One mutated document as bytes, and a label of what was done to it."""
    doc = copy.deepcopy(rng.choice(docs))
    raws: list[str] = []
    ops = [_structural(rng, doc, raws) for _ in range(rng.choice([1, 1, 1, 2, 3]))]
    text = yaml.safe_dump(doc, default_flow_style=rng.choice([None, True, False]),
                          allow_unicode=rng.random() < 0.5, sort_keys=False, width=80)
    for n in reversed(range(len(raws))):  # reversed: RAWVALUE1Z is not inside RAWVALUE10Z
        text = text.replace(f"RAWVALUE{n}Z", raws[n])
    data = text.encode("utf-8", "surrogatepass")
    if rng.random() < 0.3:
        data, op = _text(rng, data)
        ops.append(op)
    return data, "+".join(ops)


class _Timeout(BaseException):  # not an Exception: no `except Exception` may swallow it
    pass


def _on_alarm(*_):
    raise _Timeout(f"over {DEADLINE_S} s")


def _usable(cases) -> str | None:
    """Why an accepted case is harmful, or None."""
    budget = load_budget()  # above the numbers budget a case loads: it is counted, not run
    for case in cases:
        counts = element_counts(case)
        if counts["weights"] > budget.weights or counts["activations"] > budget.activations:
            return f"over the loader's limit: {counts}"
        json.dumps(dict(case.typed), allow_nan=False)  # what the report writer does
        tols = [t for tol in case.expect.tolerance.values() for t in (tol.rtol, tol.atol)]
        if not all(math.isfinite(t) for t in tols) or not isinstance(case.inputs.seed, int):
            return "non-finite tolerance or seed"
        if counts["weights"] + counts["activations"] < 100_000:
            from conformance.oracle.canonical import case_data

            case_data(case)  # the arrays of a small case really are generated
    return None


def run_one(path: Path, data: bytes) -> tuple[str, float, int, str]:
    """(outcome, seconds, traced peak bytes, detail) for one document."""
    path.write_bytes(data)
    tracing = tracemalloc.is_tracing()
    if tracing:
        tracemalloc.reset_peak()
    base = tracemalloc.get_traced_memory()[0]
    start = time.perf_counter()
    try:
        why = _usable(load_file(path))
        outcome, detail = ("unclean", f"accepted but {why}") if why else ("accepted", "")
    except CaseError as exc:
        clean = len(str(exc)) <= MAX_MESSAGE and str(path) in str(exc) and exc.field_name
        outcome, detail = ("clean" if clean else "unclean"), str(exc)
    except (Exception, _Timeout) as exc:
        outcome, detail = "unclean", f"{type(exc).__name__}: {str(exc)[:300]}"
    seconds = time.perf_counter() - start
    return outcome, seconds, tracemalloc.get_traced_memory()[1] - base if tracing else 0, detail


def fuzz(count: int, seed: int, cases_dir: Path = CASES, trace: bool = False) -> dict:
    """Run `count` mutated documents; returns the figures (see main)."""
    rng = random.Random(seed)
    docs = [yaml.safe_load(p.read_text()) for p in sorted(Path(cases_dir).glob("*.yaml"))]
    alarm = threading.current_thread() is threading.main_thread()
    if alarm:
        old = signal.signal(signal.SIGALRM, _on_alarm)
    rss0 = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    tracing = tracemalloc.is_tracing()
    if trace:
        tracemalloc.start()
    counts, ops, unclean, slow, big = Counter(), Counter(), [], [], []
    worst = (0.0, "")
    peak = 0
    try:
        with tempfile.TemporaryDirectory(prefix="case-fuzz-") as tmp:
            for n in range(count):
                data, label = mutate(rng, docs)
                if alarm:
                    signal.setitimer(signal.ITIMER_REAL, DEADLINE_S)
                outcome, seconds, mem, detail = run_one(Path(tmp) / f"doc{n}.yaml", data)
                if alarm:
                    signal.setitimer(signal.ITIMER_REAL, 0)
                counts[outcome] += 1
                ops.update(label.split("+"))
                worst, peak = max(worst, (seconds, label)), max(peak, mem)
                if outcome == "unclean":
                    unclean.append((n, label, detail, data[:200]))
                if seconds > SLOW_S:
                    slow.append((n, label, round(seconds, 3)))
                if mem > BIG_BYTES:
                    big.append((n, label, mem))
    finally:
        if alarm:
            signal.signal(signal.SIGALRM, old)
        if trace and not tracing:
            tracemalloc.stop()
    rss_growth = (resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - rss0) * 1024
    return {"tried": count, "accepted": counts["accepted"], "clean": counts["clean"],
            "unclean": len(unclean), "unclean_examples": unclean[:10],
            "max_seconds": worst[0], "slowest": worst[1], "over_1s": slow,
            "peak_traced_bytes": peak, "over_200mb": big, "rss_growth_bytes": rss_growth,
            "operators": dict(ops)}


SURFACES = ("case", "expectations", "results", "shard", "cache")
SEED = 0  # the committed seed of the documented runs (docs/reliability.md)
CLI_EVERY = 50  # every 50th results or shard document goes through `report` / `merge` whole


def case_surface(cases_dir: Path = CASES):
    """The case loader as a fuzz_surfaces surface (run_one: loaded, then usable)."""
    from conformance.cli.fuzz_surfaces import ACCEPTED, CLEAN, TRACEBACK, clean_message

    docs = [yaml.safe_load(p.read_text()) for p in sorted(Path(cases_dir).glob("*.yaml"))]

    def run(folder: Path, n: int, rng: random.Random) -> tuple[str, str, str]:
        data, label = mutate(rng, docs)
        path = folder / "doc.yaml"
        outcome, _seconds, _mem, detail = run_one(path, data)
        if outcome == "clean" and not clean_message(detail, path):  # one line, bounded
            outcome = "unclean"
        return {"accepted": ACCEPTED, "clean": CLEAN}.get(outcome, TRACEBACK), label, detail

    return run


def surface(kind: str, cases_dir: Path = CASES, cli_every: int = CLI_EVERY):
    from conformance.cli import fuzz_files, fuzz_stores

    if kind == "case":
        return case_surface(cases_dir)
    if kind in ("results", "shard"):
        return fuzz_files.surface(kind, cli_every)
    return fuzz_stores.expectations_surface(mutate) if kind == "expectations" \
        else fuzz_stores.cache_surface


def _print(kind: str, r: dict, seconds: float, traced: bool) -> None:
    print(f"[{kind}] tried {r['tried']}, accepted {r['accepted']}, clean errors {r['clean']}, "
          f"unclean {r['unclean']} ({seconds:.1f} s in all)")
    if "tracebacks" in r:
        print(f"tracebacks {r['tracebacks']}, writes outside the folder {r['outside']}, "
              f"silent verdict changes {r['silent']}")
    print(f"slowest document {r['max_seconds']:.3f} s ({r['slowest']}); "
          f"over {SLOW_S:g} s: {len(r['over_1s'])} {r['over_1s'][:5]}")
    peak = (f"peak traced memory of one document {r['peak_traced_bytes'] / 2**20:.1f} MiB, "
            f"over 200 MB: {len(r['over_200mb'])}; " if traced else "")
    print(f"{peak}process max RSS grew {r['rss_growth_bytes'] / 2**20:.1f} MiB over the run "
          "(a bound on any one document)")
    print("operators: " + ", ".join(f"{k} {v}" for k, v in sorted(r["operators"].items())))
    for n, label, detail, head in r["unclean_examples"]:
        print(f"UNCLEAN #{n} [{label}]: {detail}" + (f"\n    document starts {head!r}"
                                                     if head else ""))


def main(argv: list[str] | None = None) -> int:
    from conformance.cli.fuzz_surfaces import run_surface

    parser = argparse.ArgumentParser(prog="python -m conformance.cli.fuzz", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--count", type=int, default=1000, help="documents per surface")
    parser.add_argument("--seed", type=int, default=SEED)
    parser.add_argument("--cases-dir", type=Path, default=CASES)
    parser.add_argument("--format", choices=(*SURFACES, "all"), default="case",
                        help="which surface to fuzz (default: the case loader)")
    parser.add_argument("--cli-every", type=int, default=CLI_EVERY,
                        help="every Nth results or shard document runs `report` or `merge` "
                        "whole (0: never)")
    parser.add_argument("--tracemalloc", action="store_true",
                        help="case files only: trace each document's memory peak (slows "
                        "parsing ~10x)")
    args = parser.parse_args(argv)
    bad = False
    for kind in (SURFACES if args.format == "all" else (args.format,)):
        start = time.perf_counter()
        if kind == "case" and args.tracemalloc:
            r = fuzz(args.count, args.seed, args.cases_dir, True)
        else:
            r = run_surface(kind, surface(kind, args.cases_dir, args.cli_every), args.count,
                            args.seed)
        _print(kind, r, time.perf_counter() - start, args.tracemalloc)
        over = r["over_200mb"] or r["rss_growth_bytes"] > BIG_BYTES
        bad = bad or bool(r["unclean"] or r["over_1s"] or over)
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
