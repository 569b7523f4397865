"""Untrusted files stay data (issue #17): each hostile input is planted and refused cleanly.

Shard files (a pickle gadget, damaged files), results files (path-like ids, deep
nesting, wrong types, huge, a FIFO, /dev/zero), odd entries of a cases folder (an
editor lock link, a directory, a FIFO, a broken file, a link leaving the folder),
reports interrupted or out of space while written, an unwritable report folder, a
user's file in the output folder, environment values, explicit YAML tags, a scale its
dtype cannot hold, and formula / bidi text in report cells.  A clean refusal is one
message naming the file (or variable) and no traceback; nothing is written outside
the output folder.
"""
from __future__ import annotations

import json
import os
import pickle
import subprocess
import sys
from pathlib import Path

import pytest

from conformance.datafile import DataFileError
from conformance.paths import ROOT
from conformance.report import write_reports
from conformance.report.results_files import read_results
from conformance.settings import SettingError, extra_runners, figures_wanted, item_timeout

from . import inprocess
from .report_rows import FakeCase, make_row, stand_in

pytest_plugins = ["pytester"]
FAKE = stand_in("fake.one", "fake", "fake.Attention")
GOOD = "id: good\nattention: {num_heads: 2, query_features: 8}\ninputs: {batch: 1, query_len: 2}\n"


def cli(*args, env=None, alone=False):
    """The command's exit code and output: in this process, or in a subprocess with a
    timeout where a regression could block (a FIFO, a device) or the environment differs."""
    if not (env or alone):
        return inprocess.cli(*args)
    return subprocess.run([sys.executable, "-m", "conformance", *args], capture_output=True,
                          text=True, cwd=ROOT, env={**os.environ, **(env or {})}, timeout=120)


def clean_refusal(done, name: str) -> None:
    assert done.returncode == 1, done.stdout + done.stderr
    assert "Traceback" not in done.stderr and name in done.stderr, done.stderr


def one_report(folder: Path) -> Path:
    write_reports([make_row("a", FAKE), make_row("b", FAKE)], [FakeCase("a"), FakeCase("b")],
                  [FAKE], folder, "test")
    return folder / "results.json"


class Gadget:
    """Unpickling this would create the marker file: the shard reader must never."""

    def __init__(self, marker: Path):
        self.marker = marker

    def __reduce__(self):
        return (Path.touch, (self.marker,))


# ---- shard files ---------------------------------------------------------------------
def test_a_pickle_gadget_shard_runs_no_code(tmp_path):
    marker = tmp_path / "PWNED"
    gadget = pickle.dumps(Gadget(marker))
    for name in ("shard.pickle", "shard.json"):  # the old name, and pickle bytes in the new
        (tmp_path / name).write_bytes(gadget)
    done = cli("merge", str(tmp_path), "--out", str(tmp_path / "out"))
    clean_refusal(done, "shard.json")
    assert not marker.exists() and not (tmp_path / "out").exists()


@pytest.mark.parametrize("content", [b"", b"{", b"[]", b'{"format": "x"}', b"\x80\x81",
                                     b"[" * 100_000, b'{"shard": 1}'])
def test_a_damaged_shard_file_is_one_clean_error(tmp_path, content):
    (tmp_path / "shard.json").write_bytes(content)
    clean_refusal(cli("merge", str(tmp_path), "--out", str(tmp_path / "out")), "shard.json")


def test_a_shard_file_that_is_a_fifo_is_refused_without_blocking(tmp_path):
    os.mkfifo(tmp_path / "shard.json")
    clean_refusal(cli("merge", str(tmp_path), "--out", str(tmp_path / "out"), alone=True),
                  "a FIFO")


def test_a_shard_with_a_traversal_id_is_refused(tmp_path):
    from conformance.plugin import shardfile

    record = {"shard": (1, 1), "rows": {("a", "fake.one"): make_row("a", FAKE)},
              "probes": {}, "seconds": {}, "parts": [], "total": 1, "default_cases": False,
              "runners": ["fake.one"], "cases": ["a"]}
    text = shardfile.encode(record).replace('"case": "a"', '"case": "../../TRAVERSED"')
    (tmp_path / "shard.json").write_text(text)
    with pytest.raises(DataFileError, match="is not a case id"):
        shardfile.read(tmp_path / "shard.json")


