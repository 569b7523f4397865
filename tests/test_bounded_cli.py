"""Every CLI command and reader of untrusted files is bounded and total: each hostile file
or folder is planted and must give one clean line (exit 1), never a traceback, a hang, a
file printed from elsewhere or a silent change.

Shards with NaN, infinite, negative or huge seconds and a row given twice (merge); a
record whose agreement sample holds strings; report folders with a link leading out
(check-reports), and texts whose alignment would be quadratic; a ledger that is a FIFO,
/dev/zero or the wrong shape (diff --ledger); expectations files that are a FIFO, a
folder, /dev/zero, a dangling link or a link out of the folder (the plugin's usage error,
not an INTERNALERROR); --update-expectations writing a duplicate key or changing the
file's mode; --out that is a file (merge, report, probe); JSON over the byte or container
bound, and row files over the bound together; a process a runner starts outliving its
worker.
"""
from __future__ import annotations

import json
import math
import os
import subprocess
import sys
from pathlib import Path

import pytest

from conformance.datafile import DataFileError
from conformance.paths import ROOT

from .inprocess import cli

pytest_plugins = ["pytester"]


def one_line_refusal(done, *words: str) -> None:
    assert done.returncode == 1, done.stdout + done.stderr
    text = done.stderr.strip()
    assert "Traceback" not in text and "\n" not in text, text
    for word in words:
        assert word in text, text


@pytest.fixture(scope="module")
def good_shard() -> dict:
    """Shard 1 of 1 of a run merge accepts (the registry, the shipped cases)."""
    from conformance.cli.fuzz_files import seed_shard

    return seed_shard()


def write_shard(folder: Path, doc: dict) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "shard.json").write_text(json.dumps(doc))
    return folder


def test_the_good_shard_merges(tmp_path, good_shard, monkeypatch):
    monkeypatch.setenv("CONFORMANCE_FIGURES", "0")
    done = cli("merge", write_shard(tmp_path / "s", good_shard), "--out", tmp_path / "out")
    assert done.returncode == 0, done.stderr
    assert (tmp_path / "out" / "results.json").is_file()


@pytest.mark.parametrize("seconds", [math.nan, math.inf, -5.0, 1e308, 10**400, "1.0", True])
def test_bad_seconds_in_a_shard_are_one_line(tmp_path, good_shard, seconds):
    doc = json.loads(json.dumps(good_shard))
    doc["seconds"][0][2] = seconds
    text = json.dumps(doc)
    (write_shard(tmp_path / "s", {}) / "shard.json").write_text(text)
    done = cli("merge", tmp_path / "s", "--out", tmp_path / "out")
    one_line_refusal(done, "seconds[0][2]", "shard.json")
    assert not (tmp_path / "out").exists() or not any((tmp_path / "out").iterdir())


def test_a_shard_file_linked_out_of_its_folder_is_refused(tmp_path, good_shard):
    source = write_shard(tmp_path / "elsewhere", good_shard) / "shard.json"
    (tmp_path / "s").mkdir()
    (tmp_path / "s" / "shard.json").symlink_to(source)
    one_line_refusal(cli("merge", tmp_path / "s", "--out", tmp_path / "out"),
                     "leading out of its folder")


def test_a_row_given_twice_is_refused_not_merged_silently(tmp_path, good_shard):
    doc = json.loads(json.dumps(good_shard))
    twin = dict(doc["rows"][0], outcome="mismatch" if doc["rows"][0]["outcome"] == "pass"
                else "pass")
    doc["rows"].append(twin)
    done = cli("merge", write_shard(tmp_path / "s", doc), "--out", tmp_path / "out")
    one_line_refusal(done, "given twice")


def test_an_agreement_sample_of_strings_is_refused(tmp_path, good_shard):
    doc = json.loads(json.dumps(good_shard))
    doc["rows"][0]["output_digest"] = {"agreement": ["x" * 50, 1.0]}
    done = cli("merge", write_shard(tmp_path / "s", doc), "--out", tmp_path / "out")
    one_line_refusal(done, "output_digest.agreement")


