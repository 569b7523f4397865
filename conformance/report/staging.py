"""Reports written whole or not at all: a new tree staged beside the target, then swapped.

Every report file of a run is written into a fresh staging folder next to the output
folder (same filesystem).  Before the swap the staging folder is made the *whole* new
folder: the files of the old folder that this run neither replaces nor retires are
hard-linked (or copied) into it.  The swap is then one atomic exchange of the two
folders (Linux renameat2 RENAME_EXCHANGE), or, where the filesystem has none, two
renames (the old folder aside, the new one in).  While the swap runs SIGINT, SIGTERM
and SIGHUP are held: blocked in the main thread (signal.pthread_sigmask) and, because a
signal the kernel hands to another thread still reaches Python's handlers in the main
thread, caught by handlers that only note it; a noted signal is delivered again, to the
handler that was there before, once the staging folder is gone.  A signal before the
swap interrupts the writing (the old folder stays as it was), one after it finds the new
folder in place.  The staging folder is removed on every exit (finally, atexit, and the
signal path above); only SIGKILL can leave it behind, never a half-swapped folder.

Nothing is written through a symbolic link: the output folder and every path under it
is lstat-ed before the run and again before the swap, and a link (a `results/` pointing
elsewhere, a page, the folder itself) or anything that is not a plain file or folder is
refused with one line naming it.

The suite never deletes a file it did not write: besides replacing its own file names,
the only files left out of the new folder are a per-case page `cases/<id>.md` whose id
has a row in the folder's previous results.json (a page the suite wrote) and none in the
new one, and a row file `results/<runner>.json|csv` the previous results.json listed and
this run did not write.  A user's `cases/notes.md` stays.
"""
from __future__ import annotations

import atexit
import ctypes
import errno
import functools
import os
import shutil
import signal
import stat
import sys
import tempfile
import threading
import time
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator

from conformance.datafile import DataFileError, check_id, read_json
from conformance.report.pages import PAGES_DIR
from conformance.report.results_files import read_results, row_file_names
from conformance.settings import SettingError

HELD_SIGNALS = tuple(getattr(signal, n) for n in ("SIGINT", "SIGTERM", "SIGHUP")
                     if hasattr(signal, n))
# tests only: seconds slept inside the swap window, signals held (tests/test_report_swap.py)
SWAP_PAUSE_ENV = "CONFORMANCE_TEST_SWAP_PAUSE"
_AT_FDCWD, _RENAME_EXCHANGE = -100, 2


def check_writable(out: Path, what: str) -> None:
    """Refuse, before any item runs, an output folder the reports could not be swapped
    into: it (or its parent) must be creatable and writable, and hold a staging folder."""
    out = Path(out).absolute()
    try:
        refuse_links(out)
    except DataFileError as exc:
        raise SettingError(f"{what} {exc}") from None
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


def refuse_links(out: Path) -> None:
    """lstat `out` and every path under it: a symbolic link (the folder itself, a
    `results/` pointing elsewhere, a page) or anything but a plain file or folder is
    refused, naming it; the reports are never written or swapped through one."""
    out = Path(out)
    try:
        top = os.lstat(out)
    except OSError:
        return  # absent, or under a file: check_writable names it
    if stat.S_ISLNK(top.st_mode):
        raise DataFileError(out, "is a symbolic link; reports are never written through "
                            "one: choose the folder it points to, or another")
    if not stat.S_ISDIR(top.st_mode):
        return  # check_writable names a file in its place
    for root, dirs, files in os.walk(out, followlinks=False):
        for name in dirs + files:
            path = Path(root) / name
            mode = os.lstat(path).st_mode
            if stat.S_ISLNK(mode):
                raise DataFileError(path, "is a symbolic link inside the report folder; "
                                    "refused (nothing is written through a link): remove it")
            if not (stat.S_ISDIR(mode) or stat.S_ISREG(mode)):
                raise DataFileError(path, "is not a plain file or folder inside the report "
                                    "folder; refused: remove it")


def _files(stage: Path) -> list[Path]:
    return sorted(p.relative_to(stage) for p in stage.rglob("*") if p.is_file())


class ReportsInterrupted(BaseException):
    """A held signal whose own handler returned: the reports were not (or were wholly)
    swapped, and the caller must not go on as if its block had finished."""


class _Signals:
    """SIGINT / SIGTERM / SIGHUP while reports are staged (main thread only): outside the
    swap a signal interrupts the writing (ReportsInterrupted, so every `finally` runs);
    inside it the signal is only noted.  `release` puts the old handlers back and delivers
    what was noted to them."""

    def __init__(self) -> None:
        self.active = (threading.current_thread() is threading.main_thread()
                       and hasattr(signal, "pthread_sigmask"))
        self.holding, self.noted, self.old = False, [], {}

    def _note(self, signum, frame) -> None:
        self.noted.append(signum)
        if not self.holding:
            raise ReportsInterrupted(f"interrupted by signal {signum}; reports not written")

    def install(self) -> None:
        if self.active:
            self.old = {s: signal.signal(s, self._note) for s in HELD_SIGNALS}

    @contextmanager
    def held(self) -> Iterator[None]:
        """The swap window: signals blocked in this thread and, from others, noted."""
        self.holding = True
        mask = signal.pthread_sigmask(signal.SIG_BLOCK, HELD_SIGNALS) if self.active else None
        try:
            yield
        finally:
            if mask is not None:
                signal.pthread_sigmask(signal.SIG_SETMASK, mask)
            self.holding = False

    def release(self) -> None:
        for signum, handler in self.old.items():
            signal.signal(signum, handler)
        self.old = {}
        for signum in dict.fromkeys(self.noted):
            signal.raise_signal(signum)  # the old handler's turn: SIG_DFL ends the process


