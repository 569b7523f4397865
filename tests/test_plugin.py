"""The pytest plugin: ids, selection, subset runs, collection errors."""
from __future__ import annotations

import importlib.util
import shutil

import pytest

from conformance.paths import ROOT

pytest_plugins = ["pytester"]
# find_spec, not importorskip: pytester restores sys.modules after each test, and
# importing torch a second time in one process crashes it.
needs_torch = pytest.mark.skipif(importlib.util.find_spec("torch") is None,
                                 reason="torch not installed")

CASE = """
id: small
attention: {num_heads: 2, query_features: 8}
inputs: {batch: 1, query_len: 2}
"""


@pytest.fixture
def project(pytester, monkeypatch):
    """A cases folder of one case; the toy runner (NumPy, no framework to start) is there
    for the runs whose subject is the plugin, not a framework."""
    cases = pytester.path / "cases"
    cases.mkdir()
    (cases / "small.yaml").write_text(CASE)
    monkeypatch.setenv("CONFORMANCE_EXTRA_RUNNERS", "tests.toy_runner:ToyRunner")
    monkeypatch.setenv("PYTHONPATH", str(ROOT))
    return pytester


def run(pytester, *args):
    return pytester.runpytest_inprocess("-p", "conformance.plugin", "-p", "no:cacheprovider",
                                         "--cases-dir", str(pytester.path / "cases"), *args)


def test_item_ids_and_markers(project):
    res = run(project, "--collect-only", "-q", "-m", "torch")
    res.stdout.fnmatch_lines(["*small.yaml::small?torch.mha?", "*small.yaml::small?torch.sdpa?"])
    assert "keras" not in res.stdout.str()


def test_runner_selection_and_unknown_runner(project):
    res = run(project, "--collect-only", "-q", "--runner", "torch.sdpa")
    assert "small[torch.sdpa]" in res.stdout.str() and "small[torch.mha]" not in res.stdout.str()
    res = run(project, "--collect-only", "--runner", "torch.nope")
    assert res.ret != 0 and "unknown; known runners" in res.stderr.str()
    res = run(project, "--collect-only", "--case", "smal")
    assert res.ret != 0 and "--case smal: no such case id" in res.stdout.str() + res.stderr.str()


def test_collection_error_names_file_case_and_field(project):
    (project.path / "cases" / "bad.yaml").write_text(CASE.replace("small", "bad") + "dropout: 0\n")
    res = run(project, "-k", "case-file-error")  # one failing item names it; others still run
    assert res.ret != 0
    res.stdout.fnmatch_lines(["*bad.yaml: case 'bad': field 'dropout': unknown field*"])


def test_subset_run_writes_only_with_report_dir(project):
    res = run(project, "--runner", "toy.numpy", "-q")
    res.assert_outcomes(passed=1)
    assert "subset run" in res.stdout.str() and "reports/ left unchanged" in res.stdout.str()
    out = project.path / "subset-report"
    res = run(project, "--runner", "toy.numpy", "-q", "--report-dir", str(out))
    assert (out / "index.md").exists()
    assert "Selection: subset: 1 of" in (out / "index.md").read_text()


def test_full_run_of_other_cases_dir_never_writes_repo_reports(project):
    before = {p: p.read_bytes() for p in (ROOT / "reports").rglob("*") if p.is_file()}
    res = run(project, "-q", "--runner", "toy.numpy")
    assert res.ret == 0
    after = {p: p.read_bytes() for p in (ROOT / "reports").rglob("*") if p.is_file()}
    assert before == after
    shutil.rmtree(project.path / "cases")


@needs_torch
def test_known_mismatch_is_strict_xfail(project):
    # float64 case, but a tolerance no float32 computation can meet: a real mismatch
    (project.path / "cases" / "small.yaml").write_text(
        CASE + "expect:\n  tolerance: {float32: {rtol: 0, atol: 1e-15}}\n"
        "  known_mismatch: {torch.sdpa: 'float32 cannot meet 1e-15, on purpose'}\n")
    res = run(project, "-q", "--runner", "torch.sdpa,torch.mha")
    res.assert_outcomes(xfailed=1, failed=1)  # torch.mha undeclared: a plain failure
    (project.path / "cases" / "small.yaml").write_text(
        CASE + "expect:\n  known_mismatch: {torch.sdpa: 'no longer true: must be noticed'}\n")
    res = run(project, "-q", "--runner", "torch.sdpa")
    res.assert_outcomes(failed=1)
    assert "remove expect.known_mismatch.torch.sdpa" in res.stdout.str()
