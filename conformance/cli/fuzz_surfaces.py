"""The fuzz driver shared by every surface the suite reads: one document at a time, each
judged four ways.

    python -m conformance.cli.fuzz --format all --count 10000    # cli/fuzz.py's command

A surface is a function `(work, n, rng) -> (outcome, label, detail)` that makes one
mutated document inside `work` and runs it through the suite's own reader (or CLI
command, in this process).  Its outcome is one of

- ACCEPTED: the reader took it, and what it read is what the document says;
- CLEAN: the suite's own error type, one bounded line naming the file;
- TRACEBACK: any other exception (or an error message that is not one clean line);
- SILENT: the reader took it but changed what it says (an outcome, a pinned value, a
  row dropped, forged bytes handed out as a cache hit): a verdict changed without an
  error.

And after each document the folders around `work` are compared with a snapshot taken
before it: anything created, removed or changed outside `work` is an OUTSIDE write.
`work` sits two levels below the temporary root, so an id like '../../x' written by
mistake lands inside the root, where the snapshot sees it.
"""
from __future__ import annotations

import contextlib
import io
import os
import random
import resource
import tempfile
import time
import traceback
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

ACCEPTED, CLEAN, TRACEBACK, SILENT = "accepted", "clean", "traceback", "silent"
MAX_ERROR = 1200  # characters of a clean error message
EXAMPLES = 10  # of each kind of failure, kept for the report


@dataclass
class Tally:
    """What one surface's run found (the figures fuzz.main prints)."""

    surface: str
    tried: int = 0
    counts: Counter = field(default_factory=Counter)
    operators: Counter = field(default_factory=Counter)
    failures: list = field(default_factory=list)  # (n, kind, label, detail)
    outside: int = 0
    worst: tuple = (0.0, "")

    def as_dict(self, rss_growth: int, seconds: float) -> dict:
        unclean = self.failures
        return {"tried": self.tried, "accepted": self.counts[ACCEPTED],
                "clean": self.counts[CLEAN], "tracebacks": self.counts[TRACEBACK],
                "silent": self.counts[SILENT], "outside": self.outside,
                "unclean": self.counts[TRACEBACK] + self.counts[SILENT] + self.outside,
                "unclean_examples": [(n, label, f"{kind}: {d}", b"") for n, kind, label, d
                                     in unclean[:EXAMPLES]],
                "max_seconds": self.worst[0], "slowest": self.worst[1], "over_1s": [],
                "peak_traced_bytes": 0, "over_200mb": [], "rss_growth_bytes": rss_growth,
                "seconds": seconds, "operators": dict(self.operators)}


def snapshot(root: Path, skip: Path) -> dict:
    """Every path under `root` but inside `skip`: (kind, size, mtime) by path; symlinks
    are recorded, never followed."""
    seen = {}
    for top, dirs, files in os.walk(root, followlinks=False):
        if Path(top) == skip:
            dirs[:] = []
            continue
        for name in dirs + files:
            path = Path(top) / name
            if path == skip:
                continue
            st = os.lstat(path)
            seen[str(path)] = (st.st_mode, st.st_size, st.st_mtime_ns)
    return seen


def clean_message(text: str, path: Path | str) -> bool:
    """One line, bounded, naming the file: what the suite promises for a bad file."""
    text = text.strip()
    return bool(text) and "\n" not in text and len(text) <= MAX_ERROR \
        and "Traceback" not in text and str(path) in text


def cli_call(command: str, **options) -> tuple[int, str]:
    """The CLI command `command` (cli/reports.py: report, merge) called in this process
    with `options` as its parsed arguments, and the error handling __main__ gives it (a
    DataFileError or SettingError is one line, exit 1): (exit code, stderr).  Any other
    exception propagates: it is a traceback."""
    from argparse import Namespace

    from conformance.cli import reports
    from conformance.datafile import DataFileError
    from conformance.settings import SettingError

    err = io.StringIO()
    with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(err):
        try:
            code = getattr(reports, command)(Namespace(**options))
        except (DataFileError, SettingError) as exc:
            print(f"{command}: {exc}", file=err)
            code = 1
    return int(code or 0), err.getvalue()


Surface = Callable[[Path, int, random.Random], tuple[str, str, str]]


def run_surface(name: str, surface: Surface, count: int, seed: int) -> dict:
    """`count` documents of one surface, each in a fresh folder `work/<n>` (module doc)."""
    rng, tally = random.Random(seed), Tally(name)
    rss0 = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    start = time.perf_counter()
    old_figures = os.environ.get("CONFORMANCE_FIGURES")
    os.environ["CONFORMANCE_FIGURES"] = "0"  # no plots: the fuzz judges data, not pictures
    try:
        with tempfile.TemporaryDirectory(prefix=f"{name}-fuzz-") as tmp:
            work = Path(tmp) / "a" / "b" / "work"
            work.mkdir(parents=True)
            before = snapshot(Path(tmp), work)
            for n in range(count):
                _one(tally, surface, work, n, rng)
                after = snapshot(Path(tmp), work)
                if after != before:
                    tally.outside += 1
                    new = sorted(set(after) ^ set(before)) or ["(changed)"]
                    tally.failures.append((n, "outside", "", f"wrote {new[:3]}"))
                    before = after
    finally:
        if old_figures is None:
            os.environ.pop("CONFORMANCE_FIGURES", None)
        else:
            os.environ["CONFORMANCE_FIGURES"] = old_figures
    rss = (resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - rss0) * 1024
    return tally.as_dict(rss, time.perf_counter() - start)


def _one(tally: Tally, surface: Surface, work: Path, n: int, rng: random.Random) -> None:
    folder = work / str(n)
    folder.mkdir()
    start = time.perf_counter()
    try:
        outcome, label, detail = surface(folder, n, rng)
    except Exception as exc:  # noqa: BLE001 - any exception the surface lets out counts
        where = traceback.extract_tb(exc.__traceback__)[-1]
        outcome, label, detail = TRACEBACK, "?", (f"{type(exc).__name__}: {str(exc)[:200]} "
                                                  f"(at {where.filename}:{where.lineno})")
    tally.worst = max(tally.worst, (time.perf_counter() - start, label))
    tally.tried += 1
    tally.counts[outcome] += 1
    tally.operators.update(label.split("+"))
    if outcome in (TRACEBACK, SILENT):
        tally.failures.append((n, outcome, label, detail[:300]))
    _remove(folder)


def _remove(folder: Path) -> None:
    """The document's folder, removed without following a link (FIFOs, links planted)."""
    for top, dirs, files in os.walk(folder, topdown=False, followlinks=False):
        for name in files + dirs:
            path = Path(top) / name
            if path.is_dir() and not path.is_symlink():
                path.rmdir()
            else:
                path.unlink()
    folder.rmdir()
