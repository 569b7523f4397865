"""A shard's record of its run, and merging shards.

Every run's reports are written by report/run_reports.py.  A shard (--shard I/N with
--report-dir DIR) also writes DIR/SHARD_FILE (shard.json): its rows, its runners' probe
cells, its seconds per item and its selection, as versioned JSON data checked field by
field when read (shardfile.py: a shard file from another machine runs no code).  A
shard that selected nothing writes one too, with no rows, so that a fixed CI matrix
always merges.  `python -m conformance merge DIR... --out OUT` combines the shards and
writes OUT exactly as one run of the union would have (the ledger rebuilt from the
merged rows and probes); the metadata says how many shards ran.
"""
from __future__ import annotations

from pathlib import Path

from conformance.datafile import DataFileError
from conformance.plugin.shardfile import SHARD_FILE
from conformance.report.run_reports import run_metadata, selection_text, write_run_reports


def write_shard(out: Path, shard: tuple[int, int], state, parts: list[str],
                total: int, default_cases: bool) -> Path:
    """DIR/SHARD_FILE: what merge needs of this shard's run (shardfile.py); `state` is
    the session's items.SessionState."""
    from conformance.plugin import shardfile

    record = {"shard": shard, "rows": state.rows, "probes": state.probes,
              "seconds": state.seconds, "parts": parts, "total": total,
              "default_cases": default_cases,
              "runners": [r.name for r in state.runners],
              "cases": [c.id for c in state.cases or []]}
    Path(out).mkdir(parents=True, exist_ok=True)
    return shardfile.write(Path(out), record)


class MergeError(Exception):
    pass


def load_shards(dirs) -> list[dict]:
    """Every shard folder's checked shard file (one clear error for a bad one)."""
    from conformance.plugin import shardfile

    shards = []
    for d in dirs:
        path = Path(d) / SHARD_FILE
        if not path.exists() and not path.is_symlink():
            raise MergeError(f"{d}: no {SHARD_FILE}; run the shard with --shard I/N "
                             "--report-dir DIR")
        if path.is_symlink() and Path(d).resolve() not in path.resolve().parents:
            raise MergeError(f"{path}: a symlink leading out of its folder; refused (a shard "
                             "folder holds its own shard file)")
        try:
            shards.append(shardfile.read(path))
        except DataFileError as exc:
            raise MergeError(str(exc)) from None
    counts = {s["shard"][1] for s in shards}
    if len(counts) != 1:
        raise MergeError(f"shards of different counts: {sorted(counts)}")
    count = counts.pop()
    have = sorted(s["shard"][0] for s in shards)
    if have != list(range(1, count + 1)):
        raise MergeError(f"expected shards 1..{count} once each, got {have}")
    for key in ("runners", "cases", "parts", "total", "default_cases"):
        if len({repr(s[key]) for s in shards}) != 1:
            raise MergeError(f"shards disagree on {key}: not one run split in shards")
    return shards


def merged_state(shards: list[dict]) -> tuple[dict, dict, dict]:
    rows, probes, seconds = {}, {}, {}
    for s in shards:
        clash = sorted(set(rows) & set(s["rows"]))
        if clash:
            raise MergeError(f"{clash[0][0]}[{clash[0][1]}] is in two shards")
        rows.update(s["rows"])
        probes.update(s["probes"])
        seconds.update(s["seconds"])
    return rows, probes, seconds


def merge(dirs, out: Path, cases_dir: Path) -> str:
    """Merge shard folders into `out`; returns the selection text."""
    from conformance.case.loader import load_cases
    from conformance.runners import all_runners

    shards = load_shards(dirs)
    rows, probes, seconds = merged_state(shards)
    first = shards[0]
    runners = all_runners()
    if [r.name for r in runners] != first["runners"]:
        raise MergeError("the registry differs from the shards' runners "
                         "(CONFORMANCE_EXTRA_RUNNERS as in the shards?)")
    cases = load_cases(cases_dir, {r.name for r in runners})
    if [c.id for c in cases] != first["cases"]:
        raise MergeError(f"{cases_dir}: not the shards' cases (give --cases-dir)")
    full = {(c.id, r.name) for c in cases for r in runners}
    is_full = set(rows) == full and first["default_cases"]
    selection = selection_text(len(rows), first["total"], is_full, first["parts"])
    meta = run_metadata(seconds, {"shards": str(len(shards))})
    out = Path(out)
    write_run_reports(rows, probes, cases, runners, out, selection, meta)
    return selection
