"""Runners that misbehave on purpose, one way each (tests/test_runner_faults.py).

Tried the documented way: CONFORMANCE_EXTRA_RUNNERS=tests.fault_runners:RaisesInTranslate,...
Each "runs" the float64 reference on the cases it does not break, so the
other rows of a session show that the session went on.
"""
from __future__ import annotations

import ctypes
import os
import sys
import time

from conformance.contract.runner import Observation, Runner, Translation, WorkerSpec
from conformance.oracle.reference import attention

FAULT_WORKER = WorkerSpec("faulty")


class _Fault(Runner):
    framework = "fault"
    breaks = "boom"  # the case id it breaks on

    def translate(self, case):
        return Translation(f"{self.name}()")

    def run(self, case, translation, data):
        if case.id == self.breaks:
            self.misbehave()
        return Observation(output=attention(case, data).output, notes=[f"pid {os.getpid()}"])

    def misbehave(self) -> None:
        raise NotImplementedError


class RaisesInTranslate(_Fault):
    name = "fault.translate"

    def translate(self, case):
        if case.id == self.breaks:
            raise ValueError("translate breaks, on purpose")
        return super().translate(case)


class ExitsInWorker(_Fault):
    name = "fault.exit.worker"
    worker = FAULT_WORKER

    def misbehave(self):
        os._exit(1)


class SegfaultsInWorker(_Fault):
    name = "fault.segv.worker"
    worker = FAULT_WORKER

    def misbehave(self):
        ctypes.string_at(0)


class HangsInWorker(_Fault):
    name = "fault.hang.worker"
    worker = FAULT_WORKER

    def misbehave(self):
        while True:
            time.sleep(60)


class ExitsInProcess(_Fault):
    """Kills its process (os._exit(3)): the pytest process with --no-isolate."""

    name = "fault.exit.process"

    def misbehave(self):
        os._exit(3)


class HangsInProcess(_Fault):
    name = "fault.hang.process"

    def misbehave(self):
        while True:
            try:
                time.sleep(60)
            except Exception:  # a runner that swallows exceptions still times out
                pass


class SysExitInRun(_Fault):
    name = "fault.sysexit"

    def misbehave(self):
        sys.exit(3)


class BaseExceptionInRun(_Fault):
    name = "fault.baseexception"

    def misbehave(self):
        raise GeneratorExit("an odd BaseException, on purpose")


class BreaksTheJudge(_Fault):
    """Returns an observation the judge cannot read (no output array)."""

    name = "fault.judge"

    def misbehave(self):
        pass  # the run itself succeeds

    def run(self, case, translation, data):
        obs = super().run(case, translation, data)
        if case.id == self.breaks:
            obs.output = "not an array"
        return obs


class InterruptsInTranslate(_Fault):
    """Ctrl-C in translate: the session stops, the rows so far are written."""

    name = "fault.interrupt"

    def translate(self, case):
        if case.id == self.breaks:
            raise KeyboardInterrupt
        return super().translate(case)
