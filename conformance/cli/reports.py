"""The report commands of the CLI: report (re-render), check-reports (drift), merge (shards)."""
from __future__ import annotations

import subprocess
import sys
import tempfile
from pathlib import Path

from conformance.paths import ROOT
from conformance.cli.text_safety import say  # untrusted text: shown, not obeyed


def report(args) -> int:
    """Every report re-rendered from results.json; nothing runs.  The file is read as
    untrusted data (report/results.py); a bad one is one error naming it."""
    from conformance.report import write_reports
    from conformance.report.results import rows_from_results
    from conformance.report.staging import check_writable

    results = Path(args.results)
    if not results.exists() and not results.is_symlink():
        say(f"report: no {results}; run the matrix first (python -m pytest)", file=sys.stderr)
        return 1
    out = Path(args.out) if args.out else results.parent
    check_writable(out, "--out")  # a file, or a folder that cannot be written: one line
    rows, cases, runners, selection, meta = rows_from_results(results)
    paths = write_reports(rows, cases, runners, out, selection, meta)
    say(f"re-rendered {len(paths)} file(s) in {out} from {results} ({len(rows)} rows)")
    return 0


def _committed(current: Path, rev: str, tmp: Path) -> Path:
    """The report files of `current` as committed at `rev`, in the folder `tmp`.  A folder
    outside the repository has no committed version: one error naming the fix."""
    from conformance.datafile import DataFileError

    try:
        rel = current.resolve().relative_to(ROOT)
    except ValueError:
        raise DataFileError(current, f"outside the repository ({ROOT}), so it has no "
                            f"committed version at {rev}: compare it with another report "
                            "folder by --against DIR") from None
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


def _readable(folder: Path) -> None:
    """Every report file of `folder` is a regular file within the size bound, inside the
    folder (a FIFO, a device, a directory, or a symlink leading out of the folder, its
    own or a subfolder's, is refused before anything reads it: the comparison prints
    what differs, and must not print a file from elsewhere)."""
    from conformance.datafile import DataFileError, max_bytes, regular_file
    from conformance.report.drift import report_names

    if not folder.is_dir():
        raise DataFileError(folder, "not a report folder")
    root, limit = folder.resolve(), max_bytes()
    for name in report_names(folder):
        path = folder / name
        if path.exists() or path.is_symlink():
            regular_file(path, "a report file")  # stat only: a FIFO, a device, a folder
            if root not in path.resolve().parents:
                raise DataFileError(path, f"a symlink leading out of {folder}; refused "
                                    "(a report folder holds its own files)")
            if path.stat().st_size > limit:
                raise DataFileError(path, f"larger than {limit:,} bytes")


def check_reports(args) -> int:
    """Compare a report folder with another one, or with its committed version."""
    from conformance.datafile import DataFileError
    from conformance.report import compare_reports

    current = Path(args.reports)
    with tempfile.TemporaryDirectory(prefix="committed-reports-") as tmp:  # always removed
        baseline = Path(args.against) if args.against else _committed(current, args.rev,
                                                                       Path(tmp))
        try:
            _readable(baseline)
            _readable(current)
            changes = compare_reports(baseline, current)
        except (ValueError, UnicodeDecodeError) as exc:  # bad JSON or CSV in a report file
            if isinstance(exc, DataFileError):
                raise
            raise DataFileError(current, f"a report file cannot be compared: "
                                f"{type(exc).__name__}: {str(exc)[:200]}") from None
    for c in changes:
        say(f"changed: {c}", file=sys.stderr)
    what = args.against or args.rev
    if changes:
        say(f"{len(changes)} change(s) in {current} against {what}: a result changed "
              "(what belongs to the systems is compared exactly; CPU-dependent figures "
              "and quoted kernel details are masked; see docs/reports.md). Review `git diff "
              "reports/` and commit the regenerated reports if intended.", file=sys.stderr)
        return 1
    say(f"reports in {current} match {what} (metadata aside, CPU-dependent figures "
          "masked)")
    return 0


def merge(args) -> int:
    """Shards of one run (--shard I/N --report-dir DIR) into one run's reports."""
    from conformance.plugin.shards import MergeError
    from conformance.plugin.shards import merge as merge_shards

    from conformance.case.loader import CaseError

    from conformance.report.staging import check_writable

    check_writable(Path(args.out), "--out")  # before any shard is read: one line
    try:
        selection = merge_shards(args.shards, Path(args.out), Path(args.cases_dir))
    except (MergeError, CaseError) as exc:
        say(f"merge: {exc}", file=sys.stderr)
        return 1
    say(f"merged {len(args.shards)} shard(s) into {args.out} ({selection})")
    return 0
