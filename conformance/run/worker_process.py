"""The worker process's side of workers.py: the loop a worker subprocess runs.

It reads pickled requests (a runner's target and parameters, the operation, a case, a
translation) from stdin, answers each on its private copy of stdout (fd 1 is pointed at
stderr, so whatever a framework prints goes to the log), and exits when stdin closes.
Started as `python -m conformance.run.worker_process` by workers._Worker.
"""
from __future__ import annotations

import importlib
import os
import pickle
import signal
import sys
import time
from typing import Any

from conformance.contract.runner import NotExpressibleError
from conformance.run.workers import HIDE_ENV, receive_message, send_message

PROFILE_ENV = "CONFORMANCE_WORKER_PROFILE"  # a file: one line per request answered


def hide_modules(names: str) -> list[str]:
    """Make `import name` raise ImportError in this process, as if the package
    were not installed.  For optional packages a framework imports merely
    because they are there (Keras imports jax and pandas when installed, on
    every backend), which would cost a worker seconds of imports it never uses."""
    hidden = [n.strip() for n in names.split(",") if n.strip()]
    for name in hidden:
        if name not in sys.modules:
            sys.modules[name] = None  # the import system's "not importable" marker
    return hidden


def _serve() -> None:
    """The worker loop: read requests until stdin closes."""
    import faulthandler

    hide_modules(os.environ.get(HIDE_ENV, ""))
    faulthandler.enable()  # a segfault leaves its Python stack in the log the parent quotes
    from conformance.runners import load

    proto_in, proto_out = sys.stdin.buffer, os.fdopen(os.dup(1), "wb")
    os.dup2(2, 1)  # anything the frameworks print goes to the log, not the protocol
    runners: dict[str, Any] = {}
    profile = os.environ.get(PROFILE_ENV, "")
    while True:
        try:
            (target, params), op, case, translation = receive_message(proto_in)
        except EOFError:  # the suite closed the pipe, or died: nothing of ours may stay
            _end_group()
            return
        key = (target, repr(sorted(params.items())))
        started = (time.perf_counter(), time.process_time())
        try:
            if key not in runners:
                runners[key] = load(target, params)
            reply = _answer(runners[key], op, case, translation)
        except Exception as exc:  # loading the runner failed
            reply = ("error", f"{type(exc).__name__}: {exc}")
        try:
            data = pickle.dumps(reply, protocol=pickle.HIGHEST_PROTOCOL)
        except Exception as exc:  # an unpicklable observation: the row's error
            data = pickle.dumps(("error", f"the {op} reply could not be sent back: "
                                          f"{type(exc).__name__}: {exc}"))
        send_message(proto_out, None, data)
        if profile:
            _profile(profile, getattr(runners.get(key), "name", target), op, case, started,
                     reply[0])


def _end_group() -> None:
    """Kill this worker's process group, itself included, when it leads one (workers.py
    starts each worker in a session of its own): processes a runner started end with it,
    even when the suite was killed and could not kill them."""
    if os.getpgid(0) == os.getpid():
        os.killpg(os.getpid(), signal.SIGKILL)


def _profile(path: str, name: str, op: str, case, started: tuple, status: str) -> None:
    """Append one request's wall and CPU seconds to `path` (benchmarks/matrix_profile.py
    reads it): which runners and which operations the matrix's time goes to."""
    wall, cpu = time.perf_counter() - started[0], time.process_time() - started[1]
    line = "\t".join([str(os.getpid()), str(name), op, getattr(case, "id", "-") or "-",
                      f"{wall:.4f}", f"{cpu:.4f}", status])
    with open(path, "a", encoding="utf-8") as fh:
        fh.write(line + "\n")


def _answer(runner, op: str, case, translation) -> tuple[str, Any]:
    """One request's reply; only KeyboardInterrupt escapes."""
    from conformance.oracle.canonical import case_data

    try:
        if op == "count":  # allocation-free: never generates the case's arrays
            return ("ok", runner.count(case))
        if op == "call":
            module, name = translation[0].split(":")
            return ("ok", getattr(importlib.import_module(module), name)(*translation[1]))
        if op == "conventions":  # translation: "module:name" of a function(runner), or None
            if translation is None:
                return ("ok", runner.conventions())
            module, name = translation.split(":")
            return ("ok", getattr(importlib.import_module(module), name)(runner))
        return ("ok", runner.run(case, translation, case_data(case)))
    except NotExpressibleError as exc:
        return ("not_expressible", str(exc))
    except KeyboardInterrupt:
        raise
    except Exception as exc:  # reported to the parent as the row's error
        return ("error", f"{type(exc).__name__}: {exc}")
    except BaseException as exc:  # SystemExit and the like: a row, not a dead worker
        extra = " (sys.exit was called)" if isinstance(exc, SystemExit) else ""
        return ("error", f"{op} raised {type(exc).__name__}: {exc}{extra}")


if __name__ == "__main__":
    _serve()
