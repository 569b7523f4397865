"""Long-lived worker subprocesses for runners that cannot share our process.

A Keras backend is fixed when Keras is first imported, and TensorFlow, torch
and JAX share a process only with care; so a runner may name a `worker` key
and a `worker_env` (e.g. KERAS_BACKEND=jax).  All runners with the same key
run in ONE subprocess per pytest session.  The processes exchange pickled,
length-prefixed messages over pipes: the Case and Translation go in, an
Observation (NumPy arrays) comes back.  The worker regenerates the canonical
data from the case seed, which is deterministic.

Requests are *pipelined*: once collection is done the plugin submits every
selected worker item (`prefetch`), each worker works through its queue in
its own process, and the test item later only collects its result.  So the
workers' framework imports and computations overlap each other and the
in-process runners, instead of adding up item by item.  One thread per
worker does the request/reply exchange, so a pipe never fills up.

Worker stdout is reserved for the protocol; whatever the framework prints
goes to a log file whose tail is quoted when the worker dies.
"""
from __future__ import annotations

import atexit
import os
import pickle
import queue
import struct
import subprocess
import sys
import tempfile
import threading
from concurrent.futures import Future
from typing import IO, Any

from .contract import NotExpressibleError, WorkerSpec
from .paths import ROOT

HIDE_ENV = "CONFORMANCE_WORKER_HIDE"  # "mod,mod": WorkerSpec.hide, passed to the worker


class WorkerDied(RuntimeError):
    pass


def _send(stream: IO[bytes], obj: Any) -> None:
    data = pickle.dumps(obj, protocol=pickle.HIGHEST_PROTOCOL)
    stream.write(struct.pack("<Q", len(data)) + data)
    stream.flush()


def _recv(stream: IO[bytes]) -> Any:
    head = stream.read(8)
    if len(head) < 8:
        raise EOFError
    (size,) = struct.unpack("<Q", head)
    return pickle.loads(stream.read(size))


class _Worker:
    """One subprocess and the thread that feeds it requests in order."""

    def __init__(self, spec: WorkerSpec):
        self.key = key = spec.key
        log = tempfile.NamedTemporaryFile(prefix=f"conformance-worker-{key}-", suffix=".log",
                                          delete=False)
        self.log_path = log.name
        env = {**os.environ, **spec.env, HIDE_ENV: ",".join(spec.hide), "PYTHONUNBUFFERED": "1"}
        env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), env.get("PYTHONPATH")]))
        self.proc = subprocess.Popen([sys.executable, "-m", "conformance.workers"], env=env,
                                     stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=log)
        log.close()
        self.requests: queue.Queue = queue.Queue()
        self.dead = False  # set when the pipe broke: the process may not be reaped yet
        self.thread = threading.Thread(target=self._pump, name=f"worker-{key}", daemon=True)
        self.thread.start()

    def tail(self) -> str:
        try:
            with open(self.log_path, encoding="utf-8", errors="replace") as fh:
                return fh.read()[-2000:]
        except OSError:
            return ""

    def submit(self, runner, case, translation, op: str = "run") -> Future:
        """`op`: "run" (runner.run on the case) or "conventions" (its probes)."""
        future: Future = Future()
        self.requests.put(((runner.target, dict(runner.params)), op, case, translation, future))
        return future

    def _pump(self) -> None:
        while True:
            item = self.requests.get()
            if item is None:
                return
            *request, future = item
            if not future.set_running_or_notify_cancel():
                continue
            try:
                _send(self.proc.stdin, tuple(request))
                future.set_result(_recv(self.proc.stdout))
            except (EOFError, OSError) as exc:
                self.dead = True
                code = self.proc.poll()
                future.set_exception(WorkerDied(
                    f"worker '{self.key}' died (exit {code}): {type(exc).__name__}; "
                    f"its log ends:\n{self.tail()}"))

    def close(self) -> None:
        """Stop the pump and kill the process.  Every reply is in by now (or no
        longer wanted), and a worker holds nothing worth a clean exit: waiting for
        TensorFlow or torch to tear down costs about a second a worker, all of it
        on the suite's wall time."""
        self.requests.put(None)
        try:
            self.proc.stdin.close()
        except OSError:
            pass
        self.proc.kill()
        self.proc.wait()
        try:
            os.unlink(self.log_path)
        except OSError:
            pass


_WORKERS: dict[str, _Worker] = {}
_PREFETCHED: dict[tuple[str, str], Future] = {}


def _worker(runner) -> _Worker:
    spec = runner.worker
    worker = _WORKERS.get(spec.key)
    if worker is None or worker.dead or worker.proc.poll() is not None:
        if worker is not None:
            worker.close()
        worker = _WORKERS[spec.key] = _Worker(spec)
    return worker


def _key(runner, case) -> tuple[str, str]:
    return runner.name, case.fingerprint()


def prefetch(runner, case, translation) -> None:
    """Queue a worker run now; `run_in_worker` collects it later."""
    if _key(runner, case) not in _PREFETCHED:
        _PREFETCHED[_key(runner, case)] = _worker(runner).submit(runner, case, translation)


def run_in_worker(runner, case, translation):
    future = _PREFETCHED.pop(_key(runner, case), None)
    if future is None:
        future = _worker(runner).submit(runner, case, translation)
    status, payload = future.result()
    if status == "ok":
        return payload
    if status == "not_expressible":
        raise NotExpressibleError(payload)
    raise RuntimeError(payload)


def conventions_in_worker(runner) -> list:
    """The runner's convention probes, run in its worker."""
    status, payload = _worker(runner).submit(runner, None, None, "conventions").result()
    if status == "ok":
        return payload
    raise RuntimeError(payload)


def close(key: str) -> None:
    """Stop one worker (the next request starts a fresh one)."""
    worker = _WORKERS.pop(key, None)
    if worker is not None:
        worker.close()


def shutdown() -> None:
    for future in _PREFETCHED.values():
        future.cancel()  # runs never collected (a -x stop): not worth waiting for
    _PREFETCHED.clear()
    for worker in _WORKERS.values():
        worker.close()
    _WORKERS.clear()


atexit.register(shutdown)


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
    hide_modules(os.environ.get(HIDE_ENV, ""))
    from .runners import load
    from .weights import case_data

    proto_in, proto_out = sys.stdin.buffer, os.fdopen(os.dup(1), "wb")
    os.dup2(2, 1)  # anything the frameworks print goes to the log, not the protocol
    runners: dict[str, Any] = {}
    while True:
        try:
            (target, params), op, case, translation = _recv(proto_in)
        except EOFError:
            return
        try:
            key = (target, repr(sorted(params.items())))
            if key not in runners:
                runners[key] = load(target, params)
            runner = runners[key]
            reply = ("ok", runner.conventions() if op == "conventions"
                     else runner.run(case, translation, case_data(case)))
        except NotExpressibleError as exc:
            reply = ("not_expressible", str(exc))
        except Exception as exc:  # reported to the parent as the row's error
            reply = ("error", f"{type(exc).__name__}: {exc}")
        _send(proto_out, reply)


if __name__ == "__main__":
    _serve()