def test_typed_numbers_that_mean_nothing_are_refused_at_read(tmp_path):
    """report/typed.py derives the meaning of a known system's typed numbers: a value
    that cannot be derived is refused when the file is read, not a traceback later."""
    from conformance.cli.fuzz_files import seed_results

    doc = seed_results()
    doc["rows"][0]["typed"] = {"system": "hf.bert", "hidden_size": 768,
                               "num_attention_heads": "a/../../b"}
    (tmp_path / "results.json").write_text(json.dumps(doc))
    done = cli("report", "--results", tmp_path / "results.json", "--out", tmp_path / "out")
    one_line_refusal(done, "rows[0].typed.num_attention_heads")


# ---- check-reports -----------------------------------------------------------------------
def _report_pair(tmp_path: Path) -> tuple[Path, Path, Path]:
    base, cur, secret = tmp_path / "base", tmp_path / "cur", tmp_path / "secret.md"
    for folder in (base, cur):
        (folder / "cases").mkdir(parents=True)
        (folder / "details.md").write_text("# details\nsame\n")
    secret.write_text("SECRET-TOKEN-42\n")
    return base, cur, secret


def test_check_reports_refuses_a_report_file_linked_out_of_the_folder(tmp_path):
    base, cur, secret = _report_pair(tmp_path)
    (cur / "details.md").unlink()
    (cur / "details.md").symlink_to(secret)
    done = cli("check-reports", cur, "--against", base)
    one_line_refusal(done, "leading out of")
    assert "SECRET-TOKEN-42" not in done.stdout + done.stderr


def test_check_reports_refuses_a_subfolder_linked_out_of_the_folder(tmp_path):
    base, cur, secret = _report_pair(tmp_path)
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (elsewhere / "x.md").write_text(secret.read_text())
    (cur / "cases").rmdir()
    (cur / "cases").symlink_to(elsewhere)
    done = cli("check-reports", cur, "--against", base)
    one_line_refusal(done, "leading out of")
    assert "SECRET-TOKEN-42" not in done.stdout + done.stderr


def test_text_alignment_is_bounded_and_finds_what_difflib_finds(monkeypatch):
    """The quadratic aligner is asked only for a small middle; on small texts the changes
    are the ones difflib's own alignment gives."""
    import difflib

    from conformance.report import drift

    asked = []
    real = difflib.SequenceMatcher

    def counting(isjunk, a, b, **kw):
        asked.append(len(a) * len(b))
        return real(isjunk, a, b, **kw)

    monkeypatch.setattr(difflib, "SequenceMatcher", counting)
    n = 20_000
    old = "\n".join(f"line {i} a" for i in range(n))
    new = "\n".join(f"line {i} {'b' if i % 2 else 'a'}" for i in range(n))
    assert len(drift.compare_text(old, new, "x.md")) == n // 2
    assert len(drift.compare_text(old, "extra\n" + new, "x.md")) == 1  # one block
    assert all(size <= drift.MAX_ALIGNED for size in asked)
    small_a, small_b = ["a", "b", "c", "d", "e"], ["a", "x", "c", "e", "f", "g"]
    ours = drift._opcodes(small_a, small_b)
    theirs = real(None, small_a, small_b, autojunk=False).get_opcodes()
    assert [o for o in ours if o[0] != "equal"] == [o for o in theirs if o[0] != "equal"]


# ---- diff --ledger -----------------------------------------------------------------------
def test_diff_refuses_a_fifo_ledger_without_blocking(tmp_path):
    os.mkfifo(tmp_path / "conventions.json")
    done = subprocess.run([sys.executable, "-m", "conformance", "diff", "torch.mha",
                           "torch.sdpa", "--ledger", str(tmp_path / "conventions.json")],
                          capture_output=True, text=True, cwd=ROOT, timeout=120)
    one_line_refusal(done, "a FIFO")