def _exchange(a: Path, b: Path) -> bool:
    """Swap two folders in one step (renameat2 RENAME_EXCHANGE); False where the system
    or the filesystem has no such call (then two renames do it)."""
    if not sys.platform.startswith("linux"):
        return False
    try:
        call = ctypes.CDLL(None, use_errno=True).renameat2
    except (OSError, AttributeError):
        return False
    call.argtypes = [ctypes.c_int, ctypes.c_char_p, ctypes.c_int, ctypes.c_char_p,
                     ctypes.c_uint]
    if call(_AT_FDCWD, os.fsencode(a), _AT_FDCWD, os.fsencode(b), _RENAME_EXCHANGE) == 0:
        return True
    err = ctypes.get_errno()
    if err in (errno.ENOSYS, errno.EINVAL, errno.EOPNOTSUPP, errno.ENOTSUP):
        return False
    raise OSError(err, os.strerror(err), str(b))


def _pause() -> None:
    seconds = os.environ.get(SWAP_PAUSE_ENV)
    if seconds:
        time.sleep(float(seconds))


def _carry_over(stage: Path, out: Path, leave: set[Path]) -> None:
    """The files of `out` this run neither wrote nor retires, hard-linked (else copied)
    into `stage`, each folder with its mode: `stage` becomes the whole new folder."""
    os.chmod(stage, stat.S_IMODE(os.lstat(out).st_mode))
    for root, dirs, files in os.walk(out, followlinks=False):
        rel = Path(root).relative_to(out)
        for name in dirs:
            (stage / rel / name).mkdir(exist_ok=True)
            os.chmod(stage / rel / name, stat.S_IMODE(os.lstat(Path(root) / name).st_mode))
        for name in files:
            if rel / name in leave or (stage / rel / name).exists():
                continue
            try:
                os.link(Path(root) / name, stage / rel / name, follow_symlinks=False)
            except OSError:
                shutil.copy2(Path(root) / name, stage / rel / name, follow_symlinks=False)


def _swap(stage: Path, out: Path) -> Path | None:
    """`stage` in place of `out`; returns where the old folder now is (to remove)."""
    if not os.path.lexists(out):
        _pause()
        os.rename(stage, out)
        return None
    if _exchange(stage, out):
        _pause()  # after the exchange: a signal here must still find the new folder whole
        return stage
    aside = stage.with_name(stage.name + ".old")
    os.rename(out, aside)
    _pause()  # between the two renames: the window the held signals protect
    try:
        os.rename(stage, out)
    except OSError:
        os.rename(aside, out)
        raise
    return aside


def commit(stage: Path, out: Path, signals: _Signals | None = None) -> list[Path]:
    """Make `stage` the whole new `out` (the old files kept, the pages and row files the
    suite wrote before and this run did not left out) and swap it in; returns the final
    paths of this run's files."""
    names = _files(stage)
    refuse_links(out)
    if os.path.isdir(out):
        new_pages = {n.stem for n in names if n.parent == Path(PAGES_DIR)}
        cases, parts = _previous(out / "results.json")
        stale = {Path(f"{PAGES_DIR}/{cid}.md") for cid in cases - new_pages}
        stale |= {Path(p) for name in parts
                  for p in (name, name[:-len(".json")] + ".csv")} - set(names)
        _carry_over(stage, out, stale)
    signals = signals or _Signals()
    with signals.held():
        old = _swap(stage, out)
    if old is not None:
        shutil.rmtree(old, ignore_errors=True)
    return [out / n for n in names]


def _remove(path: Path) -> None:
    shutil.rmtree(path, ignore_errors=True)
    shutil.rmtree(path.with_name(path.name + ".old"), ignore_errors=True)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # another user's process: alive
        return True
    return True


def remove_stale(out: Path) -> list[Path]:
    """Staging folders beside `out` that a killed writer left (SIGKILL gives no chance to
    clean up): each names its writer's pid, and one whose writer is gone is removed
    (a plain folder only, never through a link).  Returns what was removed."""
    gone = []
    for path in out.parent.glob(f".{out.name}.staging-*"):
        pid = path.name[len(f".{out.name}.staging-"):].split("-", 1)[0]
        if (pid.isdigit() and not _alive(int(pid)) and path.is_dir()
                and not path.is_symlink()):
            _remove(path)
            gone.append(path)
    return gone


@contextmanager
def staged(out: Path | str, seed: tuple[str, ...] = (),
           fallback: Path | None = None) -> Iterator[Path]:
    """A staging folder beside `out` (files of `seed` copied from `out` first, or from the
    folder `fallback` where `out` has none); on a clean exit it becomes `out` whole
    (commit); always removed afterwards, a held signal delivered after that."""
    out = Path(out).absolute()
    refuse_links(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    remove_stale(out)
    stage = Path(tempfile.mkdtemp(prefix=f".{out.name}.staging-{os.getpid()}-",
                                  dir=out.parent))
    cleanup = functools.partial(_remove, stage)
    atexit.register(cleanup)
    signals = _Signals()
    interrupted = False
    try:
        signals.install()
        umask = os.umask(0)
        os.umask(umask)
        os.chmod(stage, 0o777 & ~umask)  # mkdtemp's 0700 would stay on a new report folder
        for name in seed:
            for source in [out / name] + ([Path(fallback) / name] if fallback else []):
                if os.path.isfile(source) and not os.path.islink(source):
                    shutil.copyfile(source, stage / name)
                    break
        yield stage
        commit(stage, out, signals)
    except ReportsInterrupted:
        interrupted = True
    finally:
        cleanup()
        atexit.unregister(cleanup)
        signals.release()
    if interrupted:  # the old handler returned: the caller's block did not finish
        raise ReportsInterrupted("reports interrupted by a signal")
