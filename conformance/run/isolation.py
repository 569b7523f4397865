"""Fault containment settings: the per-item timeout and the isolation mode.

Every item yields a row, whatever its runner does (evaluate.py catches
exceptions in every stage; workers.py turns a dead or hung worker into an
error and restarts it).  Two settings decide how far that reaches:

- the per-item timeout (`--item-timeout SECONDS`, CONFORMANCE_ITEM_TIMEOUT,
  default 300; 0 turns it off).  In a worker it is exact: the clock starts
  when the request is sent to the worker (not while it waits in the queue; a
  fresh worker's start-up and the framework imports of its first request do
  count), and on expiry the worker is killed and restarted for the next request.
  In process it is a SIGALRM that raises `ItemTimeout` in the runner's
  Python code: a hang inside native code that never returns to Python
  cannot be interrupted in process.
- isolation (the default; `--no-isolate` or CONFORMANCE_ISOLATE=0 turn it off):
  every runner runs in a worker subprocess; a runner without a WorkerSpec gets
  a generic one per framework (key "isolated-<framework>").  So a hard crash
  (os._exit, a segfault) or a hang in native code costs one row.  Without it,
  runners without a WorkerSpec share the pytest process, and such a crash ends
  the session (the limit is declared in the README).
"""
from __future__ import annotations

import os
import signal
import threading
from contextlib import contextmanager
from typing import Iterable, Iterator

from conformance.contract.runner import Runner, WorkerSpec

TIMEOUT_ENV = "CONFORMANCE_ITEM_TIMEOUT"
ISOLATE_ENV = "CONFORMANCE_ISOLATE"
DEFAULT_TIMEOUT = 300.0

_timeout: float | None = None  # None: not configured; read from the environment


class ItemTimeout(BaseException):
    """Raised in process when an item outlives its timeout.  A BaseException, so
    a runner's own `except Exception` does not swallow it."""


def env_timeout() -> float:
    """CONFORMANCE_ITEM_TIMEOUT in seconds (0 = none), bounded (settings.item_timeout)."""
    from conformance.settings import item_timeout as parsed

    return parsed(None)


def env_isolate() -> bool:
    """CONFORMANCE_ISOLATE: isolation is on unless it says 0 / false / no / off."""
    raw = os.environ.get(ISOLATE_ENV, "").strip().lower()
    if raw in ("", "1", "true", "yes", "on"):
        return True
    if raw in ("0", "false", "no", "off"):
        return False
    from conformance.settings import SettingError

    raise SettingError(f"{ISOLATE_ENV}={raw[:40]!r}: expected 1 or 0 (on / off)")


def item_timeout() -> float:
    """Seconds one item may run (0: no limit)."""
    return env_timeout() if _timeout is None else _timeout


def configure(timeout: float | None = None, isolate: bool = False,
              runners: Iterable[Runner] = ()) -> None:
    """Set the session's timeout; with `isolate`, give every runner without a
    WorkerSpec the generic worker of its framework (on the runner objects)."""
    global _timeout
    _timeout = timeout
    if isolate:
        for runner in runners:
            if runner.worker is None:
                runner.worker = isolated_spec(runner)


def isolated_spec(runner: Runner) -> WorkerSpec:
    return WorkerSpec(f"isolated-{runner.framework or 'runner'}")


@contextmanager
def deadline(seconds: float, what: str) -> Iterator[None]:
    """Raise ItemTimeout in this (main) thread after `seconds`.  A no-op off the
    main thread, where signals are not delivered, or without SIGALRM."""
    if (not seconds or threading.current_thread() is not threading.main_thread()
            or not hasattr(signal, "setitimer")):
        yield
        return

    def expire(signum, frame):
        raise ItemTimeout(f"timed out after {seconds:g} s in {what} (in process: interrupted; "
                          "a hang in native code needs --isolate)")

    previous = signal.signal(signal.SIGALRM, expire)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)
