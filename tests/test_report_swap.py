"""Reports whole or not at all (report/staging.py): a SIGTERM while the new reports are
written or swapped in leaves the folder wholly old or wholly new and no staging folder;
nothing is written through a symbolic link in or as the report folder."""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from conformance.datafile import DataFileError
from conformance.paths import ROOT
from conformance.report import staging
from conformance.settings import SettingError

# Writes 20 new files (and results/ row files) into `out` through staged(); an extra
# thread is running, as the suite's are, so a process-directed signal can reach a thread
# that never blocked it.  argv: out, "exchange" | "renames", "swap" | "write" | "unheld".
WRITER = textwrap.dedent("""
    import sys, threading, time
    from pathlib import Path
    from conformance.report import staging
    out, mode, phase = Path(sys.argv[1]), sys.argv[2], sys.argv[3]
    if mode == "renames":
        staging._exchange = lambda a, b: False
    if phase == "unheld":  # the defect: nothing catches a signal another thread receives
        staging._Signals.install = lambda self: None
    threading.Thread(target=time.sleep, args=(60,), daemon=True).start()
    with staging.staged(out) as stage:
        (stage / "results").mkdir()
        for n in range(20):
            (stage / f"f{n}.md").write_text("new")
            (stage / "results" / f"r{n}.json").write_text("new")
        if phase == "write":
            (stage / "WRITING").write_text("")
            time.sleep(60)
    print("DONE")
""")

OLD = {"f0.md": "old", "f1.md": "old", "results/r0.json": "old", "cases/notes.md": "mine"}
NEW = {**{f"f{n}.md": "new" for n in range(20)},
       **{f"results/r{n}.json": "new" for n in range(20)}, "cases/notes.md": "mine"}


def _tree(folder: Path) -> dict[str, str]:
    return {p.relative_to(folder).as_posix(): p.read_text() for p in folder.rglob("*")
            if p.is_file()}


def _plant_old(out: Path) -> None:
    for name, text in OLD.items():
        (out / name).parent.mkdir(parents=True, exist_ok=True)
        (out / name).write_text(text)


def _in_window(tmp: Path, out: Path, mode: str, phase: str) -> bool:
    stages = [p for p in tmp.iterdir() if ".staging-" in p.name]
    if phase == "write":
        return any((p / "WRITING").exists() for p in stages)
    if mode == "exchange":  # the pause follows the exchange: the new folder is in place
        return (out / "f19.md").exists() and bool(stages)
    return any(p.name.endswith(".old") for p in stages)  # between the two renames


def _killed_at(tmp: Path, mode: str, phase: str) -> subprocess.CompletedProcess:
    out = tmp / "reports"
    _plant_old(out)
    env = {**os.environ, "PYTHONPATH": str(ROOT),
           staging.SWAP_PAUSE_ENV: "" if phase == "write" else "2"}
    proc = subprocess.Popen([sys.executable, "-c", WRITER, str(out), mode, phase],
                            cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True)
    deadline = time.monotonic() + 60
    while not _in_window(tmp, out, mode, phase):
        assert proc.poll() is None, proc.communicate()
        assert time.monotonic() < deadline, "the writer never reached the window"
        time.sleep(0.02)
    proc.send_signal(signal.SIGTERM)
    stdout, stderr = proc.communicate(timeout=60)
    return subprocess.CompletedProcess(proc.args, proc.returncode, stdout, stderr)


@pytest.mark.parametrize("mode", ["exchange", "renames"])
@pytest.mark.parametrize("phase", ["write", "swap"])
def test_a_sigterm_leaves_the_folder_wholly_old_or_wholly_new(tmp_path, mode, phase):
    done = _killed_at(tmp_path, mode, phase)
    assert done.returncode == -signal.SIGTERM, done.stderr  # delivered, after the cleanup
    assert "DONE" not in done.stdout
    assert _tree(tmp_path / "reports") == (OLD if phase == "write" else NEW)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["reports"]  # no staging folder


