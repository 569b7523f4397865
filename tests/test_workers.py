"""Worker subprocesses: results, pipelining, and every way a run can end."""
from __future__ import annotations

import os

import numpy as np
import pytest

from conformance.run import isolation
from conformance.run import workers
from conformance.oracle.reference import attention
from conformance.contract.runner import NotExpressibleError
from conformance.runners import load

from .helpers import make_case

RUNNER = load("tests.fake_runner:FakeWorkerRunner")


@pytest.fixture(autouse=True)
def fresh_worker():
    yield
    workers.close(RUNNER.worker.key)  # only ours: the session's other workers keep their queues


def test_result_env_and_one_process_for_many_cases():
    cases = [make_case(id=f"c{n}", inputs={"seed": 10 + n}) for n in range(3)]
    for case in cases:  # pipelined: all queued before any is collected
        workers.prefetch(RUNNER, case, RUNNER.translate(case))
    observations = [workers.run_in_worker(RUNNER, c, RUNNER.translate(c)) for c in cases]
    for case, obs in zip(cases, observations):
        np.testing.assert_array_equal(obs.output, attention(case).output)
    pids = {obs.notes[0] for obs in observations}
    assert len(pids) == 1 and pids != {f"pid {os.getpid()}"}
    assert observations[0].notes[1] == "reference"  # WorkerSpec.env reached the worker
    assert observations[0].notes[2].startswith("wave hidden")  # WorkerSpec.hide


def test_not_expressible_and_errors_come_back_as_such():
    ne = make_case(inputs={"seed": 1})
    with pytest.raises(NotExpressibleError, match="on purpose"):
        workers.run_in_worker(RUNNER, ne, RUNNER.translate(ne))
    bad = make_case(inputs={"seed": 2})
    with pytest.raises(RuntimeError, match="ValueError: seed 2 breaks"):
        workers.run_in_worker(RUNNER, bad, RUNNER.translate(bad))


def test_dead_worker_is_reported_and_replaced():
    dead = make_case(inputs={"seed": 3})
    with pytest.raises(workers.WorkerDied, match="died"):
        workers.run_in_worker(RUNNER, dead, RUNNER.translate(dead))
    ok = make_case(inputs={"seed": 4})
    assert workers.run_in_worker(RUNNER, ok, RUNNER.translate(ok)).output.shape == (2, 5, 8)


def test_a_crash_fails_its_request_alone_and_the_queue_goes_on():
    cases = [make_case(id=f"q{n}", inputs={"seed": s}) for n, s in enumerate((7, 3, 8))]
    for case in cases:  # all queued before the crash
        workers.prefetch(RUNNER, case, RUNNER.translate(case))
    first = workers.run_in_worker(RUNNER, cases[0], None)
    with pytest.raises(workers.WorkerDied, match=r"worker 'fake' died \(exit 3\) while "
                       "running fake.worker on case q1"):
        workers.run_in_worker(RUNNER, cases[1], None)
    last = workers.run_in_worker(RUNNER, cases[2], None)
    assert first.notes[0] != last.notes[0]  # a fresh process took over the queue
    assert workers._WORKERS["fake"].restarts == 1


def test_a_hung_request_times_out_and_the_worker_restarts(monkeypatch):
    monkeypatch.setattr(isolation, "_timeout", 1.0)
    hung = make_case(inputs={"seed": 5})
    with pytest.raises(workers.WorkerTimeout, match=r"timed out after 1 s: worker 'fake' was "
                       "killed while running fake.worker on case t"):
        workers.run_in_worker(RUNNER, hung, RUNNER.translate(hung))
    # the restarted worker's start-up counts against the timeout: give it room (1 s was
    # flaky on a loaded 2-core machine)
    monkeypatch.setattr(isolation, "_timeout", 60.0)
    ok = make_case(inputs={"seed": 4})
    assert workers.run_in_worker(RUNNER, ok, RUNNER.translate(ok)).output.shape == (2, 5, 8)


def test_sys_exit_in_a_worker_is_an_error_reply_not_a_death():
    ok, bad = make_case(inputs={"seed": 4}), make_case(inputs={"seed": 6})
    pid = workers.run_in_worker(RUNNER, ok, None).notes[0]
    with pytest.raises(RuntimeError, match=r"run raised SystemExit: 4 \(sys.exit was called\)"):
        workers.run_in_worker(RUNNER, bad, None)
    assert workers.run_in_worker(RUNNER, ok, None).notes[0] == pid