@pytest.mark.parametrize("ledger, word", [
    (None, "a device"), ('{"cells": 3}', "cells: expected a list"),
    ('{"systems": [{"id": 1}]}', "systems: expected"), ("[1]", "JSON object"),
    ('{"cells": ' + "[" * 100 + "]" * 100 + "}", "nested deeper")])
def test_diff_refuses_a_ledger_it_cannot_use(tmp_path, ledger, word):
    path = tmp_path / "conventions.json"
    if ledger is None:
        path.symlink_to("/dev/zero")
    else:
        path.write_text(ledger)
    one_line_refusal(cli("diff", "torch.mha", "torch.sdpa", "--ledger", path), word)


# ---- expectations --------------------------------------------------------------------------
def _plant(folder: Path, kind: str, outside: Path) -> None:
    path = folder / "torch.mha.yaml"
    if kind == "fifo":
        os.mkfifo(path)
    elif kind == "dir":
        path.mkdir()
    elif kind == "devzero":
        path.symlink_to("/dev/zero")
    elif kind == "dangling":
        path.symlink_to(folder / "nowhere.yaml")
    else:
        outside.write_text("conventions: {}\n")
        path.symlink_to(outside)


@pytest.mark.parametrize("kind", ["fifo", "dir", "devzero", "dangling", "outside"])
def test_an_expectations_file_that_is_no_file_is_an_expectation_error(tmp_path, kind):
    from conformance.conventions.expectations import ExpectationError, load_dir

    (tmp_path / "exp").mkdir()
    _plant(tmp_path / "exp", kind, tmp_path / "o.yaml")
    with pytest.raises(ExpectationError, match="torch.mha.yaml"):
        load_dir(tmp_path / "exp", ["torch.mha"])


def test_the_plugin_names_a_fifo_expectations_file_as_a_usage_error(pytester, monkeypatch):
    cases, exp = pytester.path / "cases", pytester.path / "exp"
    cases.mkdir()
    exp.mkdir()
    (cases / "good.yaml").write_text(
        "id: good\nattention: {num_heads: 2, query_features: 8}\n")
    os.mkfifo(exp / "toy.numpy.yaml")
    monkeypatch.setenv("CONFORMANCE_EXTRA_RUNNERS", "tests.toy_runner:ToyRunner")
    monkeypatch.setenv("PYTHONPATH", str(ROOT))
    res = pytester.runpytest_subprocess(
        "-p", "conformance.plugin", "-p", "no:cacheprovider", str(cases), "--cases-dir",
        str(cases), "--runner", "toy.numpy", "--expectations-dir", str(exp),
        f"--report-dir={pytester.path / 'rep'}", timeout=120)
    text = res.stdout.str() + res.stderr.str()
    assert res.ret == pytest.ExitCode.USAGE_ERROR, text[-2000:]
    assert "INTERNALERROR" not in text and "toy.numpy.yaml" in text


def test_update_refuses_a_duplicate_key_and_leaves_the_file(tmp_path):
    from conformance.conventions.expectations import ExpectationError, update

    path = tmp_path / "torch.mha.yaml"
    text = '"behaviours":\n  fully_masked_row: nan\n'  # a quoted key set_value cannot see
    path.write_text(text)
    with pytest.raises(ExpectationError, match="duplicate key"):
        update(path, "torch.mha", {("behaviours", "fully_masked_row"): "zeros"})
    assert path.read_text() == text and [p.name for p in tmp_path.iterdir()] == [path.name]


def test_update_keeps_the_file_mode_and_a_new_file_follows_the_umask(tmp_path):
    from conformance.conventions.expectations import load_file, update

    path = tmp_path / "torch.mha.yaml"
    path.write_text("behaviours:\n  fully_masked_row: nan\n")
    os.chmod(path, 0o644)
    update(path, "torch.mha", {("behaviours", "fully_masked_row"): "zeros"})
    assert path.stat().st_mode & 0o777 == 0o644
    assert load_file(path, "torch.mha").fully_masked_row == "zeros"
    fresh = tmp_path / "torch.sdpa.yaml"
    umask = os.umask(0o022)
    try:
        update(fresh, "torch.sdpa", {("behaviours", "fully_masked_row"): "nan"})
    finally:
        os.umask(umask)
    assert fresh.stat().st_mode & 0o777 == 0o644


