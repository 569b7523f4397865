"""Events of long work, for the progress line a run prints (plugin/progress.py).

A cold run spends minutes in framework conversions inside worker subprocesses, where no
pytest report shows them.  So each process that does the work appends one JSON line per
event to its own file in the folder CONFORMANCE_PROGRESS_DIR names (the pytest controller
creates it; xdist workers and framework worker subprocesses inherit the variable):
  {"a": runner, "c": case id}  a worker answered that (runner, case) (its run, count or
                               probes: "c" is "conventions" for the probes);
  {"k": namespace}             an artefact was converted and stored (a cache miss made).
Without the variable nothing is written; a write that fails only loses a progress line.
"""
from __future__ import annotations

import json
import os
from pathlib import Path

PROGRESS_ENV = "CONFORMANCE_PROGRESS_DIR"
LINE_LIMIT = 1_000  # characters of one event line a reader accepts
FIELD_LIMIT = 200  # characters of one field a writer keeps


def record(**event: str) -> None:
    """Append `event` to this process's file, when a progress folder is set."""
    folder = os.environ.get(PROGRESS_ENV)
    if not folder:
        return
    line = json.dumps({k: str(v)[:FIELD_LIMIT] for k, v in event.items()},
                      separators=(",", ":")) + "\n"
    try:  # one short append: whole lines from the threads of one process
        with open(Path(folder) / f"{os.getpid()}.jsonl", "a", encoding="utf-8") as fh:
            fh.write(line)
    except OSError:
        pass


def read_new(folder: Path, offsets: dict[str, int]) -> list[dict[str, str]]:
    """The events written to `folder` since `offsets` (file name -> bytes read, updated):
    only whole lines; a line that is not a JSON object of strings is skipped."""
    events: list[dict[str, str]] = []
    try:
        names = sorted(p.name for p in folder.glob("*.jsonl"))
    except OSError:
        return events
    for name in names:
        try:
            with open(folder / name, "rb") as fh:
                fh.seek(offsets.get(name, 0))
                data = fh.read()
        except OSError:
            continue
        whole = data[:data.rfind(b"\n") + 1]
        offsets[name] = offsets.get(name, 0) + len(whole)
        for raw in whole.splitlines():
            if len(raw) > LINE_LIMIT:
                continue
            try:
                event = json.loads(raw)
            except ValueError:
                continue
            if isinstance(event, dict) and all(isinstance(v, str) for v in event.values()):
                events.append(event)
    return events
