"""Reports: deterministic outside the metadata block; staleness is detected."""
from __future__ import annotations

import json

from conformance.case.loader import load_cases
from conformance.paths import ROOT
from conformance.report.results_files import read_results
from conformance.report import (
    METADATA_END, METADATA_START, differences, strip_metadata, write_reports)
from conformance.report.keras import max_difference
from conformance.report.render import machine
from conformance.versions import versions
from conformance.compare.verdict import Outcome

from .report_rows import FakeCase, graph, make_row, parameter_failure, replace, stand_in

FAKE = stand_in("fake.one", "fake", "fake.Attention")
CASES = [FakeCase("a"), FakeCase("b")]


def rows():
    return [
        make_row("a", FAKE, parameters=10, max_abs_error=1.23456e-7, max_rel_error=2e-6,
                 native_call="fake(1)", weight_shapes={"w": [2, 5]}, typed={"heads": 2}),
        make_row("b", FAKE, Outcome.NOT_EXPRESSIBLE, reason="cannot", dtype="float16",
                 parameters_formula=12),
    ]


def test_two_runs_identical_outside_metadata(tmp_path):
    write_reports(rows(), CASES, [FAKE], tmp_path / "one", "full")
    write_reports(rows(), CASES, [FAKE], tmp_path / "two", "full")
    assert differences(tmp_path / "one", tmp_path / "two") == []
    data = read_results(tmp_path / "one" / "results.json")
    assert "time" in data["metadata"] and len(data["rows"]) == 2
    assert data["row_files"] == ["results/fake.one.json"]
    assert data["rows"][0]["max_abs_error"] == 1.23e-07  # rounded to 3 significant digits
    md = (tmp_path / "one" / "details.md").read_text()
    assert "## Parameter counts" in md and "n/e" in md and "cannot" in md


def test_metadata_is_the_one_version_lookup_and_the_time(tmp_path):
    write_reports(rows(), CASES, [FAKE], tmp_path, "full")
    meta = json.loads((tmp_path / "results.json").read_text())["metadata"]
    assert set(meta) == {*versions(), *machine(), "time"}
    assert "cpu" in meta  # the machine: figures vary with it (check-reports' rule)
    md = (tmp_path / "index.md").read_text()
    block = md.split(METADATA_START)[1].split(METADATA_END)[0]
    assert f"- python: {versions()['python']}" in block and "- time: " in block
    assert "- cpu: " in block


def test_machine_is_read_without_importing_a_framework():
    import subprocess
    import sys

    code = ("import sys; from conformance.report.render import machine; m = machine(); "
            "print(sorted(m)); assert not {'torch', 'tensorflow', 'jax', 'keras'} & "
            "set(sys.modules), sorted(sys.modules)")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          cwd=ROOT)
    assert done.returncode == 0, done.stderr


def test_results_records_are_row_as_dict(tmp_path):
    row = make_row("a", FAKE, graphs={"g": graph()}, output_digest={"size": 1},
                   extras={"call": "x"}, max_abs_error=None, max_rel_error=None)
    write_reports([row], CASES, [FAKE], tmp_path, "full")
    record = read_results(tmp_path / "results.json")["rows"][0]
    more = {"failure_kinds": [], "output_digest": {"size": 1}}  # what re-rendering reads
    assert record == json.loads(json.dumps({**row.as_dict(), **more}))
    assert record["extras"] == {"call": "x", "graphs": {"g": graph()}}
    assert "graphs" not in record


def test_rows_come_back_from_results_json(tmp_path):
    from conformance.report.results import rows_from_results

    row = make_row("a", FAKE, Outcome.MISMATCH, graphs={"g": graph()},
                   output_digest={"size": 1, "sampled": False, "values": [1.0]},
                   failures=(parameter_failure(),), notes=("n",), max_abs_error=1e-7)
    write_reports([row], CASES, [FAKE], tmp_path / "one", "full")
    back, cases, runners, selection, meta = rows_from_results(tmp_path / "one/results.json")
    assert back == [row] and selection == "full"
    assert [(r.name, r.framework, r.system) for r in runners] == [
        ("fake.one", "fake", "fake.Attention")]
    write_reports(back, cases, runners, tmp_path / "two", selection, meta)
    for name in ("results.json", "results/fake.one.json", "results/fake.one.csv", "index.md",
                 "index.html", "cases/a.md"):
        assert (tmp_path / "one" / name).read_text() == (tmp_path / "two" / name).read_text()


