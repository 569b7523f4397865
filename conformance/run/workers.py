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
goes to a log file whose tail is quoted when the worker dies.  The loop a worker
runs is worker_process.py; this module is the suite's side.

Faults cost one request, never the queue: a runner's exception (SystemExit
included) is an error reply; a worker that dies (os._exit, a segfault: its
exit code and signal are named, faulthandler's stack is in the log) or that
outlives the item timeout (isolation.py; the clock starts when the request is
sent; the worker is killed) fails that request with WorkerDied / WorkerTimeout,
and the same pump restarts the process for the next request of its queue.
"""
from __future__ import annotations

import atexit
import itertools
import os
import pickle
import queue
import select
import signal
import struct
import subprocess
import sys
import tempfile
import threading
import time
from concurrent.futures import Future
from typing import IO, Any

from conformance import progress
from conformance.contract.runner import NotExpressibleError, WorkerSpec
from conformance.run import probe_cache
from conformance.run.isolation import item_timeout
from conformance.paths import ROOT

PROCESS_MODULE = "conformance.run.worker_process"  # what a worker subprocess runs
HIDE_ENV = "CONFORMANCE_WORKER_HIDE"  # "mod,mod": WorkerSpec.hide, passed to the worker


class RaisedInWorker(RuntimeError):
    """An exception the runner raised inside its worker: its text is the worker's
    "Type: message" of the original, so reports name the original exception."""


def op_answers_item(op: str) -> bool:
    """A request whose answer is what a matrix or conventions item waits for."""
    return op in ("run", "count", "conventions")


def described(exc: BaseException) -> str:
    """'Type: message' of an exception, the original's for one raised in a worker."""
    return str(exc) if isinstance(exc, RaisedInWorker) else f"{type(exc).__name__}: {exc}"


class WorkerFault(RuntimeError):
    """The worker, not the runner, failed a request; `log` is the tail of its log."""

    def __init__(self, message: str, log: str = ""):
        super().__init__(message)
        self.log = log


class WorkerDied(WorkerFault):
    pass


class WorkerTimeout(WorkerFault):
    pass


def send_message(stream: IO[bytes], obj: Any, data: bytes | None = None) -> None:
    """Send `obj` (or `data`, already pickled), length-prefixed."""
    data = pickle.dumps(obj, protocol=pickle.HIGHEST_PROTOCOL) if data is None else data
    stream.write(struct.pack("<Q", len(data)) + data)
    stream.flush()


def _read(fd: int, size: int, deadline: float | None) -> bytes:
    """Exactly `size` bytes from a raw pipe; TimeoutError past `deadline`."""
    chunks = []
    while size:
        if deadline is not None:
            left = deadline - time.monotonic()
            if left <= 0 or not select.select([fd], [], [], left)[0]:
                raise TimeoutError
        chunk = os.read(fd, min(size, 1 << 20))
        if not chunk:
            raise EOFError
        chunks.append(chunk)
        size -= len(chunk)
    return b"".join(chunks)


def receive_message(stream: IO[bytes], deadline: float | None = None) -> Any:
    fd = stream.fileno()
    (size,) = struct.unpack("<Q", _read(fd, 8, deadline))
    return pickle.loads(_read(fd, size, deadline))


def exit_text(code: int | None) -> str:
    """"exit 1", "exit -11, SIGSEGV" (a negative code is the signal that ended it)."""
    if code is None:
        return "still running"
    if code < 0:
        try:
            return f"exit {code}, {signal.Signals(-code).name}"
        except ValueError:
            pass
    return f"exit {code}"


# Flag lists a worker's environment adds to instead of replacing: the caller's own flags
# stay (benchmarks/portability.py's XLA_FLAGS=--xla_cpu_max_isa=AVX reached no Keras JAX
# worker while the Keras workers' single-thread flags replaced it).
APPENDED_ENV = ("XLA_FLAGS",)


def worker_env(extra: dict[str, str], base=None) -> dict[str, str]:
    """The process environment `base` (os.environ) with a worker's `extra` variables over
    it, the flag lists of APPENDED_ENV joined (the caller's first)."""
    base = dict(os.environ if base is None else base)
    joined = {k: f"{base[k]} {extra[k]}" for k in APPENDED_ENV if base.get(k) and k in extra}
    return {**base, **extra, **joined}


URGENT, PREFETCH, CLOSING = 0, 1, 2  # request priorities: lower first
# Workers computing at once.  Isolation gives every framework its own worker (about 14 in a
# full run); all of them importing and computing together on 2 cores made each slower than
# alone and slowed the pytest process 3-9 times for the first minutes.
BUSY = threading.BoundedSemaphore(max(1, os.cpu_count() or 1))


class _Worker:
    """One subprocess and the thread that feeds it requests in order.  A request
    that kills the worker, or outlives the item timeout (the worker is killed),
    fails alone: the process is restarted for the next request of the queue."""

    def __init__(self, spec: WorkerSpec):
        self.spec, self.key = spec, spec.key
        self.proc: subprocess.Popen | None = None
        self.log_path = ""
        self.requests: queue.PriorityQueue = queue.PriorityQueue()  # (priority, seq, item)
        self.sequence = itertools.count()  # first in, first out within one priority
        self.restarts = 0
        self.closed = False
        self.lock = threading.Lock()  # close() (main thread) against a restart (pump)
        self.thread = threading.Thread(target=self._pump, name=f"worker-{self.key}", daemon=True)
        self.thread.start()

    def _start(self) -> None:
        spec = self.spec
        self._discard(streams=True)
        log = tempfile.NamedTemporaryFile(prefix=f"conformance-worker-{spec.key}-",
                                          suffix=".log", delete=False)
        self.log_path = log.name
        env = {**worker_env(spec.env), HIDE_ENV: ",".join(spec.hide), "PYTHONUNBUFFERED": "1"}
        env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), env.get("PYTHONPATH")]))
        self.proc = subprocess.Popen([sys.executable, "-m", PROCESS_MODULE], env=env,
                                     stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=log,
                                     bufsize=0, start_new_session=True)  # _kill: its group
        log.close()

    def tail(self) -> str:
        try:
            with open(self.log_path, encoding="utf-8", errors="replace") as fh:
                return fh.read()[-2000:]
        except OSError:
            return ""

    def submit(self, runner, case, translation, op: str = "run",
               priority: int = URGENT) -> Future:
        """`op`: "run" (runner.run on the case), "count" (runner.count), "conventions"
        (its probes) or "call" (`translation` is (function, args): call_in_worker).
        `priority`: PREFETCH requests wait behind every URGENT one, so a request an item
        waits for now never queues behind the matrix's prefetched runs."""
        future: Future = Future()
        what = (f"{runner.name} on case {case.id}" if op == "run"
                else f"the count of {runner.name} on case {case.id}" if op == "count"
                else f"{translation[0]} in the worker of {runner.name}" if op == "call"
                else f"the {op} probes of {runner.name}")
        done = (runner.name, case.id if op in ("run", "count") else "conventions")
        self.requests.put((priority, next(self.sequence), (
            (runner.target, dict(runner.params)), op, case, translation, what, done, future)))
        return future

    def _pump(self) -> None:
        while True:
            item = self.requests.get()[2]
            if item is None:
                return
            *request, what, (runner, case), future = item
            if not future.set_running_or_notify_cancel():
                continue
            try:
                future.set_result(self._exchange(tuple(request), what))
            except BaseException as exc:  # the pump must live on for the queue
                future.set_exception(exc)
            if op_answers_item(request[1]):
                progress.record(a=runner, c=case)  # the progress line's n/N

    def _exchange(self, request: tuple, what: str) -> Any:
        with BUSY:  # at most one busy worker per core, start-up and imports included
            return self._exchange_now(request, what)

    def _exchange_now(self, request: tuple, what: str) -> Any:
        with self.lock:
            if self.closed:
                raise WorkerDied(f"worker '{self.key}' was closed before running {what}")
            if self.proc is None or self.proc.poll() is not None:
                self.restarts += self.proc is not None
                self._start()
        timeout = item_timeout()
        try:
            send_message(self.proc.stdin, request)
            deadline = time.monotonic() + timeout if timeout else None
            return receive_message(self.proc.stdout, deadline)
        except TimeoutError:
            self._kill(streams=True)
            raise WorkerTimeout(f"timed out after {timeout:g} s: worker '{self.key}' was "
                                f"killed while running {what} and restarts for the next "
                                "request", self.tail()) from None
        except (EOFError, OSError) as exc:
            try:
                code = self.proc.wait(timeout=10)  # the pipe closed: it is exiting
            except subprocess.TimeoutExpired:  # closed its stdout but lives on
                self._kill(streams=True)
                code = self.proc.returncode
            raise WorkerDied(f"worker '{self.key}' died ({exit_text(code)}) while running "
                             f"{what}: {type(exc).__name__}", self.tail()) from None

    def _kill(self, streams: bool = False) -> None:
        """Kill the process; `streams`: close our pipe ends too (the pump thread
        only: it may be reading them; a kill alone ends its read with EOF)."""
        if self.proc is None:
            return
        try:  # the worker leads its own process group: what a runner started goes too
            os.killpg(self.proc.pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
        self.proc.kill()
        self.proc.wait()
        for stream in (self.proc.stdin, self.proc.stdout) if streams else ():
            try:
                stream.close()
            except OSError:
                pass

    def _discard(self, streams: bool = False) -> None:
        """Kill the process (if any) and remove its log."""
        self._kill(streams)
        if self.log_path:
            try:
                os.unlink(self.log_path)
            except OSError:
                pass
            self.log_path = ""

    def close(self) -> None:
        """Stop the pump and kill the process.  Every reply is in by now (or no
        longer wanted), and a worker holds nothing worth a clean exit: waiting for
        TensorFlow or torch to tear down costs about a second a worker, all of it
        on the suite's wall time."""
        with self.lock:
            self.closed = True
            self.requests.put((CLOSING, next(self.sequence), None))
            self._discard()


_WORKERS: dict[str, _Worker] = {}
_PREFETCHED: dict[tuple[str, ...], Future] = {}  # (runner, case), ("count", ...), ...


def _worker(runner) -> _Worker:
    """The runner's worker; its process starts with its first request, and again
    after a request killed it."""
    spec = runner.worker
    worker = _WORKERS.get(spec.key)
    if worker is None:
        worker = _WORKERS[spec.key] = _Worker(spec)
    return worker


def _key(runner, case) -> tuple[str, str]:
    return runner.name, case.fingerprint()


def _queue(key: tuple, runner, case, translation, op: str) -> None:
    """Queue a request now (PREFETCH), to be collected later under `key`."""
    if key not in _PREFETCHED:
        _PREFETCHED[key] = _worker(runner).submit(runner, case, translation, op,
                                                  priority=PREFETCH)


def _collect(key: tuple | None, runner, case, translation, op: str) -> Any:
    """The answer of the request queued under `key`, or of one sent now (URGENT; a None
    key: never queued).  A queued request that has not started yet is taken back and sent
    again as URGENT: what a caller waits for now never waits behind the prefetched rest
    (a test reading a runner's probes would otherwise wait for all its matrix runs)."""
    future = None if key is None else _PREFETCHED.pop(key, None)
    if future is not None and future.cancel():  # still queued: ask now, ahead of the queue
        future = None
    if future is None:
        future = _worker(runner).submit(runner, case, translation, op)
    status, payload = future.result()
    if status == "ok":
        return payload
    if status == "not_expressible":
        raise NotExpressibleError(payload)
    raise RaisedInWorker(payload)


def prefetch(runner, case, translation) -> None:
    """Queue a worker run now; `run_in_worker` collects it later."""
    _queue(_key(runner, case), runner, case, translation, "run")


def run_in_worker(runner, case, translation):
    return _collect(_key(runner, case), runner, case, translation, "run")


def prefetch_count(runner, case) -> None:
    """Queue a count-only item's count now; `count_in_worker` collects it later."""
    _queue(("count", *_key(runner, case)), runner, case, None, "count")


def count_in_worker(runner, case):
    """The runner's `count` of the case (contract.Count), run in its worker."""
    return _collect(("count", *_key(runner, case)), runner, case, None, "count")


def call_in_worker(runner, function: str, *args) -> Any:
    """`function(*args)` run in the runner's worker and its answer, for code that needs
    the runner's framework environment (a Keras backend, JAX's x64) without a process of
    its own: the suite's tests, which would otherwise pay a framework import each.
    `function` is "package.module:name", importable in the worker (the repository root
    is on its path); args and answer are pickled.  Ahead of the prefetched matrix runs.
    `runner` as `runners.load` makes it (its `target` names it to the worker)."""
    if not runner.target:
        raise ValueError(f"{runner.name}: no target; make it with conformance.runners.load")
    return _collect(None, runner, None, (function, args), "call")


def prefetch_conventions(runner, function: str | None = None) -> None:
    """Queue the runner's convention probes (not where probe_cache.py holds their cells)
    behind the matrix runs queued before them: the workers probe while the matrix items are
    judged.  `function` ("module:name", called with the runner there) gives the cells."""
    if function is None or not probe_cache.holds(runner, function):
        _queue(("conventions", runner.name, function), runner, None, function, "conventions")


_PROBED: dict[tuple, list] = {}  # (op, runner name, function) -> its cells, once answered


def conventions_in_worker(runner, function: str | None = None) -> list:
    """The runner's convention cells, run in its worker once per session: `function`
    ("package.module:name", called with the runner there: the ledger's probes, whose
    layer sits above this one, are named by the caller), None for the runner's own
    `conventions()`.  The ledger's item and the suite's tests of the same runner read one
    answer (a failure is not kept: the next caller asks again)."""
    key = ("conventions", runner.name, function)
    if key not in _PROBED:
        _PROBED[key] = list(_collect(key, runner, None, function, "conventions"))
    return list(_PROBED[key])


def close(key: str) -> None:
    """Stop one worker (the next request starts a fresh one)."""
    worker = _WORKERS.pop(key, None)
    if worker is not None:
        worker.close()


def shutdown() -> None:
    for future in _PREFETCHED.values():
        future.cancel()  # runs never collected (a -x stop): not worth waiting for
    _PREFETCHED.clear()
    _PROBED.clear()
    for worker in _WORKERS.values():
        worker.close()
    _WORKERS.clear()


atexit.register(shutdown)
