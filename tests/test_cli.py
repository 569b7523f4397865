"""The CLI: fast --help with no framework imported, files and folders validated one by
one, scaffolds that validate, re-rendering from results.json, check-reports, and a
quiet end when piped into head."""
from __future__ import annotations

import json
import shutil
import subprocess
import sys

import pytest

from conformance.__main__ import main
from conformance.paths import ROOT
from conformance.report import write_reports
from conformance.compare.verdict import Outcome

from . import inprocess
from .report_rows import FakeCase, make_row, stand_in

FRAMEWORKS = ("torch", "tensorflow", "jax", "keras", "onnx", "onnxruntime", "flax",
              "transformers", "pandas")


def run(*args, **kwargs):
    return subprocess.run([sys.executable, "-m", "conformance", *args], capture_output=True,
                          text=True, cwd=ROOT, **kwargs)


def test_help_is_fast_and_imports_no_framework():
    code = ("import sys, time; t = time.perf_counter(); from conformance.__main__ import "
            "main\ntry:\n main(['--help'])\nexcept SystemExit:\n pass\n"
            "print(time.perf_counter() - t); print(sorted(m for m in sys.modules if "
            f"m.split('.')[0] in {FRAMEWORKS!r}))")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          cwd=ROOT)
    *_, seconds, imported = done.stdout.splitlines()
    assert imported == "[]" and float(seconds) < 1.0
    for command in ("validate", "new", "check-reports"):
        assert "usage:" in run(command, "--help").stdout


def test_list_piped_into_head_ends_quietly():
    done = subprocess.run(f"{sys.executable} -m conformance list | head -2", shell=True,
                          capture_output=True, text=True, cwd=ROOT)
    assert len(done.stdout.splitlines()) == 2
    assert "Traceback" not in done.stderr and "BrokenPipe" not in done.stderr


def test_validate_reports_every_file(tmp_path, capsys):
    good, bad = tmp_path / "good.yaml", tmp_path / "bad.yaml"
    good.write_text("id: one\nattention: {num_heads: 2, query_features: 8}\n")
    bad.write_text("id: two\nattention: {num_heads: 2, query_features: 8, bias: maybe}\n")
    assert main(["validate", str(good)]) == 0
    assert main(["validate", str(good), str(bad), str(tmp_path / "missing.yaml")]) == 1
    out = capsys.readouterr()
    assert "ok      " in out.out and "1 of 3 file(s) valid" in out.out
    assert "bad.yaml: case 'two': field 'attention.bias'" in out.err
    assert "missing.yaml" in out.err
    assert main(["validate", "--json", str(tmp_path)]) == 1
    report = json.loads(capsys.readouterr().out)
    assert [f["ok"] for f in report["files"]] == [False, True] and report["ok"] is False
    assert report["files"][0]["error"]["field"] == "attention.bias"


@pytest.mark.parametrize("source, numbers, expect", [
    ("keras", ["num_heads=4", "key_dim=784", "features=3136"], 39350528),
    ("torch", ["embed_dim=3136", "num_heads=4"], 39350528),
    ("matlab", ["num_heads=4", "num_key_channels=784", "input_features=3136"], 9839984),
])
def test_new_from_typed_numbers_writes_a_valid_case(tmp_path, source, numbers, expect):
    from conformance.case.loader import load_cases
    from conformance.oracle.reference import formula_parameters

    assert main(["new", "--from", source, *numbers, "--cases-dir", str(tmp_path)]) == 0
    (case,) = load_cases(tmp_path)
    assert formula_parameters(case) == expect
    assert case.typed == {n.split("=")[0]: int(n.split("=")[1]) for n in numbers}
    assert main(["validate", str(tmp_path)]) == 0
    assert main(["new", "--from", source, *numbers, "--cases-dir", str(tmp_path)]) == 1


def test_new_refuses_numbers_that_do_not_fit(tmp_path, capsys):
    assert main(["new", "--from", "torch", "embed_dim=10", "num_heads=4",
                 "--cases-dir", str(tmp_path)]) == 2
    assert "not divisible" in capsys.readouterr().err
    assert main(["new", "--cases-dir", str(tmp_path)]) == 0  # a blank scaffold validates
    assert main(["validate", str(tmp_path)]) == 0


def test_show_names_calls_counts_and_last_figures(capsys):
    assert main(["show", "matlab-4x784"]) == 0
    out = capsys.readouterr().out
    assert "parameters by the formula: 9839984" in out
    assert "[matlab.selfAttentionLayer] selfAttentionLayer(4,784" in out
    assert "[torch.mha] n/e: " in out
    assert main(["show", "no-such-case"]) == 1


def _written(tmp_path):
    runner = stand_in("f.one", "f", "f.Attention")
    rows = [make_row("a", runner, native_call="f(1)", weight_shapes={"w": [2, 5]}),
            make_row("b", runner, Outcome.NOT_EXPRESSIBLE, reason="cannot")]
    write_reports(rows, [FakeCase("a"), FakeCase("b")], [runner], tmp_path / "run", "full")
    return tmp_path / "run"


def test_report_re_renders_from_results_json_and_check_reports_agrees(tmp_path):
    run_dir = _written(tmp_path)
    again = tmp_path / "again"
    again.mkdir()
    (again / "results.json").write_bytes((run_dir / "results.json").read_bytes())
    shutil.copytree(run_dir / "results", again / "results")
    assert main(["report", "--results", str(again / "results.json")]) == 0
    assert (again / "cases" / "a.md").read_text() == (run_dir / "cases" / "a.md").read_text()
    assert main(["check-reports", str(again), "--against", str(run_dir)]) == 0
    part = again / "results" / "f.one.json"
    data = json.loads(part.read_text())
    data["rows"][0]["parameters"] = 11
    part.write_text(json.dumps(data))
    done = inprocess.cli("check-reports", str(again), "--against", str(run_dir))
    assert done.returncode == 1
    assert "results/f.one.json: a[f.one] parameters: 10 -> 11" in done.stderr


def test_check_reports_of_a_folder_outside_the_repository_is_one_error(tmp_path, capsys):
    """Without --against the committed version is asked for: a folder outside the repository
    has none, which is an error naming the fix, not a traceback."""
    run_dir = _written(tmp_path)
    assert main(["check-reports", str(run_dir)]) == 1
    err = capsys.readouterr().err
    assert "outside the repository" in err and "--against DIR" in err
    assert "Traceback" not in err
