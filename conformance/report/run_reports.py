"""Every run's reports, written in one step: a serial run, an xdist controller, one shard
or a merge of shards ends here.

Rows are put in full-matrix order (cases in file order x runners in registry order),
the ledger is built from them and written first (index.md and index.html read
conventions.json), with the ONNX specification's test vectors where the run ran a
runner on one of their engines (report/spec_vectors.py: spec_vectors.md / .json, the
ledger cells they bear on, the headline finding), then every report, all inside one
staging folder swapped in whole (staging.py).  The metadata block holds versions, the
machine, the time and the mean seconds per item of each runner (CPU figures, display
only).
"""
from __future__ import annotations

import datetime as _dt
from pathlib import Path

SECONDS_KEY = "seconds per item by runner"  # results.json metadata (a CPU figure)


def selection_text(ran: int, total: int, is_full: bool, parts: list[str]) -> str:
    """What a run selected, in words, for the reports' header."""
    if is_full:
        return f"full default matrix: {ran} items"
    return "subset: " + ", ".join([f"{ran} of {total} items", *parts])


def seconds_by_runner(seconds: dict) -> dict[str, float]:
    """Mean seconds per item of each runner, from {(case, runner): seconds}."""
    sums: dict[str, list[float]] = {}
    for (_case, runner), s in seconds.items():
        sums.setdefault(runner, []).append(s)
    return {r: round(sum(v) / len(v), 4) for r, v in sorted(sums.items())}


def run_metadata(seconds: dict, extra: dict | None = None) -> dict:
    """The metadata block: versions, machine, time, seconds per item (CPU figures)."""
    from conformance.report.render import machine
    from conformance.versions import versions

    meta = {**versions(), **machine(),
            "time": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds")}
    meta.update(extra or {})
    if seconds:
        meta[SECONDS_KEY] = seconds_by_runner(seconds)
    return meta


def write_run_reports(rows: dict, probes: dict, cases, runners, out: Path, selection: str,
                      meta: dict) -> None:
    """Ledger and reports of `rows` ({(case, runner): Row}) into `out`, whole."""
    from conformance.conventions.ledger import build
    from conformance.report import write_reports
    from conformance.report.ledger import write_ledger
    from conformance.paths import REPORTS_DIR
    from conformance.report.findings import DRIFT_FILES
    from conformance.report.staging import staged
    from conformance.report.spec_vectors import annotate, wanted, write_spec_vectors

    full = [(c.id, r.name) for c in cases for r in runners]
    order = {key: n for n, key in enumerate(full)}
    ordered = sorted(rows.values(), key=lambda r: order.get((r.case, r.runner), 0))
    # the ledger and the reports swapped in together (the drift report, written by its
    # own command, is read for the headline: the folder's own, else the committed one)
    spec = None
    if wanted(ordered, runners):  # the ONNX spec's own vectors per engine (cached)
        from conformance.runners.onnx.spec_cache import spec_results

        spec = spec_results()
    with staged(out, seed=DRIFT_FILES, fallback=REPORTS_DIR) as stage:
        ledger = build(ordered, probes, runners, cases)
        if spec is not None:
            ledger = annotate(ledger, spec)
            write_spec_vectors(spec, stage)
        write_ledger(ledger, stage)
        write_reports(ordered, cases, runners, stage, selection, meta)
