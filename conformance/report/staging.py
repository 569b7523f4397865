"""Reports written whole: staged in a temporary folder beside the target, then swapped in.

Every report file of a run is written into a fresh staging folder next to the
output folder (same filesystem), then moved into place by renames alone, with
SIGINT and SIGTERM held back while they happen.  A full disk or an interrupt
while writing leaves the old reports untouched (and the staging folder removed);
the renames cannot run out of space.  A target that does not exist yet is the
staging folder renamed in one step.

The suite never deletes a file it did not write: besides replacing its own file
names, the only removals are a per-case page `cases/<id>.md` whose id has a row in
the folder's previous results.json (a page the suite wrote) and none in the new
one, and a row file `results/<runner>.json|csv` the previous results.json listed
and this run did not write.  A user's `cases/notes.md` stays.
"""
from __future__ import annotations

import os
import shutil
import signal
import tempfile
import threading
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator

from conformance.datafile import DataFileError, check_id, inside, read_json
from conformance.report.pages import PAGES_DIR
from conformance.report.results_files import read_results, row_file_names
from conformance.settings import SettingError

_DEFERRED = (signal.SIGINT, signal.SIGTERM)


def check_writable(out: Path, what: str) -> None:
    """Refuse, before any item runs, an output folder the reports could not be swapped
    into: it (or its parent) must be creatable and writable, and hold a staging folder."""
    out = Path(out).absolute()
    try:
        if out.exists() and not out.is_dir():
            raise SettingError(f"{what} {out}: exists and is not a folder")
        out.parent.mkdir(parents=True, exist_ok=True)
        os.rmdir(tempfile.mkdtemp(prefix=f".{out.name}.check-", dir=out.parent))
        if out.exists():
            fd, name = tempfile.mkstemp(prefix=".check-", dir=out)
            os.close(fd)
            os.unlink(name)
    except OSError as exc:
        raise SettingError(f"{what} {out}: not writable ({exc.strerror or exc}); choose "
                           "another folder before the run") from None


def _previous(results: Path) -> tuple[set[str], set[str]]:
    """(case ids with rows, row files listed) of a previous results.json: the pages and
    row files the suite wrote there (an unreadable or absent index: none, remove nothing)."""
    try:
        data = read_json(results, "a results.json")
        if not isinstance(data, dict):
            return set(), set()
        parts = set(row_file_names(results, data)) if "row_files" in data else set()
        rows = read_results(results).get("rows", [])
        return {check_id(results, r.get("case"), "rows[].case") for r in rows
                if isinstance(r, dict)}, parts
    except DataFileError:
        return set(), set()


def _files(stage: Path) -> list[Path]:
    return sorted(p.relative_to(stage) for p in stage.rglob("*") if p.is_file())


@contextmanager
def _signals_deferred() -> Iterator[None]:
    """SIGINT / SIGTERM held back (delivered after) while the renames run."""
    main = threading.current_thread() is threading.main_thread()
    if not main or not hasattr(signal, "pthread_sigmask"):
        yield
        return
    old = signal.pthread_sigmask(signal.SIG_BLOCK, _DEFERRED)
    try:
        yield
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, old)


def commit(stage: Path, out: Path) -> list[Path]:
    """Move every file of `stage` into `out` (renames only), remove the pages the suite
    wrote before that this run did not; returns the final paths."""
    names = _files(stage)
    new_pages = {n.stem for n in names if n.parent == Path(PAGES_DIR)}
    with _signals_deferred():
        if not out.exists():
            os.rename(stage, out)
            return [out / n for n in names]
        cases, parts = _previous(out / "results.json")
        stale = [f"{PAGES_DIR}/{cid}.md" for cid in sorted(cases - new_pages)]
        stale += [p for name in sorted(parts) for p in (name, name[:-len(".json")] + ".csv")
                  if Path(p) not in names]
        for name in names:
            target = inside(out, out / name)
            target.parent.mkdir(parents=True, exist_ok=True)
            os.replace(stage / name, target)
        for name in stale:
            old = inside(out, out / name)
            if old.is_file() and not old.is_symlink():
                old.unlink()
    return [out / n for n in names]


@contextmanager
def staged(out: Path | str, seed: tuple[str, ...] = (),
           fallback: Path | None = None) -> Iterator[Path]:
    """A staging folder beside `out` (files of `seed` copied from `out` first, or from the
    folder `fallback` where `out` has none); on a clean exit its files are committed into
    `out`; always removed afterwards."""
    out = Path(out).absolute()
    out.parent.mkdir(parents=True, exist_ok=True)
    stage = Path(tempfile.mkdtemp(prefix=f".{out.name}.staging-", dir=out.parent))
    try:
        umask = os.umask(0)
        os.umask(umask)
        os.chmod(stage, 0o777 & ~umask)  # mkdtemp's 0700 would stay on a new report folder
        for name in seed:
            for source in [out / name] + ([Path(fallback) / name] if fallback else []):
                if source.is_file() and not source.is_symlink():
                    shutil.copyfile(source, stage / name)
                    break
        yield stage
        commit(stage, out)
    finally:
        shutil.rmtree(stage, ignore_errors=True)