def test_the_sigterm_test_sees_a_folder_left_half_swapped(tmp_path):
    """The defect planted: with no handler holding the signal, a SIGTERM the kernel hands
    to the extra thread ends the process between the two renames; the checks above fail."""
    done = _killed_at(tmp_path, "renames", "unheld")
    assert done.returncode == -signal.SIGTERM
    assert not (tmp_path / "reports").exists()  # neither old nor new
    assert any(".staging-" in p.name for p in tmp_path.iterdir())


@pytest.mark.parametrize("mode", ["exchange", "renames"])
def test_a_swap_keeps_the_users_files_and_retires_nothing_else(tmp_path, monkeypatch, mode):
    if mode == "renames":
        monkeypatch.setattr(staging, "_exchange", lambda a, b: False)
    out = tmp_path / "reports"
    _plant_old(out)
    with staging.staged(out) as stage:
        (stage / "f1.md").write_text("new")
    assert _tree(out) == {**OLD, "f1.md": "new"}
    assert sorted(p.name for p in tmp_path.iterdir()) == ["reports"]


def _outside_link(tmp: Path, where: str) -> tuple[Path, Path]:
    out, outside = tmp / "reports", tmp / "elsewhere"
    outside.mkdir()
    (out / "cases").mkdir(parents=True)
    (out / "index.md").write_text("old")
    if where == "results":
        (out / "results").symlink_to(outside, target_is_directory=True)
    elif where == "page":
        (out / "cases" / "a.md").symlink_to(outside / "a.md")
    else:  # the report folder itself
        os.rename(out, tmp / "real")
        out.symlink_to(tmp / "real", target_is_directory=True)
    return out, outside


@pytest.mark.parametrize("where", ["results", "page", "folder"])
def test_a_symlink_in_or_as_the_report_folder_is_refused_and_nothing_written(tmp_path, where):
    out, outside = _outside_link(tmp_path, where)
    before = sorted(p.name for p in tmp_path.iterdir())
    with pytest.raises(DataFileError, match="symbolic link") as refused:
        with staging.staged(out) as stage:
            (stage / "results").mkdir()
            (stage / "results" / "r.json").write_text("new")
            (stage / "cases").mkdir()
            (stage / "cases" / "a.md").write_text("new")
    assert "\n" not in str(refused.value)
    named = {"results": "results", "page": "a.md", "folder": "reports"}[where]
    assert Path(str(refused.value).split(":")[0]).name == named
    assert list(outside.iterdir()) == []
    assert sorted(p.name for p in tmp_path.iterdir()) == before
    with pytest.raises(SettingError, match="symbolic link"):
        staging.check_writable(out, "--report-dir")


def test_a_link_planted_during_the_run_is_refused_before_the_swap(tmp_path):
    """A results/ link made while the reports are written (after the first check) is
    found by the second one, before anything moves."""
    out = tmp_path / "reports"
    _plant_old(out)
    outside = tmp_path / "elsewhere"
    outside.mkdir()
    with pytest.raises(DataFileError, match="symbolic link"):
        with staging.staged(out) as stage:
            (stage / "f5.md").write_text("new")
            (out / "cases" / "link.md").symlink_to(outside / "x.md")
    assert list(outside.iterdir()) == []
    (out / "cases" / "link.md").unlink()
    assert _tree(out) == OLD
    assert sorted(p.name for p in tmp_path.iterdir()) == ["elsewhere", "reports"]


def test_a_staging_folder_a_killed_writer_left_is_removed_by_the_next_run(tmp_path):
    """SIGKILL leaves the staging folder behind (no handler runs): the next writer removes
    a staging folder whose pid is gone, and keeps one whose writer still runs."""
    import os
    import subprocess
    import sys

    from conformance.report.staging import staged

    out = tmp_path / "reports"
    out.mkdir()
    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"],
                          capture_output=True, text=True).stdout.strip()
    left = tmp_path / f".reports.staging-{dead}-abc"
    live = tmp_path / f".reports.staging-{os.getpid()}-xyz"
    left.mkdir()
    live.mkdir()
    (left / "index.md").write_text("half")
    with staged(out) as stage:
        (stage / "index.md").write_text("new")
    assert not left.exists() and live.exists()
    assert (out / "index.md").read_text() == "new"
