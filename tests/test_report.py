"""Reports: deterministic outside the metadata block; staleness is detected."""
from __future__ import annotations

import json

from conformance.case import load_cases
from conformance.matrix import Row
from conformance.plugin import ROOT
from conformance.report import differences, strip_metadata, write_reports
from conformance.runners import Runner


class FakeRunner(Runner):
    name, framework = "fake.one", "fake"


def rows():
    return [
        Row("a", "fake.one", "fake", outcome="pass", dtype="float32", parameters=10,
            parameters_formula=10, max_abs_error=1.23456e-7, max_rel_error=2e-6,
            native_call="fake(1)", weight_shapes={"w": [2, 5]}, typed={"heads": 2}),
        Row("b", "fake.one", "fake", outcome="not_expressible", reason="cannot", dtype="float16",
            parameters_formula=12),
    ]


class FakeCase:
    def __init__(self, id_):
        self.id, self.has_fully_masked_rows = id_, False


CASES = [FakeCase("a"), FakeCase("b")]


def test_two_runs_identical_outside_metadata(tmp_path):
    write_reports(rows(), CASES, [FakeRunner()], tmp_path / "one", "full")
    write_reports(rows(), CASES, [FakeRunner()], tmp_path / "two", "full")
    assert differences(tmp_path / "one", tmp_path / "two") == []
    data = json.loads((tmp_path / "one" / "results.json").read_text())
    assert "time" in data["metadata"] and len(data["rows"]) == 2
    assert data["rows"][0]["max_abs_error"] == 1.23e-07  # rounded to 3 significant digits
    md = (tmp_path / "one" / "index.md").read_text()
    assert "## Parameter counts" in md and "n/e" in md and "cannot" in md


def test_changed_result_is_detected(tmp_path):
    write_reports(rows(), CASES, [FakeRunner()], tmp_path / "one", "full")
    changed = rows()
    changed[0].max_abs_error = 9e-3
    write_reports(changed, CASES, [FakeRunner()], tmp_path / "two", "full")
    diffs = differences(tmp_path / "one", tmp_path / "two")
    assert {d.split(":")[0] for d in diffs} == {"results.json", "results.csv", "index.md",
                                                "index.html"}


def test_metadata_is_stripped_and_only_metadata():
    text = "a\n<!-- run-metadata: start (x) -->\nt1\n<!-- run-metadata: end -->\nb"
    from conformance.report import METADATA_END, METADATA_START

    text = f"a\n{METADATA_START}\nt1\n{METADATA_END}\nb"
    other = f"a\n{METADATA_START}\nt2\n{METADATA_END}\nb"
    assert strip_metadata(text, "index.md") == strip_metadata(other, "index.md")
    assert strip_metadata(text, "index.md") != strip_metadata(text.replace("b", "c"), "index.md")


def test_committed_reports_cover_every_case_and_runner():
    from conformance.runners import REGISTRY, load

    data = json.loads((ROOT / "reports" / "results.json").read_text())
    have = {(r["case"], r["runner"]) for r in data["rows"]}
    cases = load_cases(ROOT / "cases")
    names = [load(e).name for e in REGISTRY]
    assert have == {(c.id, n) for c in cases for n in names}
    assert data["selection"].startswith("full default matrix")


def test_missing_figures_are_json_null(tmp_path):
    write_reports(rows(), CASES, [FakeRunner()], tmp_path, "full")
    text = (tmp_path / "results.json").read_text()
    assert "NaN" not in text
    row = json.loads(text)["rows"][1]
    assert row["max_abs_error"] is None and row["parameters"] is None


def test_outcomes_tell_known_mismatches_from_new_ones(tmp_path):
    from types import SimpleNamespace

    from conformance.matrix import Row
    from conformance.report import write_reports

    rows = [Row("c", "r1", "f", outcome="mismatch", known_mismatch="understood"),
            Row("c", "r2", "f", outcome="mismatch")]
    runners = [SimpleNamespace(name=n, sections=()) for n in ("r1", "r2")]
    write_reports(rows, [], runners, tmp_path, "test")
    text = (tmp_path / "index.md").read_text()
    table = text.split("## Outcomes")[1].split("##")[0]
    assert "| runner | known mismatch | mismatch |" in table
    assert "| r1 | 1 | 0 |" in table and "| r2 | 0 | 1 |" in table
