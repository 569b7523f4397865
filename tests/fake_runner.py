"""A framework-free runner for testing the worker machinery (tests/test_workers.py)."""
from __future__ import annotations

import os

from conformance.reference import attention
from conformance.runners import NotExpressibleError, Observation, Runner, Translation


class FakeWorkerRunner(Runner):
    name, framework = "fake.worker", "fake"
    worker, worker_env = "fake", {"FAKE_WORKER_FLAVOUR": "reference"}

    def translate(self, case):
        return Translation("fake()")

    def run(self, case, translation, data):
        if case.inputs.seed == 1:
            raise NotExpressibleError("seed 1 is not expressible, on purpose")
        if case.inputs.seed == 2:
            raise ValueError("seed 2 breaks, on purpose")
        if case.inputs.seed == 3:
            os._exit(3)  # the worker dies
        return Observation(output=attention(case, data).output,
                           notes=[f"pid {os.getpid()}", os.environ["FAKE_WORKER_FLAVOUR"]])
