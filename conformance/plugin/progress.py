"""The progress line of a long run: per runner family, the items answered as n/N with an
estimate of the time left, and the artefacts converted so far.

Why: a cold run spends minutes in conversions inside worker subprocesses, while pytest's
own line sits on one item.  The controller (the only process that prints) knows each
family's items from collection; the workers' answers and the conversions reach it as
events in files (conformance/progress.py), the in-process items as their reports.  While
no report has arrived for WAIT seconds, a ticker thread shows the line: on a terminal one
line rewritten in place (erased when the next report comes), in a log (CI) a plain line
every LOG_EVERY seconds.  `--no-progress` turns it off.
"""
from __future__ import annotations

import os
import re
import shutil
import tempfile
import threading
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from conformance.progress import PROGRESS_ENV, read_new

WAIT = 2.0  # seconds without a report before the line shows
TICK = 1.0  # seconds between two looks at the events (terminal)
LOG_EVERY = 30.0  # seconds between two plain lines (not a terminal)
_ITEM = re.compile(r"^(?P<file>[^:]+\.ya?ml)::(?P<case>.*)\[(?P<runner>[^\[\]]+)\]$")


def item_key(nodeid: str) -> tuple[str, str] | None:
    """(runner, case id) of a matrix item's node id (`cases/f.yaml::case[runner]`; a
    conventions item's case is "conventions"); None for any other item."""
    m = _ITEM.match(nodeid)
    return (m["runner"], m["case"]) if m else None


def family(runner: str) -> str:
    """A runner's family: its name up to the first dot (torch, keras, onnx, hf, ...)."""
    return runner.split(".", 1)[0]


def duration(seconds: float) -> str:
    return f"{seconds:.0f} s" if seconds < 90 else f"{seconds / 60:.0f} min"


@dataclass
class Board:
    """What the line says, from the planned items, the answers and the conversions."""

    start: float
    planned: dict[str, set[tuple[str, str]]] = field(default_factory=dict)  # family -> keys
    answered: dict[str, set[tuple[str, str]]] = field(default_factory=dict)
    converted: Counter = field(default_factory=Counter)  # cache namespace -> entries made

    def plan(self, nodeids) -> None:
        for nodeid in nodeids:
            key = item_key(nodeid)
            if key:
                self.planned.setdefault(family(key[0]), set()).add(key)

    def answer(self, runner: str, case: str) -> None:
        """A (runner, case) is answered (its worker replied, or its item reported)."""
        key = (runner, case)
        if key in self.planned.get(family(runner), ()):
            self.answered.setdefault(family(runner), set()).add(key)

    def event(self, event: dict[str, str]) -> None:
        if "a" in event and "c" in event:
            self.answer(event["a"], event["c"])
        elif "k" in event:
            self.converted[event["k"]] += 1

    def line(self, now: float) -> str:
        """`progress: hf 30/420 ETA 3 min | keras 12/300 ETA 6 min | ... | done: mlx,
        torch | converted 14 (onnx 9, openvino 5)`; families not started last."""
        elapsed = max(now - self.start, 1e-9)
        running, finished = [], []
        for fam in sorted(self.planned):
            total, n = len(self.planned[fam]), len(self.answered.get(fam, ()))
            if n >= total:
                finished.append(fam)
            elif n:
                running.append((0, f"{fam} {n}/{total} ETA "
                                f"{duration(elapsed * (total - n) / n)}"))
            else:
                running.append((1, f"{fam} 0/{total}"))
        parts = [text for _, text in sorted(running, key=lambda r: r[0])]
        if finished:
            parts.append("done: " + ", ".join(finished))
        if self.converted:
            each = ", ".join(f"{ns} {n}" for ns, n in sorted(self.converted.items()))
            parts.append(f"converted {sum(self.converted.values())} ({each})")
        return "progress: " + " | ".join(parts)


