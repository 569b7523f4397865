"""A process a runner starts ends with its worker: when the suite closes the worker, and
when the suite is killed (the worker reads the end of its pipe and kills its process
group).  Each test plants a runner whose call starts a process and leaves it running."""
from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from conformance.paths import ROOT

SPAWNER = '''
import subprocess, sys
from conformance.contract.runner import Observation, Runner, Translation, WorkerSpec


def spawn():
    """A process the runner starts and leaves running."""
    return subprocess.Popen([sys.executable, "-c", "import time; time.sleep(300)"]).pid


class Spawner(Runner):
    name, framework = "spawner.worker", "fake"
    worker = WorkerSpec("spawner", {})

    def translate(self, case):
        return Translation("spawn()")

    def run(self, case, translation, data):
        raise RuntimeError("not run")
'''


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().split()[2] != "Z"
    except OSError:
        return False


@pytest.mark.skipif(not Path("/proc").is_dir(), reason="reads /proc to see the process")
def test_a_process_a_runner_starts_ends_with_its_worker(tmp_path, monkeypatch):
    from conformance.run import workers
    from conformance.runners import load

    (tmp_path / "spawnrunner.py").write_text(SPAWNER)
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join([str(tmp_path), str(ROOT)]))
    runner = load("spawnrunner:Spawner")
    pid = workers.call_in_worker(runner, "spawnrunner:spawn")
    try:
        assert _alive(pid)
        workers.close(runner.worker.key)
        for _ in range(50):
            if not _alive(pid):
                break
            time.sleep(0.1)
        assert not _alive(pid), "the runner's process outlived its worker"
    finally:
        if _alive(pid):
            os.kill(pid, 9)


KILLED_SUITE = '''
import os, signal, sys
sys.path[:0] = [sys.argv[1]]
from conformance.run import workers
from conformance.runners import load

pid = workers.call_in_worker(load("spawnrunner:Spawner"), "spawnrunner:spawn")
print(pid, flush=True)
os.kill(os.getpid(), signal.SIGKILL)  # the suite killed: no atexit, no close
'''


@pytest.mark.skipif(not Path("/proc").is_dir(), reason="reads /proc to see the process")
def test_a_process_a_runner_starts_ends_when_the_suite_is_killed(tmp_path):
    (tmp_path / "spawnrunner.py").write_text(SPAWNER)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(tmp_path), str(ROOT)])}
    done = subprocess.run([sys.executable, "-c", KILLED_SUITE, str(tmp_path)], cwd=ROOT,
                          env=env, capture_output=True, text=True, timeout=120)
    pid = int(done.stdout.split()[0])
    try:
        for _ in range(100):  # the worker reads EOF on its pipe, then ends its group
            if not _alive(pid):
                break
            time.sleep(0.1)
        assert not _alive(pid), "the runner's process outlived the killed suite"
    finally:
        if _alive(pid):
            os.kill(pid, 9)