# ---- results files -------------------------------------------------------------------
def _hostile_results(tmp_path: Path) -> dict[str, object]:
    data = read_results(one_report(tmp_path / "base"))
    del data["row_files"]  # the rows inline, as results.json held them before the split

    def with_id(cid):
        d = json.loads(json.dumps(data))
        d["rows"][0]["case"] = d["cases"][0]["id"] = cid
        return d

    wrong = json.loads(json.dumps(data))
    wrong["rows"][0]["parameters"] = "many"
    return {"traversal": with_id("../../TRAVERSED"), "absolute": with_id(str(tmp_path / "ABS")),
            "markup": with_id("x<img src=x onerror=alert(1)>"), "escape": with_id("a\x1b[2Jb"),
            "long": with_id("a" * 500), "wrong-type": wrong, "list": [1, 2],
            "rows-not-list": {"rows": {"a": 1}}, "deep": "[" * 50_000 + "]" * 50_000,
            "not-json": "{rows: [", "huge": {"rows": [], "pad": "x" * 3_000_000},
            **_hostile_row_files(tmp_path, data)}


def _hostile_row_files(tmp_path: Path, data: dict) -> dict[str, object]:
    """Indexes whose row_files lead outside the folder, to nothing, to a FIFO, to a file
    that holds no rows, or list too many names."""
    index = {k: v for k, v in data.items() if k != "rows"}
    parts = tmp_path / "results"
    parts.mkdir()
    os.mkfifo(parts / "fifo.json")
    (parts / "norows.json").write_text("[1, 2]")
    (parts / "rowsdict.json").write_text('{"rows": {"a": 1}}')
    (parts / "huge.json").write_text(json.dumps({"rows": [], "pad": "x" * 3_000_000}))

    def listing(*names):
        return {**index, "row_files": list(names)}

    return {"rf-traversal": listing("results/../../etc/passwd.json"),
            "rf-absolute": listing(str(tmp_path / "results" / "norows.json")),
            "rf-missing": listing("results/nothere.json"), "rf-fifo": listing("results/fifo.json"),
            "rf-not-rows": listing("results/norows.json"),
            "rf-rows-dict": listing("results/rowsdict.json"),
            "rf-huge": listing("results/huge.json"), "rf-twice": listing(*["results/x.json"] * 2),
            "rf-not-list": {**index, "row_files": "results/x.json"},
            "rf-too-many": listing(*[f"results/r{n}.json" for n in range(1001)])}


def cli_here(*args, env=None) -> subprocess.CompletedProcess:
    """`python -m conformance ARGS` run by its `main` in this process (a subprocess each
    costs ~0.6 s of CPU in imports): its exit code and what it printed.  An exception
    that main lets out propagates and fails the test, as a traceback would."""
    import contextlib
    import io

    from conformance.__main__ import main

    out, err = io.StringIO(), io.StringIO()
    with pytest.MonkeyPatch.context() as mp, contextlib.redirect_stdout(out), \
            contextlib.redirect_stderr(err):
        for name, value in (env or {}).items():
            mp.setenv(name, value)
        code = main(list(args))
    return subprocess.CompletedProcess(["conformance", *args], code, out.getvalue(),
                                       err.getvalue())


def test_hostile_results_files_give_one_clean_error_and_write_nothing(tmp_path):
    out = tmp_path / "out"
    env = {"CONFORMANCE_MAX_RESULTS_BYTES": "2e6"}
    for name, payload in _hostile_results(tmp_path).items():
        path = tmp_path / f"{name}.json"
        path.write_text(payload if isinstance(payload, str) else json.dumps(payload))
        # the deepest one also as the real command line: one line on stderr, no traceback
        done = (cli if name == "deep" else cli_here)("report", "--results", str(path), "--out",
                                                     str(out), env=env)
        clean_refusal(done, str(path))
        assert len(done.stderr.splitlines()) == 1, (name, done.stderr)
    assert not out.exists()  # refused before anything was written
    assert not list(tmp_path.rglob("TRAVERSED*")) and not list(tmp_path.rglob("ABS*"))


@pytest.mark.parametrize("kind", ["fifo", "dev-zero", "directory"])
def test_a_results_path_that_is_not_a_file_is_refused(tmp_path, kind):
    path = tmp_path / "results.json"
    if kind == "fifo":
        os.mkfifo(path)
    elif kind == "dev-zero":
        path.symlink_to("/dev/zero")
    else:
        path.mkdir()
    clean_refusal(cli("report", "--results", str(path), "--out", str(tmp_path / "o"),
                      alone=kind != "directory"), "not a")


def test_check_reports_refuses_odd_report_files_and_leaves_no_temp_folder(tmp_path):
    good = tmp_path / "good"
    one_report(good)
    odd = tmp_path / "odd"
    one_report(odd)
    (odd / "index.md").unlink()
    os.mkfifo(odd / "index.md")
    clean_refusal(cli("check-reports", str(good), "--against", str(odd), alone=True), "a FIFO")
    (odd / "index.md").unlink()
    (odd / "index.md").symlink_to("/dev/zero")
    clean_refusal(cli("check-reports", str(good), "--against", str(odd), alone=True),
                  "a device")
    (odd / "index.md").unlink()
    (odd / "index.md").write_text("x")
    (odd / "results.json").write_text("{not json")
    clean_refusal(cli("check-reports", str(good), "--against", str(odd)), "cannot be compared")
    tmp = tmp_path / "tmp"
    tmp.mkdir()
    cli("check-reports", env={"TMPDIR": str(tmp)})  # against HEAD: a temporary folder
    assert list(tmp.iterdir()) == []


