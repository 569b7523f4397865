"""Fuzz the readers of files the suite reads back: results.json and shard.json.

    python -m conformance.cli.fuzz --format results --count 10000
    python -m conformance.cli.fuzz --format shard --count 10000

Seed documents: a results file and a shard file of a few rows (from the committed
reports/results.json when there is one, else a built-in row).  Each mutation puts a
hostile value somewhere (path-like and absolute case ids, over-long ids, control and
bidi characters, wrong types, NaN and huge numbers, deep nesting, huge strings,
dropped and added fields), or damages the text (truncation, flipped bytes, junk,
binary, a non-UTF-8 encoding).  A document is *accepted* (a results file is then
rendered into per-case pages in a fresh folder, and every file written must lie in
it), a *clean* error (a DataFileError naming the file, bounded) or *unclean*
(anything else).
"""
from __future__ import annotations

import copy
import json
import random
from pathlib import Path

from conformance.datafile import DataFileError
from conformance.paths import REPORTS_DIR

MAX_ERROR = 1200  # characters of a clean error message
HOSTILE = ["../../TRAVERSED", "/tmp/ABSOLUTE", "a/../../b", "..", ".", "", "x" * 101,
           "x<img src=x onerror=alert(1)>", "a\x1b[31mb", "a\r\nb", "a\u202eb", "CON",
           "a" * 100_000, None, True, 0, -1, 2**80, 1e308, -1e308, 1.5, [], {}, [1, [2, [3]]],
           {"a": {"b": {"c": 1}}}, "nan", "inf", "pass", "error", "mismatch"]
TEXT_OPS = ("truncate", "flip", "junk", "binary", "latin1", "nest", "nan")


def _row(case: str, runner: str) -> dict:
    return {"case": case, "runner": runner, "framework": "torch", "outcome": "pass",
            "reason": "", "dtype": "float32", "native_call": "f()", "executed": True,
            "parameters": 16, "parameters_formula": 16, "parameters_expected": None,
            "projection_parameters": None, "max_abs_error": 1e-7, "max_rel_error": 2e-7,
            "weights_max_abs_error": None, "weights_max_rel_error": None, "rtol": 1e-5,
            "atol": 1e-6, "weights_returned": "per_head", "fully_masked_row": None,
            "fully_masked_row_weights": None, "fully_masked_row_declared": None,
            "weight_shapes": {"w": [4, 4]}, "notes": ["n"], "extras": {"k": 1.0}, "typed": {},
            "failures": [], "known_mismatch": "", "count_method": "", "failure_kinds": [],
            "output_digest": None}


def seed_results() -> dict:
    """A small results document: a few rows of the committed one, or built-in ones."""
    try:
        from conformance.report.results_files import read_results

        data = read_results(REPORTS_DIR / "results.json")
        rows = data["rows"][:4]
        named = {r["case"] for r in rows}, {r["runner"] for r in rows}
        return {"metadata": {"time": "t"}, "selection": "subset", "rows": rows,
                "runners": [r for r in data["runners"] if r["name"] in named[1]],
                "cases": [c for c in data["cases"] if c["id"] in named[0]]}
    except (OSError, ValueError, KeyError, TypeError):  # DataFileError is a ValueError
        return {"metadata": {}, "selection": "subset",
                "rows": [_row("a", "torch.mha"), _row("b", "torch.mha")],
                "runners": [{"name": "torch.mha", "framework": "torch", "system": "s",
                             "path": "default", "backend": ""}],
                "cases": [{"id": "a", "title": "A", "has_fully_masked_rows": False,
                           "key_padding": None}, {"id": "b", "title": "B",
                                                  "has_fully_masked_rows": False,
                                                  "key_padding": [1, 2]}]}


def seed_shard() -> dict:
    from conformance.plugin.shardfile import FORMAT, VERSION

    results = seed_results()
    rows = results["rows"]
    return {"format": FORMAT, "version": VERSION, "shard": [1, 2],
            "runners": sorted({r["runner"] for r in rows}),
            "cases": sorted({r["case"] for r in rows}), "parts": ["--runner x"], "total": 9,
            "default_cases": False, "rows": rows,
            "probes": {rows[0]["runner"]: {"cells": [
                {"axis": "softmax_scale", "value": "inv_sqrt_head_dim", "evidence": "e",
                 "documented": None, "documented_source": ""}]}, "other.runner": {
                "error": "RuntimeError: x"}},
            "seconds": [[r["case"], r["runner"], 0.1] for r in rows]}


def _paths(doc) -> list:
    out, stack = [], [doc]
    while stack:
        node = stack.pop()
        items = node.items() if isinstance(node, dict) else enumerate(node) \
            if isinstance(node, list) else ()
        for k, v in items:
            out.append((node, k))
            stack.append(v)
    return out


def _structural(rng: random.Random, doc) -> str:
    paths = _paths(doc)
    if not paths:
        return "noop"
    container, key = rng.choice(paths)
    op = rng.choice(("value", "value", "value", "drop", "add", "id"))
    if op == "drop":
        del container[key]
    elif op == "add" and isinstance(container, dict):
        container[rng.choice(["x", "case", "rows", "format", "version", "graphs"])] = \
            copy.deepcopy(rng.choice(HOSTILE))
    elif op == "id" and isinstance(container, dict) and ("case" in container or "id" in container):
        container["case" if "case" in container else "id"] = rng.choice(HOSTILE[:13])
    else:
        container[key] = copy.deepcopy(rng.choice(HOSTILE))
    return op


