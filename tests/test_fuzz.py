"""The fuzz tool runs, and the loader survives it: 0 unclean documents."""
from __future__ import annotations

import random
import tracemalloc
from pathlib import Path

import pytest
import yaml

from conformance.cli import fuzz
from conformance.case.loader import CaseError, load_file
from conformance.case.model import MAX_MESSAGE


def test_bounded_fuzz_run_is_clean():
    result = fuzz.fuzz(300, seed=13)
    assert result["tried"] == 300 == result["accepted"] + result["clean"]
    assert result["unclean"] == 0, result["unclean_examples"]
    assert result["accepted"] > 0 and result["clean"] > 100  # it mutates, and not everything
    assert result["rss_growth_bytes"] < 200 * 2**20  # memory, counted (never seconds: #17)
    assert {"raw", "raw_key", "nest", "size", "drop", "value"} <= set(result["operators"])


def test_mutations_are_reproducible_and_varied():
    docs = [yaml.safe_load(p.read_text()) for p in sorted(fuzz.CASES.glob("*.yaml"))]
    first = [fuzz.mutate(random.Random(5), docs) for _ in range(3)]
    again = [fuzz.mutate(random.Random(5), docs) for _ in range(3)]
    assert first == again
    many = {fuzz.mutate(random.Random(s), docs)[0] for s in range(50)}
    assert len(many) == 50


def test_fuzz_bomb_is_small_and_refused(tmp_path):
    bomb = fuzz._bomb()
    assert len(bomb) < 450
    path = tmp_path / "bomb.yaml"
    path.write_text("id: b\nattention: {num_heads: 1, query_features: 2}\n"
                    f"mask: {{key_padding: {bomb}}}\n")
    tracemalloc.start()  # the bomb is refused before it is built: count the memory
    try:
        outcome, _, peak, detail = fuzz.run_one(path, path.read_bytes())
    finally:
        tracemalloc.stop()
    assert outcome == "clean" and "aliases expand" in detail
    assert peak < 20 * 2**20  # 9**9 expanded scalars would take gigabytes


def test_an_unclean_error_is_counted(tmp_path, monkeypatch):
    """The tool would see a loader that crashes (it is not just counting CaseErrors)."""
    def broken(path):
        raise KeyError("boom")

    monkeypatch.setattr(fuzz, "load_file", broken)
    outcome, _, _, detail = fuzz.run_one(tmp_path / "x.yaml", b"id: x\n")
    assert outcome == "unclean" and "KeyError" in detail


@pytest.mark.parametrize("kind", ["results", "shard"])
def test_file_formats_fuzz_clean(kind):
    """#17: the readers of results and shard files give a clean error or a usable record
    for every mutated document (the README run: 10,000 each)."""
    from conformance.cli.fuzz_files import fuzz_files

    result = fuzz_files(kind, 200, seed=3)
    assert result["unclean"] == 0, result["unclean_examples"]
    assert result["accepted"] > 0 and result["clean"] > 50
    assert {"value", "drop", "id"} <= set(result["operators"])


def test_an_unclean_file_reader_is_counted(tmp_path, monkeypatch):
    from conformance.cli import fuzz_files
    from conformance.plugin import shardfile

    monkeypatch.setattr(shardfile, "read", lambda path: {}["rows"])
    outcome, detail = fuzz_files.run_one("shard", tmp_path / "s.json", b"{}", tmp_path / "o")
    assert outcome == "unclean" and "KeyError" in detail


def test_main_prints_the_figures(capsys):
    assert fuzz.main(["--count", "20", "--seed", "2"]) == 0
    out = capsys.readouterr().out
    assert "tried 20," in out and "unclean 0" in out and "slowest document" in out


def _check_any(tmp_path: Path, data: bytes) -> None:
    path = tmp_path / "any.yaml"
    path.write_bytes(data)
    try:
        load_file(path)
    except CaseError as exc:
        assert len(str(exc)) <= MAX_MESSAGE and str(path) in str(exc)


def test_property_any_bytes_give_cases_or_a_clean_error(tmp_path):
    hypothesis = pytest.importorskip("hypothesis", reason="hypothesis not installed (dev)")
    st = hypothesis.strategies

    plain = st.recursive(
        st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=20),
        lambda inner: st.lists(inner, max_size=4)
        | st.dictionaries(st.text(max_size=8) | st.integers(), inner, max_size=4),
        max_leaves=20)
    good = {"id": "p", "attention": {"num_heads": 2, "query_features": 8}}
    fields = st.sampled_from(["attention", "inputs", "mask", "expect", "typed", "tags", "id"])

    @hypothesis.settings(max_examples=150, deadline=None, database=None)
    @hypothesis.given(st.binary(max_size=300) | st.tuples(fields, plain))
    def check(example):
        if isinstance(example, tuple):
            doc = dict(good, **{example[0]: example[1]})
            example = yaml.safe_dump(doc, allow_unicode=True).encode("utf-8", "surrogatepass")
        _check_any(tmp_path, example)

    check()


def test_pure_python_yaml_fallback_is_clean_too(monkeypatch):
    """Without libyaml the loader uses PyYAML's pure-Python scanner: as clean, slower."""
    from conformance.case import yaml_reader as case_yaml

    monkeypatch.setattr(case_yaml, "_LOADER", case_yaml._PyLoader)
    result = fuzz.fuzz(100, seed=4)
    assert result["unclean"] == 0, result["unclean_examples"]