# ---- report text -----------------------------------------------------------------------
def test_csv_formulas_and_bidi_controls_are_neutralised(tmp_path):
    rows = [make_row("a", FAKE, known_mismatch="-1+1+cmd|' /C calc'!A0 known",
                     reason="\u202eevil", notes=("=HYPERLINK(1)", "\tx"))]
    write_reports(rows, [FakeCase("a")], [FAKE], tmp_path, "a\u202etitle\x1b[31m\r\nx")
    csv = (tmp_path / "results" / "fake.one.csv").read_text()
    assert "'-1+1+cmd" in csv and ",-1+1" not in csv and "'=HYPERLINK" in csv
    for name in ("index.md", "results/fake.one.csv", "index.html", "cases/a.md"):
        text = (tmp_path / name).read_text()
        assert "\u202e" not in text and "\x1b" not in text, name


# ---- case folders ----------------------------------------------------------------------
@pytest.fixture
def odd_cases(pytester, monkeypatch):
    cases = pytester.path / "cases"
    cases.mkdir()
    (cases / "good.yaml").write_text(GOOD)
    (cases / "other.yaml").write_text(GOOD.replace("id: good", "id: other"))
    (cases / ".#good.yaml").symlink_to("root@host.1234:1700000000")  # an Emacs lock link
    (cases / "d.yaml").mkdir()
    os.mkfifo(cases / "f.yaml")
    (cases / "gone.yaml").symlink_to(pytester.path / "nowhere.yaml")
    (cases / "bad.yaml").write_text("id: bad\nattention: {num_heads: !!int ''}\n")
    (pytester.path / "secret.yaml").write_text("id: s\ntoken: SECRET-TOKEN-123\n")
    (cases / "link.yaml").symlink_to(pytester.path / "secret.yaml")
    monkeypatch.setenv("CONFORMANCE_EXTRA_RUNNERS", "tests.toy_runner:ToyRunner")
    monkeypatch.setenv("PYTHONPATH", str(ROOT))
    return pytester


def test_odd_entries_and_a_broken_file_hide_no_good_case(odd_cases):
    """#17 acceptance 2: every good case runs, and each bad entry is named."""
    cases = odd_cases.path / "cases"
    res = odd_cases.runpytest_subprocess(
        "-p", "conformance.plugin", "-p", "no:cacheprovider", str(cases), "--cases-dir",
        str(cases), "--runner", "toy.numpy", f"--report-dir={odd_cases.path / 'out'}",
        timeout=120)
    text = res.stdout.str()
    res.assert_outcomes(passed=2, failed=2)  # good, other; bad.yaml and link.yaml named
    for named in ("bad.yaml", "link.yaml", ".#good.yaml: skipped, an editor lock file",
                  "d.yaml: skipped, a directory", "f.yaml: skipped, a FIFO",
                  "gone.yaml: skipped, a dangling symlink", "leading outside the cases folder"):
        assert named in text, named
    assert "SECRET-TOKEN" not in text
    rows = read_results(odd_cases.path / "out" / "results.json")["rows"]
    assert {r["case"] for r in rows} == {"good", "other"}


def test_validate_names_odd_entries(odd_cases):
    done = cli("validate", str(odd_cases.path / "cases"))
    assert done.returncode == 1 and "Traceback" not in done.stderr
    for named in ("d.yaml: skipped, a directory", "bad.yaml", "link.yaml"):
        assert named in done.stderr
    assert "SECRET-TOKEN" not in done.stderr + done.stdout


@pytest.mark.parametrize("text, field", [
    (f"id: {'a' * 500}\n", "'id'"),
    ("id: t\nattention: {num_heads: 1, query_features: 4}\ntyped: {x: !!bool 'abc'}\n",
     "typed.x"),
    ("id: t\nattention: {num_heads: 1, query_features: 4}\ntyped: {x: !!float ''}\n",
     "typed.x"),
    ("id: t\nattention: {num_heads: 1, query_features: 4, scale: 1.0e+39}\n",
     "attention.scale"),
    ("id: t\nattention: {num_heads: 1, query_features: 4}\ninputs: {scale: 1.0e+5, "
     "dtype: float16}\n", "inputs.scale"),
])
def test_case_values_that_cannot_hold_are_refused_at_load(tmp_path, text, field):
    path = tmp_path / "c.yaml"
    path.write_text(text)
    done = cli("validate", str(path))
    clean_refusal(done, field)


