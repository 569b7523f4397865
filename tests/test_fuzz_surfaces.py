"""The fuzz harness over every surface (cli/fuzz_surfaces.py): a small sample of each is
clean, and the harness sees each kind of failure it exists to count: a traceback, a
multi-line error, a write outside the document's folder, a row dropped silently, a
pinned value changed silently, a forged cache hit."""
from __future__ import annotations

import dataclasses
import random
from pathlib import Path

import pytest

from conformance.cli import fuzz
from conformance.cli.fuzz_surfaces import ACCEPTED, CLEAN, SILENT, TRACEBACK, clean_message, \
    run_surface

SAMPLE = 200


@pytest.mark.parametrize("kind", [
    "case", "expectations", "results", "shard",
    "cache"])
def test_a_sample_of_each_surface_is_clean(kind):
    result = run_surface(kind, fuzz.surface(kind, cli_every=40), SAMPLE, fuzz.SEED)
    assert result["tried"] == SAMPLE == result["accepted"] + result["clean"] + \
        result["tracebacks"] + result["silent"]
    assert (result["tracebacks"], result["outside"], result["silent"]) == (0, 0, 0), \
        result["unclean_examples"]
    assert result["accepted"] > 0 and result["clean"] > 0  # it mutates, not everything fails


def test_a_dropped_row_is_a_silent_change(monkeypatch):
    from conformance.plugin import shardfile

    real = shardfile.read

    def drops_one(path):
        record = real(path)
        record["rows"].pop(next(iter(record["rows"])), None)
        return record

    monkeypatch.setattr(shardfile, "read", drops_one)
    result = run_surface("shard", fuzz.surface("shard", cli_every=0), 60, 1)
    assert result["silent"] > 0 and result["silent"] <= result["tried"]
    assert any("rows given" in d for _, _, d, _ in result["unclean_examples"])


def test_a_changed_pinned_value_is_a_silent_change(monkeypatch):
    from conformance.conventions import expectations

    real = expectations.load_file

    def coerces(path, runner):
        loaded = real(path, runner)
        return dataclasses.replace(loaded, conventions={k: v + "-changed" for k, v in
                                                        loaded.conventions.items()})

    monkeypatch.setattr(expectations, "load_file", coerces)
    result = run_surface("expectations", fuzz.surface("expectations"), 150, 2)
    assert result["silent"] > 0
    assert any("conventions" in d for _, _, d, _ in result["unclean_examples"])


def test_a_forged_cache_hit_is_a_silent_change(monkeypatch):
    from conformance import cache

    monkeypatch.setattr(cache.BytesCache, "get", lambda self, k: b"forged")
    result = run_surface("cache", fuzz.surface("cache"), 20, 3)
    assert result["silent"] == 20


def test_a_write_outside_and_a_traceback_are_counted():
    def bad(folder: Path, n: int, rng: random.Random):
        if n == 1:
            (folder.parent.parent / f"escaped{n}").write_text("x")  # beside `work`
        if n == 2:
            raise KeyError("boom")
        return ACCEPTED, "op", ""

    result = run_surface("planted", bad, 4, 0)
    assert result["outside"] == 1 and result["tracebacks"] == 1
    assert result["unclean"] == 2 and result["accepted"] == 3  # the outside write read well


def test_only_one_bounded_line_naming_the_file_is_clean(tmp_path):
    path = tmp_path / "x.json"
    assert clean_message(f"{path}: rows[0].case: bad", path)
    assert not clean_message(f"{path}: not valid YAML: a\n  in line 3", path)
    assert not clean_message("rows[0].case: bad", path)
    assert not clean_message(f"{path}: " + "x" * 2000, path)


def test_main_runs_every_surface_and_prints_the_three_counts(capsys, monkeypatch):
    monkeypatch.setattr(fuzz, "SURFACES", ("case", "results"))
    fuzz.main(["--format", "all", "--count", "10", "--cli-every", "5"])
    out = capsys.readouterr().out
    assert out.count("tracebacks 0, writes outside the folder 0, silent verdict changes 0") \
        == 2, out


def test_surface_outcomes_are_the_four_words():
    assert {ACCEPTED, CLEAN, TRACEBACK, SILENT} == {"accepted", "clean", "traceback", "silent"}
