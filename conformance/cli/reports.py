"""The report commands of the CLI: report (re-render), check-reports (drift), merge (shards)."""
from __future__ import annotations

import subprocess
import sys
import tempfile
from pathlib import Path

from conformance.paths import ROOT


def report(args) -> int:
    """Every report re-rendered from results.json; nothing runs."""
    from conformance.report import write_reports
    from conformance.report.results import rows_from_results

    results = Path(args.results)
    if not results.exists():
        print(f"report: no {results}; run the matrix first (python -m pytest)", file=sys.stderr)
        return 1
    rows, cases, runners, selection, meta = rows_from_results(results)
    out = Path(args.out) if args.out else results.parent
    paths = write_reports(rows, cases, runners, out, selection, meta)
    print(f"re-rendered {len(paths)} file(s) in {out} from {results} ({len(rows)} rows)")
    return 0


def _committed(current: Path, rev: str) -> Path:
    """The report files of `current` as committed at `rev`, in a temporary folder."""
    tmp = Path(tempfile.mkdtemp(prefix="committed-reports-"))
    rel = current.resolve().relative_to(ROOT)
    listed = subprocess.run(["git", "-C", str(ROOT), "ls-tree", "-r", "--name-only", rev, "--",
                             f"{rel}/"], capture_output=True, text=True)
    for name in listed.stdout.splitlines():
        inside = Path(name).relative_to(rel)
        if inside.suffix not in (".md", ".json", ".csv", ".html"):
            continue
        shown = subprocess.run(["git", "-C", str(ROOT), "show", f"{rev}:{name}"],
                               capture_output=True)
        if shown.returncode == 0:
            (tmp / inside).parent.mkdir(parents=True, exist_ok=True)
            (tmp / inside).write_bytes(shown.stdout)
    return tmp


def check_reports(args) -> int:
    """Compare a report folder with another one, or with its committed version."""
    from conformance.report import compare_reports

    current = Path(args.reports)
    baseline = Path(args.against) if args.against else _committed(current, args.rev)
    changes = compare_reports(baseline, current)
    for c in changes:
        print(f"changed: {c}", file=sys.stderr)
    what = args.against or args.rev
    if changes:
        print(f"{len(changes)} change(s) in {current} against {what}: a result changed "
              "(what belongs to the systems is compared exactly; CPU-dependent figures "
              "and quoted kernel details are masked; see README). Review `git diff "
              "reports/` and commit the regenerated reports if intended.", file=sys.stderr)
        return 1
    print(f"reports in {current} match {what} (metadata aside, CPU-dependent figures "
          "masked)")
    return 0


def merge(args) -> int:
    """Shards of one run (--shard I/N --report-dir DIR) into one run's reports."""
    from conformance.plugin.shards import MergeError
    from conformance.plugin.shards import merge as merge_shards

    try:
        selection = merge_shards(args.shards, Path(args.out), Path(args.cases_dir))
    except MergeError as exc:
        print(f"merge: {exc}", file=sys.stderr)
        return 1
    print(f"merged {len(args.shards)} shard(s) into {args.out} ({selection})")
    return 0
