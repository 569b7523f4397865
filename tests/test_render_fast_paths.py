"""The report's fast paths give what the slow ones gave: JSON text, CSV rows, records,
plain text and nesting depth, byte for byte (each checked against the general code)."""
from __future__ import annotations

import json
import random
import re
from dataclasses import asdict

import pytest

from conformance import datafile
from conformance.report import base, results_files
from conformance.report.json_text import dumps, json_safe
from conformance.compare.verdict import Failure, FailureKind

from .report_rows import make_row, replace

np = pytest.importorskip("numpy")
pd = pytest.importorskip("pandas")


class _Str(str):
    pass


ATOMS = [0, -5, 10**30, 1.5, -0.0, 1e-300, float("nan"), float("inf"), -float("inf"), True,
         False, None, "", "é\u2028\x00\"\\\n\t", "日本", _Str("sub"), np.float64(2.5),
         np.int64(3)]


def _value(rnd: random.Random, depth: int = 0):
    r = rnd.random()
    if depth > 4 or r < 0.45:
        return rnd.choice(ATOMS)
    items = [_value(rnd, depth + 1) for _ in range(rnd.randint(0, 3))]
    if r < 0.65:
        return items
    if r < 0.72:
        return tuple(items)
    keys = ["a", "b", "\n"] + ([1, None, 2.5] if rnd.random() < 0.1 else [])
    return {rnd.choice(keys): item for item in items}


def _outcome(f):
    try:
        return f()
    except Exception as exc:  # the same error, where json.dumps raises one
        return type(exc), str(exc)


def test_json_text_is_json_dumps_with_indent():
    rnd = random.Random(3)
    for _ in range(3000):
        value = _value(rnd)
        assert _outcome(lambda: dumps(value)) == _outcome(lambda: json.dumps(
            value, indent=1, ensure_ascii=False, allow_nan=False))
        assert _outcome(lambda: dumps(value, safe=True)) == _outcome(lambda: json.dumps(
            json_safe(value), indent=1, ensure_ascii=False, allow_nan=False))
    loop = [1]
    loop.append(loop)
    assert _outcome(lambda: dumps(loop)) == _outcome(lambda: json.dumps(loop, indent=1))


TEXTS = ["", "plain", "a,b", 'q"uote', "line\nbreak", "=SUM(A1)", "+x", " -y", "@z", "\ttab",
         "é 日本", "\x1b[31mred", "bidi\u202e"]


def _frame(rnd: random.Random, n: int):
    cells = TEXTS + [None, float("nan"), float("inf"), 0.0, -0.0, 1e-7, 3, True, [], ["a"],
                     ("t",), {}, {"b": 1, "a": [1, 2]}, {"x": float("nan")}]
    return pd.DataFrame([{
        "case": f"c{i % 3}", "runner": rnd.choice(["r.a", "r-b", "r_c"]),
        "x": rnd.choice(cells), "notes": rnd.choice([[], ["a", "b|c"], ["=x"]]),
        "failures": [], "failure_kinds": [], "typed": {}, "weight_shapes": {"q": [2, 3]},
        "extras": rnd.choice([{}, {"k": rnd.choice(cells)}, {"z": (1, 2)}]),
        "output_digest": rnd.choice([None, {"d": [1.5]}]),
        "max_abs_error": rnd.choice(cells[:8] + [None, float("nan")])} for i in range(n)],
        dtype=object)


def _written(frame, folder, monkeypatch, pandas_only: bool) -> dict:
    with monkeypatch.context() as m:
        if pandas_only:
            m.setattr(results_files, "_plain_rows", lambda frame: None)
        results_files.write_results(frame, {"m": 1}, "s", folder, {"runners": [{"name": "r_c"}]})
    return {p.relative_to(folder).as_posix(): p.read_bytes()
            for p in sorted(folder.rglob("*")) if p.is_file()}


def test_results_files_written_as_pandas_wrote_them(tmp_path, monkeypatch):
    rnd = random.Random(5)
    for n in range(20):
        frame = _frame(rnd, rnd.randint(1, 12))
        assert results_files._plain_rows(frame) is not None
        fast = _written(frame, tmp_path / f"fast{n}", monkeypatch, False)
        assert fast == _written(frame, tmp_path / f"pandas{n}", monkeypatch, True)
    odd = _frame(rnd, 3).assign(y=[np.float64(1.5)] * 3)  # pandas converts it: its own path
    assert results_files._plain_rows(odd) is None


def _asdict_record(row) -> dict:
    d = asdict(row)
    graphs = d.pop("graphs")
    del d["output_digest"]
    d["outcome"] = row.outcome.value
    d["notes"] = list(row.notes)
    d["failures"] = [f.message for f in row.failures]
    if graphs:
        d["extras"] = {**d["extras"], "graphs": graphs}
    return d


def test_row_record_is_the_asdict_record():
    row = make_row("a", "r.one", extras={"t": (1, [2, {"b": (3,)}])}, notes=("n",),
                   weight_shapes={"q": [2, 3]}, graphs={"g": {"ops": [1]}},
                   failures=(Failure(FailureKind.VALUES, "m"),), output_digest={"d": [1.0]})
    unusual = [replace(row, extras={"n": np.float64(1.5)}), replace(row, parameters=np.int64(3)),
               replace(row, extras={"f": Failure(FailureKind.VALUES, "x")})]
    for r in [row, *unusual]:
        mine, theirs = r.as_dict(), _asdict_record(r)
        assert repr(mine) == repr(theirs)  # values, types, key order
        assert mine["extras"] is not r.extras


def test_plain_is_the_regex_path():
    def regex_plain(text):
        text = base._ANSI.sub("", str(text))
        text = re.sub(r"[\r\n\t]+", " ", text)
        return base._CONTROL.sub("", text)

    for cp in [*range(0x250), *range(0x2000, 0x2070), 0x061C, 0xFEFF, 0x1F600, 0xE000]:
        for text in (chr(cp), f"a{chr(cp)}[1m b", f"x\x1b{chr(cp)}"):
            assert base.plain(text) == regex_plain(text), hex(cp)
    assert base.plain(["a\nb"]) == regex_plain(["a\nb"])


def test_depth_counts_levels_and_stops_past_the_bound():
    assert [datafile.depth(v) for v in (1, [], {}, [1], {"a": [1, {}]}, [[], [[1]]])] == \
        [1, 1, 1, 2, 3, 4]
    bound = datafile.MAX_DEPTH
    for n in (bound - 2, bound - 1, bound, bound + 1, bound + 5, 500):
        nested = json.loads("[" * n + "]" * n)
        assert datafile.depth(nested) == min(n, bound + 1)
        wide = {"k": [1, "s", json.loads('{"a":' * n + "1" + "}" * n)]}
        assert datafile.depth(wide) == min(n + 3, bound + 1)
