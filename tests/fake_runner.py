"""A framework-free runner for testing the worker machinery (tests/test_workers.py)."""
from __future__ import annotations

import os
import sys
import time

from conformance.oracle.reference import attention
from conformance.contract.runner import (
    NotExpressibleError, Observation, Runner, Translation, WorkerSpec)


SERVED: list[str] = []  # in a worker: the case ids it ran, in order


def served() -> tuple[int, list[str]]:
    """For workers.call_in_worker: the worker's pid and the case ids it has run so far."""
    return os.getpid(), list(SERVED)


def broken() -> None:
    raise ArithmeticError("broken on purpose")


class FakeWorkerRunner(Runner):
    name, framework = "fake.worker", "fake"
    worker = WorkerSpec("fake", {"FAKE_WORKER_FLAVOUR": "reference"}, hide=("wave",))

    def translate(self, case):
        return Translation("fake()")

    def run(self, case, translation, data):
        if case.inputs.seed == 1:
            raise NotExpressibleError("seed 1 is not expressible, on purpose")
        if case.inputs.seed == 2:
            raise ValueError("seed 2 breaks, on purpose")
        if case.inputs.seed == 3:
            os._exit(3)  # the worker dies
        if case.inputs.seed == 5:
            while True:  # the worker hangs
                time.sleep(60)
        if case.inputs.seed == 6:
            sys.exit(4)  # a SystemExit: an error reply, the worker lives on
        started = time.time()
        if case.inputs.seed == 9:
            time.sleep(0.5)  # a slow run, for the queue's order and the busy cap
        SERVED.append(case.id)
        span = [f"ran {started!r} {time.time()!r}"]
        try:
            import wave  # noqa: F401  (hidden by WorkerSpec.hide: must fail)
            hidden = "wave importable"
        except ImportError as exc:
            hidden = f"wave hidden: {exc}"
        return Observation(output=attention(case, data).output,
                           notes=[f"pid {os.getpid()}", os.environ["FAKE_WORKER_FLAVOUR"],
                                  hidden, *span])
