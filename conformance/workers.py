"""Long-lived worker subprocesses for runners that cannot share our process.

A Keras backend is fixed when Keras is first imported, and TensorFlow, torch
and JAX share a process only with care; so a runner may name a `worker` key
and a `worker_env` (e.g. KERAS_BACKEND=jax).  All runners with the same key
run in ONE subprocess per pytest session, started on first use.  The two
processes exchange pickled, length-prefixed messages over pipes: the Case and
Translation go in, an Observation (NumPy arrays) comes back.  The worker
regenerates the canonical data from the case seed, which is deterministic.

Worker stdout is reserved for the protocol; whatever the framework prints
goes to a log file whose tail is quoted when the worker dies.
"""
from __future__ import annotations

import atexit
import os
import pickle
import struct
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from typing import IO, Any

from .runners import NotExpressibleError


class WorkerDied(RuntimeError):
    pass


@dataclass
class _Worker:
    proc: subprocess.Popen
    log_path: str

    def tail(self) -> str:
        try:
            with open(self.log_path, encoding="utf-8", errors="replace") as fh:
                return fh.read()[-2000:]
        except OSError:
            return ""


_WORKERS: dict[str, _Worker] = {}


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


def _start(key: str, env_extra: dict[str, str]) -> _Worker:
    log = tempfile.NamedTemporaryFile(prefix=f"conformance-worker-{key}-", suffix=".log",
                                      delete=False)
    env = {**os.environ, **env_extra, "PYTHONUNBUFFERED": "1"}
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [root, env.get("PYTHONPATH")]))
    proc = subprocess.Popen([sys.executable, "-m", "conformance.workers"], env=env,
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=log)
    log.close()
    return _Worker(proc, log.name)


def run_in_worker(runner, case, translation):
    worker = _WORKERS.get(runner.worker)
    if worker is None or worker.proc.poll() is not None:
        worker = _WORKERS[runner.worker] = _start(runner.worker, runner.worker_env)
    try:
        _send(worker.proc.stdin, (runner.entry, case, translation))
        status, payload = _recv(worker.proc.stdout)
    except (EOFError, BrokenPipeError, OSError) as exc:
        code = worker.proc.poll()
        raise WorkerDied(f"worker '{runner.worker}' died (exit {code}): "
                         f"{type(exc).__name__}; its log ends:\n{worker.tail()}") from None
    if status == "ok":
        return payload
    if status == "not_expressible":
        raise NotExpressibleError(payload)
    raise RuntimeError(payload)


def shutdown() -> None:
    for worker in _WORKERS.values():
        try:
            worker.proc.stdin.close()
            worker.proc.wait(timeout=10)
        except Exception:
            worker.proc.kill()
        try:
            os.unlink(worker.log_path)
        except OSError:
            pass
    _WORKERS.clear()


atexit.register(shutdown)


def _serve() -> None:
    """The worker loop: read requests until stdin closes."""
    from .runners import load
    from .weights import case_data

    proto_in, proto_out = sys.stdin.buffer, os.fdopen(os.dup(1), "wb")
    os.dup2(2, 1)  # anything the frameworks print goes to the log, not the protocol
    runners: dict[str, Any] = {}
    while True:
        try:
            entry, case, translation = _recv(proto_in)
        except EOFError:
            return
        try:
            runner = runners.setdefault(entry, load(entry))
            reply = ("ok", runner.run(case, translation, case_data(case)))
        except NotExpressibleError as exc:
            reply = ("not_expressible", str(exc))
        except Exception as exc:  # reported to the parent as the row's error
            reply = ("error", f"{type(exc).__name__}: {exc}")
        _send(proto_out, reply)


if __name__ == "__main__":
    _serve()