def test_changed_result_is_detected(tmp_path):
    """A figure is display only (check-reports compares its kind, test_drift.py); a row
    that no longer compared its output is a change in every file that shows it."""
    write_reports(rows(), CASES, [FAKE], tmp_path / "one", "full")
    moved = rows()
    moved[0] = replace(moved[0], max_abs_error=9e-3)
    write_reports(moved, CASES, [FAKE], tmp_path / "two", "full")
    assert differences(tmp_path / "one", tmp_path / "two") == []
    changed = rows()
    changed[0] = replace(changed[0], max_abs_error=None)
    write_reports(changed, CASES, [FAKE], tmp_path / "three", "full")
    diffs = differences(tmp_path / "one", tmp_path / "three")
    assert {d.split(":")[0] for d in diffs} >= {"results/fake.one.json", "results/fake.one.csv",
                                                "details.md"}
    assert "results/fake.one.json: a[fake.one] max_abs_error: 1.23e-07 -> None" in diffs


def test_metadata_is_stripped_and_only_metadata():
    text = f"a\n{METADATA_START}\nt1\n{METADATA_END}\nb"
    other = f"a\n{METADATA_START}\nt2\n{METADATA_END}\nb"
    assert strip_metadata(text, "index.md") == strip_metadata(other, "index.md")
    assert strip_metadata(text, "index.md") != strip_metadata(text.replace("b", "c"), "index.md")


def test_committed_reports_cover_every_case_and_runner():
    from conformance.runners import all_runners

    data = read_results(ROOT / "reports" / "results.json")
    have = {(r["case"], r["runner"]) for r in data["rows"]}
    cases = load_cases(ROOT / "cases")
    assert have == {(c.id, r.name) for c in cases for r in all_runners()}
    assert data["selection"].startswith("full default matrix")


def test_missing_figures_are_json_null(tmp_path):
    write_reports(rows(), CASES, [FAKE], tmp_path, "full")
    text = (tmp_path / "results" / "fake.one.json").read_text()
    assert "NaN" not in text
    row = json.loads(text)["rows"][1]
    assert row["max_abs_error"] is None and row["parameters"] is None


def test_outcomes_tell_known_mismatches_from_new_ones(tmp_path):
    r1, r2 = stand_in("r1", "f"), stand_in("r2", "f")
    rows = [make_row("c", r1, Outcome.MISMATCH, known_mismatch="understood"),
            make_row("c", r2, Outcome.MISMATCH)]
    write_reports(rows, [], [r1, r2], tmp_path, "test")
    text = (tmp_path / "details.md").read_text()
    table = text.split("## Outcomes")[1].split("##")[0]
    assert "| runner | known mismatch | mismatch |" in table
    assert "| r1 | 1 | 0 |" in table and "| r2 | 0 | 1 |" in table


def test_max_difference_of_output_digests():
    a = {"size": 3, "sampled": False, "values": [1.0, 2.0, None]}
    b = {"size": 3, "sampled": False, "values": [1.0, 2.5, 3.0]}
    assert max_difference(a, b) == "5.00e-01 (1 non-finite skipped)"
    assert max_difference(a, None) == ""
    assert max_difference(a, {**b, "size": 4}) == ""
    big = {"size": 12544, "sampled": True, "values": [0.0] * 256}
    assert max_difference(big, big) == "0 (sampled 256 of 12544)"
    assert max_difference({**a, "values": [None] * 3}, b) == "n/a"


def test_terminal_matrix_has_one_symbol_per_cell():
    from conformance.report.terminal import matrix_lines

    r1, r2 = stand_in("r1", "f"), stand_in("r2", "f")
    rows = [make_row("a", r1), make_row("a", r2, Outcome.MISMATCH, known_mismatch="x"),
            make_row("b", r1, Outcome.NOT_EXPRESSIBLE), make_row("b", r2, Outcome.ERROR)]
    lines = matrix_lines(rows, CASES, [r1, r2])
    assert "1=r1, 2=r2" in lines[0] and "k known mismatch" in lines[0]
    assert lines[2:] == ["a  .k", "b  -E"]
