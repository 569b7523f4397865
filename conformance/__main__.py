"""Command line: `python -m conformance {validate,list,check-reports}`.

The matrix itself runs under pytest (`python -m pytest`); these commands
are the small tools around it: check case files without running anything,
see what each runner makes of each case, and check that committed reports
are fresh (CI).
"""
from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
from pathlib import Path

from .case import CaseError, load_cases
from .paths import CASES_DIR, REPORTS_DIR, ROOT


def _validate(args) -> int:
    from .runners import runner_names

    try:
        cases = load_cases(args.cases_dir, set(runner_names()))
    except CaseError as exc:
        print(f"invalid: {exc}", file=sys.stderr)
        return 1
    print(f"{len(cases)} cases valid in {args.cases_dir}")
    return 0


def _list(args) -> int:
    from .contract import NotExpressible
    from .runners import all_runners

    cases = load_cases(args.cases_dir)
    for case in cases:
        print(f"{case.id}: {case.title}")
        for runner in all_runners():
            t = runner.translate(case)
            text = f"n/e: {t.reason}" if isinstance(t, NotExpressible) else t.call
            print(f"  [{runner.name}] {text}")
    return 0


def _check_reports(args) -> int:
    """Compare a report folder with another one, or with its committed version."""
    from .report import REPORT_FILES, differences

    current = Path(args.reports)
    if args.against:
        baseline = Path(args.against)
    else:
        tmp = Path(tempfile.mkdtemp(prefix="committed-reports-"))
        rel = current.resolve().relative_to(ROOT)
        for name in REPORT_FILES:
            shown = subprocess.run(["git", "-C", str(ROOT), "show", f"{args.rev}:{rel}/{name}"],
                                   capture_output=True)
            if shown.returncode == 0:
                (tmp / name).write_bytes(shown.stdout)
        baseline = tmp
    diffs = differences(baseline, current)
    for line in diffs:
        print(f"stale: {line}", file=sys.stderr)
    if diffs:
        print(f"reports in {current} differ from {args.against or args.rev} outside the "
              "run-metadata block: a result changed. Review `git diff reports/` and commit "
              "the regenerated reports if the change is intended.", file=sys.stderr)
        return 1
    print(f"reports in {current} match {args.against or args.rev} (metadata aside)")
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m conformance", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="command", required=True)
    for name, helptext in (("validate", "check every case file, run nothing"),
                           ("list", "each case and what each runner makes of it")):
        p = sub.add_parser(name, help=helptext)
        p.add_argument("--cases-dir", default=str(CASES_DIR))
    p = sub.add_parser("check-reports", help="fail if reports differ outside the metadata block")
    p.add_argument("reports", nargs="?", default=str(REPORTS_DIR))
    p.add_argument("--against", help="another report folder (default: the committed version)")
    p.add_argument("--rev", default="HEAD", help="git revision to compare with (default HEAD)")
    args = parser.parse_args(argv)
    return {"validate": _validate, "list": _list, "check-reports": _check_reports}[
        args.command](args)


if __name__ == "__main__":
    sys.exit(main())
