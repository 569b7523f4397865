"""Every item yields a row, whatever its runner does (issue #13).

Each test runs a small pytest session in a subprocess (pytester) over two
tiny cases, with runners that misbehave on the case "boom" (tests/fault_runners.py,
added through CONFORMANCE_EXTRA_RUNNERS) beside the toy runner, and reads the
results file: every (case, runner) pair has a row, the faulty ones an `error`
row naming what happened, and every report file is written.
"""
from __future__ import annotations

import os

import pytest

from conformance.paths import ROOT
from conformance.runners import EXTRA_ENV
from conformance.report.results_files import read_results

pytest_plugins = ["pytester"]

CASES = """
cases:
  - id: fine
    attention: {num_heads: 2, query_features: 8}
    inputs: {batch: 1, query_len: 2}
  - id: boom
    attention: {num_heads: 2, query_features: 8}
    inputs: {batch: 1, query_len: 3}
"""
TOY = "tests.toy_runner:ToyRunner"
REPORT_FILES = {"index.md", "index.html", "results.json", "results"}


@pytest.fixture
def session(pytester, monkeypatch):
    """run(runner targets, *pytest args) -> (result, {(case, runner): row})."""
    (pytester.path / "cases").mkdir()
    (pytester.path / "cases" / "faults.yaml").write_text(CASES)
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(
        filter(None, [str(ROOT), os.environ.get("PYTHONPATH")])))
    out = pytester.path / "reports-out"

    def run(targets, *args, timeout=120):
        monkeypatch.setenv(EXTRA_ENV, ",".join([TOY, *targets]))
        names = ["toy.numpy"] + [_name(t) for t in targets]
        res = pytester.runpytest_subprocess(
            "-p", "conformance.plugin", "-p", "no:cacheprovider", "-q",
            "--cases-dir", str(pytester.path / "cases"), f"--report-dir={out}",
            "--runner", ",".join(names), *args, timeout=timeout)
        assert REPORT_FILES <= {p.name for p in out.iterdir()}, res.stdout.str()
        rows = read_results(out / "results.json")["rows"]
        return res, {(r["case"], r["runner"]): r for r in rows}

    return run


def _name(target: str) -> str:
    from conformance.runners import load

    return load(target).name


def _faults(*classes: str) -> list[str]:
    return [f"tests.fault_runners:{c}" for c in classes]


def check(rows, names, reasons):
    """Every pair has a row; "fine" passes; each faulty row errs with its reason."""
    assert set(rows) == {(c, n) for c in ("fine", "boom") for n in ["toy.numpy", *names]}
    assert {n: rows["fine", n]["outcome"] for n in names} == {n: "pass" for n in names}
    assert rows["boom", "toy.numpy"]["outcome"] == "pass"
    for name, reason in reasons.items():
        row = rows["boom", name]
        assert (row["outcome"], reason in row["reason"]) == ("error", True), row["reason"]


def test_exceptions_in_every_stage_and_an_in_process_hang(session):
    targets = _faults("RaisesInTranslate", "SysExitInRun", "BaseExceptionInRun",
                      "BreaksTheJudge", "HangsInProcess")
    res, rows = session(targets, "--item-timeout", "3", "--no-isolate")  # in process
    check(rows, [_name(t) for t in targets], {
        "fault.translate": "translate raised ValueError: translate breaks, on purpose",
        "fault.sysexit": "run raised SystemExit: 3 (sys.exit was called)",
        "fault.baseexception": "run raised GeneratorExit: an odd BaseException",
        "fault.judge": "judging the observation raised ValueError",
        "fault.hang.process": "timed out after 3 s in run of fault.hang.process on case boom",
    })
    res.assert_outcomes(passed=7, failed=5)


def test_a_worker_that_dies_or_hangs_costs_one_row(session):
    targets = _faults("ExitsInWorker", "SegfaultsInWorker", "HangsInWorker")
    # 8 s, not 3: the clock starts when a request is sent, a fresh worker's start-up
    # included, which took over 3 s on a loaded 2-core machine (fine[toy.numpy] timed out)
    res, rows = session(targets, "--item-timeout", "8")
    check(rows, [_name(t) for t in targets], {
        "fault.exit.worker": "worker 'faulty' died (exit 1) while running fault.exit.worker "
                             "on case boom",
        "fault.segv.worker": "worker 'faulty' died (exit -11, SIGSEGV) while running "
                             "fault.segv.worker on case boom",
        "fault.hang.worker": "timed out after 8 s: worker 'faulty' was killed while running "
                             "fault.hang.worker on case boom and restarts",
    })
    assert "Fatal Python error: Segmentation fault" in str(rows["boom", "fault.segv.worker"])
    res.assert_outcomes(passed=5, failed=3)


@pytest.mark.parametrize("flags", [(), ("--isolate",)], ids=["default", "isolate"])
def test_a_hard_crash_of_an_out_of_tree_runner_costs_one_row(session, flags):
    """#17 acceptance 5: a runner without its own worker, added by CONFORMANCE_EXTRA_RUNNERS,
    calls os._exit(3) on one case; in a default run (isolation is the default) that costs
    its one row, and every other row and every report is written (session checks both)."""
    res, rows = session(_faults("ExitsInProcess"), *flags)
    check(rows, ["fault.exit.process"], {
        "fault.exit.process": "worker 'isolated-fault' died (exit 3) while running "
                              "fault.exit.process on case boom"})
    assert rows["fine", "fault.exit.process"]["notes"] != [f"pid {os.getpid()}"]
    res.assert_outcomes(passed=3, failed=1)


def test_an_interrupted_session_still_writes_the_rows_so_far(session):
    # in process: isolated, every worker item's translate runs when collection ends
    # (evaluate.prefetch), so this runner's KeyboardInterrupt would come before any item
    res, rows = session(_faults("InterruptsInTranslate"), "--no-isolate")
    assert res.ret == pytest.ExitCode.INTERRUPTED
    assert sorted(rows) == [("boom", "toy.numpy"), ("fine", "fault.interrupt"),
                            ("fine", "toy.numpy")]


def test_a_row_that_cannot_be_built_from_the_case_is_a_bare_error_row(monkeypatch):
    """When even the row's figures raise (a broken case), the item still has a row: the
    reason names both faults, every figure keeps its default."""
    from conformance.compare.verdict import Outcome
    from conformance.run import evaluate as ev
    from conformance.runners import load

    from .helpers import make_case

    def broken(case):
        raise ArithmeticError("formula broke, on purpose")

    class Raises(load(TOY).__class__):
        def translate(self, case):
            raise ValueError("translate broke, on purpose")

    monkeypatch.setattr(ev, "formula_parameters", broken)
    row = ev.evaluate(make_case(id="c"), Raises())
    assert (row.case, row.runner, row.outcome) == ("c", "toy.numpy", Outcome.ERROR)
    assert row.reason.startswith("translate raised ValueError: translate broke, on purpose; "
                                 "building the row raised ArithmeticError: formula broke")
    assert (row.parameters_formula, row.rtol, row.weight_shapes, row.dtype) == \
        (0, 0.0, {}, "float32")
