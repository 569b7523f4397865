"""The progress line of a long run (plugin/progress.py, conformance/progress.py): n/N per
runner family from the planned items and the answers, the time left, the conversions; the
events files the workers write; when the line shows and that it goes again."""
from __future__ import annotations

import io
import json

from conformance import progress
from conformance.cache import BytesCache
from conformance.plugin.progress import LOG_EVERY, WAIT, Board, Ticker, item_key
from conformance.runners import EXTRA_ENV

pytest_plugins = ["pytester"]

IDS = [f"cases/c{i}.yaml::c{i}[torch.sdpa]" for i in range(4)] + [
    f"cases/c{i}.yaml::c{i}[onnx.torch-export]" for i in range(6)] + [
    "expectations/torch.sdpa.yaml::conventions[torch.sdpa]", "tests/test_x.py::test_y[a.b]"]


def test_item_keys_are_read_from_matrix_and_conventions_ids_only():
    assert item_key("cases/a.yaml::case-a[keras.jax]") == ("keras.jax", "case-a")
    assert item_key("expectations/m.yaml::conventions[mlx.mha]") == ("mlx.mha", "conventions")
    assert item_key("tests/test_x.py::test_y[a.b]") is None
    assert item_key("cases/a.yaml::no-runner") is None


def test_the_line_counts_each_family_and_estimates_the_time_left():
    board = Board(start=100.0)
    board.plan(IDS)
    assert {f: len(k) for f, k in board.planned.items()} == {"torch": 5, "onnx": 6}
    for i in range(2):
        board.answer("onnx.torch-export", f"c{i}")
    board.answer("onnx.torch-export", "c0")  # the same item twice counts once
    board.answer("onnx.torch-export", "not-planned")  # nor does an item not selected
    board.event({"k": "onnx"})
    board.event({"k": "onnx"})
    board.event({"k": "openvino"})
    line = board.line(now=130.0)  # 2 of 6 in 30 s: 4 more take 60 s
    assert line == ("progress: onnx 2/6 ETA 60 s | torch 0/5 | converted 3 (onnx 2, "
                    "openvino 1)")
    for i in range(4):
        board.answer("torch.sdpa", f"c{i}")
    board.answer("torch.sdpa", "conventions")
    assert "done: torch" in board.line(now=130.0) and "torch 5/5" not in board.line(130.0)
    assert "ETA 10 min" in Board(start=0.0, planned={"hf": {("hf.x", str(i))
                                                           for i in range(11)}},
                                 answered={"hf": {("hf.x", "0")}}).line(now=60.0)


def test_events_are_read_as_whole_lines_and_bad_ones_skipped(tmp_path, monkeypatch):
    monkeypatch.setenv(progress.PROGRESS_ENV, str(tmp_path))
    progress.record(a="torch.sdpa", c="case-1")
    with open(tmp_path / "999.jsonl", "a") as fh:
        fh.write('not json\n[1, 2]\n{"a": 3}\n' + json.dumps({"k": "x" * 2000}) + "\n")
        fh.write('{"k": "onn')  # a line being written: read when it is whole
    offsets: dict[str, int] = {}
    assert progress.read_new(tmp_path, offsets) == [{"a": "torch.sdpa", "c": "case-1"}]
    assert progress.read_new(tmp_path, offsets) == []
    with open(tmp_path / "999.jsonl", "a") as fh:
        fh.write('x"}\n')
    assert progress.read_new(tmp_path, offsets) == [{"k": "onnx"}]