class Ticker:
    """The thread that reads the events and shows the line while the run waits."""

    def __init__(self, board: Board, folder: Path):
        self.board, self.folder = board, folder
        self.terminal, self.tty = None, False  # pytest's reporter, once the run starts
        self.screen = None  # the real stdout while items run under fd capture
        self.offsets: dict[str, int] = {}
        self.lock = threading.Lock()
        self.last_report = time.monotonic()
        self.last_line = 0.0
        self.shown = False  # a line is on the screen (terminal), to erase
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._loop, name="conformance-progress",
                                       daemon=True)

    def _loop(self) -> None:
        while not self.stop.wait(TICK):
            self.tick(time.monotonic())

    def tick(self, now: float) -> None:
        with self.lock:
            for event in read_new(self.folder, self.offsets):
                self.board.event(event)
            if now - self.last_report < WAIT or not self.board.planned:
                return
            if self.tty:
                self._rewrite(self.board.line(now))
            elif now - self.last_line >= LOG_EVERY:
                self.last_line = now
                self._raw("\n" + self.board.line(now) + "\n")

    def reported(self, runner: str, case: str) -> None:
        """A report arrived (the main thread): the run moves, the line goes."""
        with self.lock:
            self.board.answer(runner, case)
            self.last_report = time.monotonic()
            self._erase()

    def _width(self) -> int:
        return max(20, shutil.get_terminal_size((100, 20)).columns - 1)

    def _rewrite(self, line: str) -> None:
        if not self.shown:
            self._raw("\n")  # pytest's line of dots stays as it is
            self.shown = True
        self._raw("\r" + line[:self._width()].ljust(self._width()))

    def _erase(self) -> None:
        if self.shown:
            self._raw("\r" + " " * self._width() + "\r")
            self.shown = False

    def _raw(self, text: str) -> None:
        """Straight to the screen (the stdout pytest's fd capture put aside, else the
        terminal's file), so neither an item's captured output nor pytest's count of its
        line's width (it places the [ n%] by it) takes a line that is erased again."""
        if self.terminal is None:
            return
        out = self.screen or getattr(self.terminal._tw, "_file", None)
        if out is None:
            return
        try:
            out.write(text)
            out.flush()
        except (OSError, ValueError):  # a closed screen only loses the line
            pass

    def close(self) -> None:
        self.stop.set()
        with self.lock:
            self._erase()
            if self.screen is not None:
                self.screen.close()
                self.screen = None


def screen(config):
    """A file on the stdout that pytest's fd capture saved (its capture of fd 1 holds
    while an item runs, when the line shows); None when stdout is not fd-captured."""
    capman = config.pluginmanager.getplugin("capturemanager")
    saved = getattr(getattr(getattr(capman, "_global_capturing", None), "out", None),
                    "targetfd_save", None)
    if not isinstance(saved, int):
        return None
    try:
        return os.fdopen(os.dup(saved), "w", encoding="utf-8", errors="replace")
    except OSError:
        return None


class ProgressPlugin:
    """The hooks of the progress line, registered in the controller of a printing run."""

    def __init__(self, config, ticker: Ticker, saved: str | None):
        self.config, self.ticker, self.saved = config, ticker, saved

    def plan(self, nodeids) -> None:
        board = self.ticker.board
        if board.planned:
            return  # under xdist every worker collects the same items: the first list
        board.plan(nodeids)
        board.start = self.ticker.last_report = time.monotonic()
        terminal = self.config.pluginmanager.get_plugin("terminalreporter")
        if board.planned and terminal is not None:  # -p no:terminal: nothing prints
            self.ticker.terminal, self.ticker.tty = terminal, bool(terminal.isatty)
            self.ticker.screen = screen(self.config)
            self.ticker.thread.start()

    def pytest_collection_finish(self, session):
        self.plan([item.nodeid for item in session.items])

    @pytest.hookimpl(optionalhook=True)
    def pytest_xdist_node_collection_finished(self, node, ids):
        self.plan(ids)

    @pytest.hookimpl(tryfirst=True)  # the line goes before pytest writes the result
    def pytest_runtest_logreport(self, report):
        """A report of an item's call (or of a setup that skipped it)."""
        key = item_key(report.nodeid)
        if key and (report.when == "call" or (report.when == "setup" and not report.passed)):
            self.ticker.reported(*key)

    @pytest.hookimpl(tryfirst=True)  # before the summary prints
    def pytest_sessionfinish(self, session):
        self.ticker.close()

    def pytest_unconfigure(self, config):
        """Stop the ticker, remove the events and give the variable back."""
        self.ticker.close()
        shutil.rmtree(self.ticker.folder, ignore_errors=True)
        if self.saved is None:
            os.environ.pop(PROGRESS_ENV, None)
        else:
            os.environ[PROGRESS_ENV] = self.saved


def configure(config) -> None:
    """In the controller of a run that prints (not collect-only, not --no-progress): the
    events folder, its variable for every process started from here, and the hooks."""
    from conformance.plugin.parallel import is_worker

    if is_worker(config) or config.getoption("no_progress") or config.option.collectonly:
        return
    folder = Path(tempfile.mkdtemp(prefix="conformance-progress-"))
    saved = os.environ.get(PROGRESS_ENV)
    os.environ[PROGRESS_ENV] = str(folder)
    config.pluginmanager.register(ProgressPlugin(config, Ticker(Board(time.monotonic()),
                                                                folder), saved),
                                  "conformance-progress")