def test_a_call_overtakes_the_prefetched_runs_and_its_error_comes_back():
    """call_in_worker runs in the worker (its pid, not ours) ahead of the queue of
    prefetched runs: with three slow runs queued it sees at most the one under way."""
    slow = [make_case(id=f"slow{n}", inputs={"seed": 9}) for n in range(3)]
    for case in slow:
        workers.prefetch(RUNNER, case, RUNNER.translate(case))
    pid, ran = workers.call_in_worker(RUNNER, "tests.fake_runner:served")
    assert pid != os.getpid() and len([c for c in ran if c.startswith("slow")]) <= 1
    for case in slow:
        workers.run_in_worker(RUNNER, case, None)
    assert workers.call_in_worker(RUNNER, "tests.fake_runner:served")[1][-3:] == [
        "slow0", "slow1", "slow2"]  # then in their own order
    with pytest.raises(workers.RaisedInWorker, match="ArithmeticError: broken on purpose"):
        workers.call_in_worker(RUNNER, "tests.fake_runner:broken")
    with pytest.raises(ValueError, match="no target"):
        workers.call_in_worker(type(RUNNER)(), "tests.fake_runner:served")


def test_a_queued_request_collected_now_overtakes_the_rest():
    """Collecting a prefetched request that has not started sends it again as urgent: with
    three slow runs queued before it, it sees at most the one under way."""
    slow = [make_case(id=f"slow{n}", inputs={"seed": 9}) for n in range(3)]
    last = make_case(id="wanted", inputs={"seed": 4})
    for case in (*slow, last):
        workers.prefetch(RUNNER, case, RUNNER.translate(case))
    workers.run_in_worker(RUNNER, last, None)
    ran = workers.call_in_worker(RUNNER, "tests.fake_runner:served")[1]
    assert ran.index("wanted") <= 1, ran  # not behind the three slow runs
    for case in slow:  # the others are still answered, each once
        workers.run_in_worker(RUNNER, case, None)
    assert sorted(c for c in workers.call_in_worker(RUNNER, "tests.fake_runner:served")[1]
                  if c.startswith(("slow", "wanted"))) == ["slow0", "slow1", "slow2", "wanted"]


def test_busy_workers_are_capped(monkeypatch):
    """With one slot, two workers' slow runs never overlap (workers.BUSY: at most one
    busy worker per core)."""
    import threading
    from dataclasses import replace

    monkeypatch.setattr(workers, "BUSY", threading.BoundedSemaphore(1))
    other = load("tests.fake_runner:FakeWorkerRunner")
    other.worker = replace(other.worker, key="fake-other")
    try:
        pairs = [(r, make_case(id=f"busy{n}", inputs={"seed": 9}))
                 for n, r in enumerate((RUNNER, other))]
        for runner, case in pairs:
            workers.prefetch(runner, case, runner.translate(case))
        spans = sorted(tuple(map(float, workers.run_in_worker(r, c, None).notes[3].split()[1:]))
                       for r, c in pairs)
    finally:
        workers.close("fake-other")
    assert spans[0][1] <= spans[1][0], spans  # the second started after the first ended


def test_exit_text_names_the_signal():
    assert workers.exit_text(-11) == "exit -11, SIGSEGV"
    assert workers.exit_text(1) == "exit 1"


def test_isolation_settings_from_the_environment(monkeypatch):
    monkeypatch.setattr(isolation, "_timeout", None)
    monkeypatch.setenv(isolation.TIMEOUT_ENV, "7.5")
    monkeypatch.setenv(isolation.ISOLATE_ENV, "1")
    assert (isolation.item_timeout(), isolation.env_isolate()) == (7.5, True)
    monkeypatch.delenv(isolation.TIMEOUT_ENV)
    assert isolation.item_timeout() == isolation.DEFAULT_TIMEOUT
    toy, fake = load("tests.toy_runner:ToyRunner"), load("tests.fake_runner:FakeWorkerRunner")
    isolation.configure(3.0, True, [toy, fake])
    assert (toy.worker.key, fake.worker.key, isolation.item_timeout()) == \
        ("isolated-toy", "fake", 3.0)