def test_a_conversion_stored_in_the_cache_is_an_event(tmp_path, monkeypatch):
    events = tmp_path / "events"
    events.mkdir()
    monkeypatch.setenv("CONFORMANCE_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setenv(progress.PROGRESS_ENV, str(events))
    cache = BytesCache("onnx", ".onnx")
    cache.get_or_make("k1", lambda: b"model")
    cache.get_or_make("k1", lambda: b"model")  # a hit converts nothing
    assert progress.read_new(events, {}) == [{"k": "onnx"}]
    monkeypatch.delenv(progress.PROGRESS_ENV)
    cache.put("k2", b"other")  # no folder: nothing is written anywhere
    assert len(progress.read_new(events, {})) == 1


class FakeTerminal:
    isatty = True


def _ticker(tmp_path, tty: bool) -> tuple[Ticker, io.StringIO]:
    board = Board(start=0.0)
    board.plan(IDS)
    ticker = Ticker(board, tmp_path)
    ticker.terminal, ticker.tty, ticker.screen = FakeTerminal(), tty, io.StringIO()
    return ticker, ticker.screen


def test_on_a_terminal_the_line_shows_while_the_run_waits_and_goes_with_the_next_report(
        tmp_path, monkeypatch):
    monkeypatch.setenv(progress.PROGRESS_ENV, str(tmp_path))
    ticker, screen = _ticker(tmp_path, tty=True)
    ticker.tick(ticker.last_report + WAIT / 2)
    assert screen.getvalue() == ""  # the run moves: no line
    progress.record(a="onnx.torch-export", c="c3")  # a worker answered meanwhile
    ticker.tick(ticker.last_report + WAIT + 1)
    ticker.tick(ticker.last_report + WAIT + 2)
    shown = screen.getvalue()
    assert shown.startswith("\n\rprogress: onnx 1/6") and shown.count("\rprogress:") == 2
    ticker.reported("torch.sdpa", "c0")
    assert screen.getvalue().endswith("\r" + " " * ticker._width() + "\r")
    assert ticker.board.answered["torch"] == {("torch.sdpa", "c0")}
    ticker.reported("torch.sdpa", "c1")  # nothing shown: nothing to erase
    assert screen.getvalue().count(" " * ticker._width()) == 1


def test_in_a_log_the_line_is_a_plain_line_every_so_often(tmp_path):
    ticker, screen = _ticker(tmp_path, tty=False)
    start = ticker.last_report
    ticker.tick(start + WAIT + 1)
    ticker.tick(start + WAIT + 2)  # within LOG_EVERY: not again
    ticker.tick(start + WAIT + 2 + LOG_EVERY)  # past LOG_EVERY whatever float rounding
    lines = [line for line in screen.getvalue().split("\n") if line]
    assert lines == ["progress: onnx 0/6 | torch 0/5"] * 2 and "\r" not in screen.getvalue()
    ticker.reported("onnx.torch-export", "c0")  # a log has nothing to erase
    assert "\r" not in screen.getvalue()


SLOW_TOY = """
import time

from conformance.contract.runner import Observation, Runner, Translation
from conformance.oracle.reference import attention, formula_parameters


class SlowToy(Runner):
    name, framework, system = "slowtoy.numpy", "slowtoy", "slowtoy.Attention"
    description = "the float64 reference, slow on one case (a conversion's wait)"

    def translate(self, case):
        return Translation("slowtoy.Attention()")

    def run(self, case, translation, data):
        if case.id == "slow":
            time.sleep(4)
        return Observation(output=attention(case, data).output,
                           parameters=formula_parameters(case))
"""


def test_a_run_that_waits_prints_the_line_in_its_log(pytester, monkeypatch):
    """The real path: the plugin plans from collection, the item blocks on the slow run
    under fd capture, and the log (not a terminal) gets a plain line."""
    (pytester.path / "slowtoy.py").write_text(SLOW_TOY)
    (pytester.path / "cases").mkdir()
    for name in ("fast", "slow"):
        (pytester.path / "cases" / f"{name}.yaml").write_text(
            f"id: {name}\nattention: {{num_heads: 2, query_features: 8}}\n"
            "inputs: {batch: 1, query_len: 3, key_len: 4}\n")
    (pytester.path / "expectations").mkdir()
    monkeypatch.setenv(EXTRA_ENV, "slowtoy:SlowToy")
    monkeypatch.setenv("PYTHONPATH", str(pytester.path))
    got = pytester.runpytest_subprocess(
        "-p", "conformance.plugin", "-p", "no:cacheprovider", "--runner", "slowtoy.numpy",
        "--cases-dir", str(pytester.path / "cases"), "-k", "not conventions",
        f"--expectations-dir={pytester.path / 'expectations'}",
        f"--report-dir={pytester.path / 'reports'}")
    lines = [line for line in got.outlines if line.startswith("progress:")]
    assert lines and lines[0].startswith("progress: slowtoy "), got.outlines
    assert "/2" in lines[0]  # the two selected items of the family
