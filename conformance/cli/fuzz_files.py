"""Fuzz the readers of files the suite reads back: results.json and shard.json.

    python -m conformance.cli.fuzz --format results --count 10000
    python -m conformance.cli.fuzz --format shard --count 10000

Seed documents: a results file of a few rows (from the committed reports/results.json
when there is one, else built-in rows) and shard 1 of 1 of a run `merge` accepts (the
registry's runners, the shipped cases, those rows).  Each mutation puts a hostile value
somewhere (path-like and absolute case ids, over-long ids, control and bidi characters,
wrong types, NaN and huge numbers, deep nesting, huge strings, dropped, added and
duplicated fields and rows), or damages the text (truncation, flipped bytes, junk,
binary, a non-UTF-8 encoding).  Each document is read the way the suite reads it: a
results file by report/results.py, its pages written into a fresh folder (every file
inside it); a shard by merge's reading path (plugin/shards.py); every 50th document by
the whole `report` or `merge` command in this process.  Accepted, the rows read must be
the rows given (case, runner, outcome; none dropped or merged), else it is a silent
verdict change; refused, it must be one clean line (cli/fuzz_surfaces.py).
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
    """Shard 1 of 1 of a run `merge` accepts as it is: the registry's runners and the
    shipped cases (read once here), a few rows of the seed results."""
    from conformance.case.loader import load_cases
    from conformance.paths import CASES_DIR
    from conformance.plugin.shardfile import FORMAT, VERSION
    from conformance.runners import all_runners

    rows = seed_results()["rows"]
    runners = [r.name for r in all_runners()]
    cases = [c.id for c in load_cases(CASES_DIR, set(runners))]
    return {"format": FORMAT, "version": VERSION, "shard": [1, 1], "runners": runners,
            "cases": cases, "parts": ["--runner x"], "total": len(runners) * len(cases),
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
    op = rng.choice(("value", "value", "value", "drop", "add", "id", "dup"))
    if op == "dup" and isinstance(container, list):
        container.insert(key, copy.deepcopy(container[key]))
    elif op == "drop":
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


def _verdicts(rows) -> list:
    """(case, runner, outcome) of each row, as given (dicts) or as read (Rows)."""
    out = []
    for r in rows:
        if isinstance(r, dict):
            out.append((r.get("case"), r.get("runner"), r.get("outcome")))
        else:
            out.append((r.case, r.runner, getattr(r.outcome, "value", r.outcome)))
    return sorted(out, key=repr)


def _silent(data: bytes, read_rows) -> str:
    """Why the rows read differ from the rows the document holds ('' when they agree)."""
    raw = json.loads(data)
    given = _verdicts(raw["rows"])
    got = _verdicts(read_rows)
    if given != got:
        return f"{len(given)} rows given, {len(got)} read; first differing: " \
            f"{next((a, b) for a, b in zip(given + [None], got + [None]) if a != b)}"
    return ""


def _judge_cli(code: int, err: str, data: bytes, out: Path) -> tuple[str, str]:
    """The outcome of a CLI command on a document: exit 0 and its written rows the
    document's, or exit 1 and one clean line."""
    from conformance.cli.fuzz_surfaces import ACCEPTED, CLEAN, SILENT, TRACEBACK, \
        clean_message
    from conformance.report.results_files import read_results

    if code == 0:
        why = _silent(data, read_results(out / "results.json")["rows"])
        return (SILENT, why) if why else (ACCEPTED, "")
    return (CLEAN, err) if code == 1 and clean_message(err, "") else (TRACEBACK, err[-300:])