# ---- --out -------------------------------------------------------------------------------
def test_merge_and_report_refuse_an_out_that_is_a_file(tmp_path, good_shard):
    blocker = tmp_path / "a-file"
    blocker.write_text("x")
    shard = write_shard(tmp_path / "s", good_shard)
    one_line_refusal(cli("merge", shard, "--out", blocker), "--out", "not a folder")
    one_line_refusal(cli("merge", shard, "--out", blocker / "sub"), "--out")
    results = ROOT / "reports" / "results.json"
    if results.is_file():
        one_line_refusal(cli("report", "--results", results, "--out", blocker), "--out")
    assert blocker.read_text() == "x"


def test_probe_refuses_an_out_that_is_a_file(tmp_path):
    pytest.importorskip("numpy")
    blocker = tmp_path / "a-file"
    blocker.write_text("x")
    done = cli("probe", "examples.textbook:attention", "--kind", "sdpa", "--out", blocker)
    one_line_refusal(done, "--out", "not a folder")


# ---- bounds on JSON read back --------------------------------------------------------------
def test_json_over_the_container_bound_is_refused_before_parsing(tmp_path, monkeypatch):
    from conformance import datafile

    monkeypatch.setattr(datafile, "MAX_CONTAINERS", 1000)
    path = tmp_path / "results.json"
    path.write_text('{"rows": [' + ",".join(["{}"] * 1001) + "]}")
    with pytest.raises(DataFileError, match="objects and arrays"):
        datafile.read_json(path, "a results file")
    path.write_text('{"rows": [' + ",".join(["{}"] * 900) + "]}")
    assert len(datafile.read_json(path, "a results file")["rows"]) == 900


def test_row_files_are_bounded_together(tmp_path, monkeypatch):
    from conformance.report.results_files import read_results

    (tmp_path / "results").mkdir()
    part = json.dumps({"runner": "a", "rows": [], "pad": "x" * 600})
    for name in ("a", "b"):
        (tmp_path / "results" / f"{name}.json").write_text(part)
    (tmp_path / "results.json").write_text(json.dumps(
        {"row_files": ["results/a.json", "results/b.json"]}))
    monkeypatch.setenv("CONFORMANCE_MAX_RESULTS_BYTES", "1000")  # each fits, both do not
    with pytest.raises(DataFileError, match="in all"):
        read_results(tmp_path / "results.json")
    monkeypatch.setenv("CONFORMANCE_MAX_RESULTS_BYTES", "2000")
    assert read_results(tmp_path / "results.json")["rows"] == []


class _Scanned(str):
    """A text that counts the characters its searches scan (the work, not the seconds)."""

    scanned = 0

    def find(self, sub, start=0, *rest):
        found = super().find(sub, start, *rest)
        _Scanned.scanned += (found if found >= 0 else len(self)) - start
        return found

    def __contains__(self, sub):
        _Scanned.scanned += len(self)
        return super().__contains__(sub)

    def split(self, *args):
        _Scanned.scanned += len(self)
        return super().split(*args)


def test_skipped_blocks_are_cut_in_one_pass():
    from conformance.report import drift

    start, end = drift.SKIPPED_BLOCKS[0]
    text = "".join(f"line {i}\n{start}\nfigure {i}\n{end}\n" for i in range(2000))
    _Scanned.scanned = 0
    kept = drift._skip_blocks(_Scanned(text))
    assert kept.count("line ") == 2000 and "figure" not in kept
    assert _Scanned.scanned <= 2 * len(text)  # a rescan per block: about 2000 x the text
    assert drift._skip_blocks(f"a{start}x{end}b{start}open") == f"ab{start}open"