def byte_op(rng: random.Random, data: bytes, op: str, i: int) -> bytes | None:
    """The byte-level mutations every fuzzed format shares (None: `op` is not one):
    flipped bytes, junk inserted at `i`, truncation at `i`, random binary, and the text
    re-encoded as UTF-16 or Latin-1 with a non-ASCII letter in it."""
    if op == "flip":
        buf = bytearray(data)
        for _ in range(rng.randint(1, 8) if buf else 0):
            buf[rng.randrange(len(buf))] = rng.randrange(256)
        return bytes(buf)
    if op == "junk":
        return data[:i] + rng.randbytes(rng.randint(1, 64)) + data[i:]
    if op == "truncate":
        return data[:i]
    if op == "binary":
        return rng.randbytes(rng.randint(0, 2048))
    if op in ("utf16", "latin1"):
        return data.decode("utf-8", "replace").replace("a", "ä").encode(
            "utf-16" if op == "utf16" else "latin-1", "replace")
    return None


def _text(rng: random.Random, data: bytes) -> tuple[bytes, str]:
    op, i = rng.choice(TEXT_OPS), rng.randrange(len(data) + 1)
    shared = byte_op(rng, data, op, i)
    if shared is not None:
        data = shared
    elif op == "nest":
        n = rng.choice([40, 1000, 100_000])
        data = b'{"rows": ' + b"[" * n + b"]" * n + b"}"
    else:  # NaN / Infinity tokens where numbers were
        data = data.replace(b"0.1", b"NaN").replace(b"16", b"Infinity")
    return data, op


def mutate(rng: random.Random, seed: dict) -> tuple[bytes, str]:
    doc = copy.deepcopy(seed)
    ops = [_structural(rng, doc) for _ in range(rng.choice([1, 1, 2, 3]))]
    data = json.dumps(doc, ensure_ascii=rng.random() < 0.5).encode("utf-8", "surrogatepass")
    if rng.random() < 0.3:
        data, op = _text(rng, data)
        ops.append(op)
    return data, "+".join(ops)


def run_results(path: Path, out: Path) -> str:
    """Read a results file; when accepted, write its pages into `out` and check that
    every file written lies inside it.  Returns '' or why it is unclean."""
    from conformance.report.pages import write_pages
    from conformance.report.results import rows_from_results

    rows, cases, runners, _selection, _meta = rows_from_results(path)
    written = write_pages(rows, cases, runners, out)
    root = out.resolve()
    outside = [p for p in written if root not in p.resolve().parents]
    return f"wrote outside {out}: {outside[:2]}" if outside else ""


def run_shard(path: Path, out: Path) -> str:
    from conformance.plugin.shardfile import read

    record = read(path)
    return "" if isinstance(record["rows"], dict) else "rows not read as a mapping"


def run_one(kind: str, path: Path, data: bytes, out: Path) -> tuple[str, str]:
    """(outcome, detail) of one document of `kind` ('results' or 'shard')."""
    path.write_bytes(data)
    try:
        why = (run_results if kind == "results" else run_shard)(path, out)
        return ("unclean", why) if why else ("accepted", "")
    except DataFileError as exc:
        clean = len(str(exc)) <= MAX_ERROR and str(path) in str(exc)
        return ("clean" if clean else "unclean"), str(exc)[:300]
    except Exception as exc:  # noqa: BLE001 - any other exception is what we count
        return "unclean", f"{type(exc).__name__}: {str(exc)[:300]}"


def fuzz_files(kind: str, count: int, seed: int) -> dict:
    """`count` mutated documents of `kind`; the figures fuzz.main prints."""
    import resource
    import tempfile
    import time
    from collections import Counter

    rng, base = random.Random(seed), seed_results() if kind == "results" else seed_shard()
    counts, ops, unclean, worst = Counter(), Counter(), [], (0.0, "")
    rss0 = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    with tempfile.TemporaryDirectory(prefix=f"{kind}-fuzz-") as tmp:
        for n in range(count):
            data, label = mutate(rng, base)
            out = Path(tmp) / f"out{n}"
            start = time.perf_counter()
            outcome, detail = run_one(kind, Path(tmp) / f"doc{n}.json", data, out)
            worst = max(worst, (time.perf_counter() - start, label))
            counts[outcome] += 1
            ops.update(label.split("+"))
            if outcome == "unclean":
                unclean.append((n, label, detail, data[:200]))
    rss = (resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - rss0) * 1024
    return {"tried": count, "accepted": counts["accepted"], "clean": counts["clean"],
            "unclean": len(unclean), "unclean_examples": unclean[:10],
            "max_seconds": worst[0], "slowest": worst[1], "over_1s": [],
            "peak_traced_bytes": 0, "over_200mb": [], "rss_growth_bytes": rss,
            "operators": dict(ops)}