def results_once(folder: Path, data: bytes, cli: bool) -> tuple[str, str]:
    """A results file read back: `cli`: `report --results F --out D` in this process;
    else read (report/results.py) and its pages written (report/pages.py) into a fresh
    folder, every written path inside it."""
    from conformance.cli.fuzz_surfaces import ACCEPTED, CLEAN, SILENT, TRACEBACK, \
        cli_call, clean_message
    from conformance.report.pages import write_pages
    from conformance.report.results import rows_from_results

    path, out = folder / "results.json", folder / "out"
    path.write_bytes(data)
    if cli:
        return _judge_cli(*cli_call("report", results=str(path), out=str(out)), data, out)
    try:
        rows, cases, runners, _selection, _meta = rows_from_results(path)
    except DataFileError as exc:
        return (CLEAN, str(exc)) if clean_message(str(exc), path) else (TRACEBACK, str(exc))
    written = write_pages(rows, cases, runners, out)
    outside = [p for p in written if out.resolve() not in p.resolve().parents]
    if outside:
        return TRACEBACK, f"wrote outside {out}: {outside[:2]}"
    why = _silent(data, rows)
    return (SILENT, why) if why else (ACCEPTED, "")


def shard_once(folder: Path, data: bytes, cli: bool) -> tuple[str, str]:
    """A shard folder merged: `cli`: `merge DIR --out D` in this process (the registry
    and the shipped cases, the reports written); else the merge's reading path
    (plugin/shards.py: load_shards, merged_state, the metadata as JSON)."""
    from conformance.cli.fuzz_surfaces import ACCEPTED, CLEAN, SILENT, TRACEBACK, \
        cli_call, clean_message
    from conformance.paths import CASES_DIR
    from conformance.plugin.shardfile import SHARD_FILE
    from conformance.plugin.shards import MergeError, load_shards, merged_state
    from conformance.report.run_reports import run_metadata

    shard, out = folder / "shard", folder / "out"
    shard.mkdir()
    (shard / SHARD_FILE).write_bytes(data)
    if cli:
        return _judge_cli(*cli_call("merge", shards=[str(shard)], out=str(out),
                                    cases_dir=str(CASES_DIR)), data, out)
    try:
        shards = load_shards([shard])
        rows, _probes, seconds = merged_state(shards)
        json.dumps(run_metadata(seconds), allow_nan=False)
    except MergeError as exc:
        return (CLEAN, str(exc)) if clean_message(str(exc), "") else (TRACEBACK, str(exc))
    why = _silent(data, rows.values())
    return (SILENT, why) if why else (ACCEPTED, "")


def surface(kind: str, cli_every: int):
    """The fuzz_surfaces surface of `kind` ('results' or 'shard'): each document mutated
    from one seed; every `cli_every`-th goes through the CLI command whole."""
    base = seed_results() if kind == "results" else seed_shard()
    once = results_once if kind == "results" else shard_once

    def run(folder: Path, n: int, rng: random.Random) -> tuple[str, str, str]:
        data, label = mutate(rng, base)
        cli = cli_every > 0 and n % cli_every == 0
        outcome, detail = once(folder, data, cli)
        return outcome, label + ("+cli" if cli else ""), detail

    return run


def run_one(kind: str, path: Path, data: bytes, out: Path) -> tuple[str, str]:
    """(outcome, detail) of one document of `kind` read in the folder of `path`, without
    the CLI: 'accepted', 'clean', or 'unclean' (a traceback or a silent change)."""
    from conformance.cli.fuzz_surfaces import ACCEPTED, CLEAN

    folder = Path(path).parent / f"{Path(path).stem}-{kind}"
    folder.mkdir(parents=True, exist_ok=True)
    try:
        outcome, detail = (results_once if kind == "results" else shard_once)(
            folder, data, False)
    except Exception as exc:  # noqa: BLE001 - any other exception is what we count
        return "unclean", f"{type(exc).__name__}: {str(exc)[:300]}"
    return (outcome if outcome in (ACCEPTED, CLEAN) else "unclean"), detail


def fuzz_files(kind: str, count: int, seed: int, cli_every: int = 50) -> dict:
    """`count` mutated documents of `kind` through fuzz_surfaces (the figures fuzz.main
    prints)."""
    from conformance.cli.fuzz_surfaces import run_surface

    return run_surface(kind, surface(kind, cli_every), count, seed)
