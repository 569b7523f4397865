"""Expectations per runner, through pytest: a new case needs no per-runner pin (#16,
acceptance 6), `--cases-dir DIR` collects DIR from any directory, an undeclared answer
fails with the line to add and --update-expectations writes it, a known mismatch is
strict unless it says otherwise."""
from __future__ import annotations

import os
import subprocess
import sys
from types import SimpleNamespace

import pytest

from conformance.paths import ROOT
from conformance.report.results_files import read_results
from tests.helpers import require

pytest_plugins = ["pytester"]

require("torch", reason="needs the torch extra: pip install -e '.[torch]'")

# Written by someone who never read expectations/: fully masked rows the mask implies
# (no masked_rows), float64 with and without a mask, and nothing pinned per runner.
NEW_CASES = """cases:
  - id: new-lower-right-tall
    attention: {num_heads: 2, query_features: 8}
    inputs: {batch: 2, query_len: 5, key_len: 3}
    mask: {causal: lower_right}
  - id: new-zero-row
    attention: {num_heads: 2, query_features: 8}
    inputs: {batch: 2, query_len: 3, key_len: 4}
    mask: {attn_mask: [[1, 0, 1, 1], [0, 0, 0, 0], [1, 1, 1, 0]]}
  - id: new-padding-zero
    attention: {num_heads: 4, query_features: 16}
    inputs: {batch: 2, query_len: 3, key_len: 5}
    mask: {key_padding: [5, 0]}
  - id: new-float64
    attention: {num_heads: 4, query_features: 32}
    inputs: {batch: 1, query_len: 4, self_attention: true, dtype: float64}
  - id: new-float64-padding
    attention: {num_heads: 3, query_features: 12}
    inputs: {batch: 2, query_len: 4, key_len: 6, dtype: float64}
    mask: {key_padding: [6, 0]}
"""
RUNNERS = "torch.mha,torch.sdpa,onnx.attention-op.ort"


def pytest_run(cwd, *args) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(ROOT), "TF_CPP_MIN_LOG_LEVEL": "3"}
    return subprocess.run([sys.executable, "-m", "pytest", "-p", "no:cacheprovider", *args],
                          cwd=cwd, env=env, capture_output=True, text=True, timeout=600)


def inline_run(pytester, *args) -> SimpleNamespace:
    """A run in this process, rooted in pytester's folder (no conftest of the repository):
    its exit code and terminal output, as pytest_run gives them."""
    res = pytester.runpytest_inprocess("-p", "no:cacheprovider", *args)
    return SimpleNamespace(returncode=int(res.ret), stdout=res.stdout.str())


@pytest.fixture
def new_cases(tmp_path):
    cases = tmp_path / "elsewhere" / "my-cases"
    cases.mkdir(parents=True)
    (cases / "new.yaml").write_text(NEW_CASES)
    return cases


def test_new_cases_need_no_pin_and_run_from_any_directory(new_cases, tmp_path):
    pytest.importorskip("onnxruntime", reason="needs the onnx extra")
    out = tmp_path / "reports"
    done = pytest_run(tmp_path, "-p", "conformance.plugin", f"--cases-dir={new_cases}",
                      "--runner", RUNNERS, f"--report-dir={out}", "-q")
    assert done.returncode == 0, done.stdout[-3000:]
    rows = read_results(out / "results.json")["rows"]
    assert len(rows) == 5 * 3
    words = {(r["case"], r["runner"]): "known" if r["known_mismatch"] and r["outcome"] in (
        "mismatch", "error") else r["outcome"] for r in rows}
    assert set(words.values()) <= {"pass", "behaviour", "known", "not_expressible"}, words
    assert words["new-padding-zero", "torch.mha"] == "behaviour"  # its file: nan, once
    assert words["new-float64", "onnx.attention-op.ort"] == "known"  # its file: when float64
    assert words["new-float64", "torch.mha"] == "pass"


def test_cases_dir_alone_collects_that_directory_from_the_repository(new_cases):
    """In the repository conftest.py loads the plugin: --cases-dir=DIR is all it takes
    (DIR replaces the default test paths)."""
    done = pytest_run(ROOT, f"--cases-dir={new_cases}", "--runner", "torch.mha",
                      "--collect-only", "-q")
    items = [line for line in done.stdout.splitlines() if "::" in line]
    assert done.returncode == 0, done.stdout[-2000:]
    assert len(items) == 5 and all("new.yaml::new-" in i for i in items), items


def test_undeclared_answer_names_the_line_and_update_writes_it(new_cases, pytester):
    mine = pytester.path / "expectations"
    mine.mkdir()
    args = ("-p", "conformance.plugin", f"--cases-dir={new_cases}", "--runner", "torch.mha",
            "--case", "new-lower-right-tall", "--expectations-dir", str(mine), "-q", "-m",
            "not conventions")
    done = inline_run(pytester, *args)
    assert done.returncode == 1
    assert (f"fully masked row: observed 'nan', undeclared; add to {mine / 'torch.mha.yaml'} "
            "under 'behaviours:' (or run with --update-expectations):\n"
            "  fully_masked_row: nan\n") in done.stdout
    assert inline_run(pytester, *args, "--update-expectations").returncode == 0
    assert "behaviours:\n  fully_masked_row: nan\n" in (mine / "torch.mha.yaml").read_text()
    assert inline_run(pytester, *args).returncode == 0


def test_known_mismatch_is_strict_unless_it_says_not(new_cases, pytester):
    mine = pytester.path / "expectations"
    mine.mkdir()
    known = ("behaviours: {fully_masked_row: nan}\nknown_mismatches:\n"
             "  - when: {dtype: float64, self_attention: true}\n"
             "    reason: 'a planted reason, for the test'\n")
    (mine / "torch.mha.yaml").write_text(known)
    args = ("-p", "conformance.plugin", f"--cases-dir={new_cases}", "--runner", "torch.mha",
            "--case", "new-float64,new-float64-padding", "--expectations-dir", str(mine),
            "-q", "-m", "not conventions")
    done = inline_run(pytester, *args)
    assert done.returncode == 1 and "1 failed" in done.stdout, done.stdout[-2000:]
    assert (f"new-float64[torch.mha] passed, but a known mismatch is declared (a planted "
            f"reason, for the test); remove known_mismatches[0] in {mine / 'torch.mha.yaml'}"
            ) in done.stdout  # new-float64-padding is not self-attention: not matched
    (mine / "torch.mha.yaml").write_text(known + "    strict: false\n")
    assert inline_run(pytester, *args).returncode == 0