# ---- writing reports -------------------------------------------------------------------
def test_a_failure_while_writing_leaves_the_old_reports_whole(tmp_path, monkeypatch):
    """A full disk (OSError) or SIGINT (KeyboardInterrupt) in the middle of writing: the
    old reports stay as they were, and no staging folder is left."""
    from conformance.report import render

    out = tmp_path / "reports"
    one_report(out)
    before = {p: p.read_bytes() for p in out.rglob("*") if p.is_file()}
    for fault in (OSError(28, "No space left on device"), KeyboardInterrupt()):
        def broken(*args, fault=fault, **kwargs):
            raise fault

        monkeypatch.setattr(render, "write_html_page", broken)
        with pytest.raises(type(fault)):
            write_reports([make_row("c", FAKE)], [FakeCase("c")], [FAKE], out, "new")
        assert {p: p.read_bytes() for p in out.rglob("*") if p.is_file()} == before
        assert sorted(p.name for p in tmp_path.iterdir()) == ["reports"]


def test_the_suite_never_deletes_a_file_it_did_not_write(tmp_path):
    out = tmp_path / "D"
    one_report(out)
    (out / "cases" / "notes.md").write_text("mine")
    write_reports([make_row("b", FAKE)], [FakeCase("b")], [FAKE], out, "again")
    assert (out / "cases" / "notes.md").read_text() == "mine"
    assert not (out / "cases" / "a.md").exists()  # the suite's own stale page goes


def test_an_unwritable_report_dir_is_refused_before_the_run(odd_cases):
    blocker = odd_cases.path / "a-file"
    blocker.write_text("x")
    (odd_cases.path / "cases" / "bad.yaml").unlink()
    res = odd_cases.runpytest_subprocess(
        "-p", "conformance.plugin", "-p", "no:cacheprovider", "--cases-dir",
        str(odd_cases.path / "cases"), "--runner", "toy.numpy",
        f"--report-dir={blocker / 'sub'}", timeout=60)
    assert res.ret == pytest.ExitCode.USAGE_ERROR
    assert "--report-dir" in res.stderr.str() and "not writable" in res.stderr.str()


# ---- settings ----------------------------------------------------------------------------
@pytest.mark.parametrize("value", ["nan", "inf", "-1", "abc", "1e99"])
def test_bad_item_timeouts_are_named(value):
    with pytest.raises(SettingError, match="CONFORMANCE_ITEM_TIMEOUT"):
        item_timeout(None, {"CONFORMANCE_ITEM_TIMEOUT": value})
    if value != "abc":
        with pytest.raises(SettingError, match="--item-timeout"):
            item_timeout(float(value))


def test_settings_read_as_written():
    from conformance.case.model import load_limit

    assert item_timeout(None, {"CONFORMANCE_ITEM_TIMEOUT": "2.5"}) == 2.5
    assert item_timeout(None, {}) == 300.0
    for text in ("1e12", "10^12", "10**12", "1_000_000_000_000"):
        assert load_limit({"CONFORMANCE_MAX_LOAD_ELEMENTS": text}) == 10**12
    with pytest.raises(SettingError, match="CONFORMANCE_MAX_LOAD_ELEMENTS"):
        load_limit({"CONFORMANCE_MAX_LOAD_ELEMENTS": "1.5"})
    with pytest.raises(SettingError, match="CONFORMANCE_EXTRA_RUNNERS.*module:Class"):
        extra_runners({"CONFORMANCE_EXTRA_RUNNERS": "nocolon"})
    assert extra_runners({"CONFORMANCE_EXTRA_RUNNERS": "a.b:C, d:E"}) == [("a.b", "C"),
                                                                           ("d", "E")]
    assert figures_wanted({}) and figures_wanted({"CONFORMANCE_FIGURES": " On "})
    assert not figures_wanted({"CONFORMANCE_FIGURES": "0"})
    with pytest.raises(SettingError, match="CONFORMANCE_FIGURES='nope': expected 1 or 0"):
        figures_wanted({"CONFORMANCE_FIGURES": "nope"})


def test_a_bad_environment_value_is_a_usage_error_before_anything_runs(odd_cases):
    odd_cases.monkeypatch = None
    env = {"CONFORMANCE_ITEM_TIMEOUT": "nan"}
    done = subprocess.run([sys.executable, "-m", "pytest", "-p", "conformance.plugin", "-p",
                           "no:cacheprovider", "--cases-dir", str(odd_cases.path / "cases"),
                           str(odd_cases.path / "cases")], capture_output=True, text=True,
                          cwd=odd_cases.path, env={**os.environ, **env}, timeout=60)
    assert done.returncode == pytest.ExitCode.USAGE_ERROR, done.stdout[-2000:]
    assert "CONFORMANCE_ITEM_TIMEOUT='nan'" in done.stderr and "INTERNALERROR" not in (
        done.stdout + done.stderr)
