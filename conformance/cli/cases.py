"""The case commands of the CLI: validate, list, show (new: new.py)."""
from __future__ import annotations

import json
import sys
from dataclasses import asdict
from pathlib import Path

from conformance.case.loader import CaseError
from conformance.cli.new import new  # noqa: F401  (the `new` command)
from conformance.paths import CASES_DIR
from conformance.cli.text_safety import say


def _files(paths: list[str]) -> tuple[list[Path], list[str], list[CaseError]]:
    """The files to check, the entries skipped (named) and the entries refused
    (case/discovery.py: a folder's lock files, FIFOs, directories, links out)."""
    from conformance.case.discovery import discover

    files, skipped, refused = [], [], []
    for p in [Path(p) for p in (paths or [str(CASES_DIR)])]:
        if p.is_dir():
            found = discover(p)
            files, skipped, refused = (files + found.files, skipped + found.skipped,
                                       refused + found.refused)
        else:
            files.append(p)
    return files, skipped, refused


def _error(exc: CaseError) -> dict:
    return {"case": exc.case_id, "field": exc.field_name, "message": str(exc)}


def _check_file(path: Path, names: set[str], seen: dict[str, str]) -> dict:
    """One file's report: {file, ok, cases, error (the first), errors (every one)}."""
    from conformance.case.loader import file_report, load_budget

    entry = {"file": str(path), "ok": True, "cases": [], "error": None, "errors": []}
    try:
        if not path.is_file():
            raise CaseError(path, None, "(file)", "not a regular file" if path.exists()
                            else "no such file")
        cases, errors = file_report(path, names, seen, load_budget())
        entry["cases"] = [case.id for case in cases]
        entry["errors"] = [_error(e) for e in errors]
    except CaseError as exc:
        entry["errors"] = [_error(exc)]
    except (OSError, UnicodeDecodeError) as exc:
        entry["errors"] = [{"case": None, "field": "(file)", "message": f"{path}: {exc}"}]
    entry.update(ok=not entry["errors"], error=(entry["errors"] or [None])[0])
    return entry


def validate(args) -> int:
    """Every file checked and reported; exit 1 when any is invalid."""
    from conformance.runners import runner_names

    names, seen = set(runner_names()), {}
    files, skipped, refused = _files(args.paths)
    report = [_check_file(p, names, seen) for p in files]
    report += [{"file": str(e.path), "ok": False, "cases": [], "error": _error(e),
                "errors": [_error(e)]} for e in refused]
    for entry in skipped:
        say(f"skipped {entry}", file=sys.stderr)
    bad = [e for e in report if not e["ok"]]
    if args.json:
        print(json.dumps({"ok": not bad, "files": report}, indent=1))
    else:
        for e in report:
            if e["ok"]:
                say(f"ok      {e['file']}: {len(e['cases'])} case(s)")
            for err in e["errors"]:
                say(f"invalid {err['message']}", file=sys.stderr)
        total = sum(len(e["cases"]) for e in report)
        print(f"{len(report) - len(bad)} of {len(report)} file(s) valid, {total} case(s)"
              + (f"; {len(bad)} invalid" if bad else ""))
    return 1 if bad or not report else 0


def _translations(case):
    """Each runner and its native call for `case` (or why it cannot express it); a
    runner whose translate raises is named with the error, and the others still shown."""
    from conformance.contract.runner import NotExpressible
    from conformance.runners import all_runners

    for runner in all_runners():
        try:
            t = runner.translate(case)
        except Exception as exc:  # a runner's bug: one line, not a traceback
            yield runner, f"translate failed: {type(exc).__name__}: {exc}"
            continue
        yield runner, (f"n/e: {t.reason}" if isinstance(t, NotExpressible) else t.call)


def _good_cases(command: str, directory) -> tuple[list, int]:
    """The folder's good cases, each bad file or entry named on one stderr line
    (`command: <error>`), so one bad file hides none of the others; and how many
    were bad."""
    from conformance.case.discovery import discover
    from conformance.case.loader import load_cases_report

    if not Path(directory).is_dir():
        say(f"{command}: {directory}: not a folder of case files (give --cases-dir)",
            file=sys.stderr)
        return [], 1
    cases, errors = load_cases_report(directory)
    for entry in discover(directory).skipped:
        say(f"{command}: skipped {entry}", file=sys.stderr)
    for error in errors:
        say(f"{command}: invalid {error}", file=sys.stderr)
    return cases, len(errors)


def list_cases(args) -> int:
    """Each good case and each runner's call; exit 1 when any file was bad."""
    cases, bad = _good_cases("list", args.cases_dir)
    for case in cases:
        say(f"{case.id}: {case.title}")
        for runner, text in _translations(case):
            say(f"  [{runner.name}] {text}")
    return 1 if bad else 0


def _last_rows(path: str, case_id: str) -> dict[str, dict]:
    """The last results' rows of one case, read as untrusted data (datafile.py: bounded,
    a regular file); an unreadable file shows no figures."""
    from conformance.datafile import DataFileError
    from conformance.report.results_files import read_results

    try:
        data = read_results(path)
    except DataFileError:
        return {}
    rows = data.get("rows", []) if isinstance(data, dict) else []
    return {r["runner"]: r for r in rows if isinstance(r, dict)
            and isinstance(r.get("runner"), str) and r.get("case") == case_id}


def _configuration(case) -> list[str]:
    lines = []
    for part in ("attention", "inputs", "mask", "weights"):
        values = {k: v for k, v in asdict(getattr(case, part)).items() if v not in (None, ())}
        lines.append(f"  {part}: " + ", ".join(f"{k}={v}" for k, v in values.items()))
    e = case.expect
    if e.parameters is not None or e.parameters_by_runner:
        lines.append(f"  expect.parameters: {e.parameters} {dict(e.parameters_by_runner) or ''}")
    for edge, per in e.behaviours.items():
        lines.append(f"  expect.behaviours.{edge}: {dict(per)}")
    for name, why in e.known_mismatch.items():
        lines.append(f"  expect.known_mismatch.{name}: {why}")
    return lines


def _figures(row: dict | None) -> str:
    if not row:
        return "not in the last results"
    from conformance.report.base import fmt

    text = f"{row['outcome']}; parameters {row.get('parameters')}"
    if row.get("max_abs_error") is not None:
        text += f"; max abs {fmt(row['max_abs_error'])}, max rel {fmt(row['max_rel_error'])}"
    return text


def show(args) -> int:
    """One case; the folder's other bad files are named (stderr), never a traceback."""
    from conformance.oracle.reference import formula_parameters

    cases = {c.id: c for c in _good_cases("show", args.cases_dir)[0]}
    case = cases.get(args.case)
    if case is None:
        say(f"no case {args.case!r} in {args.cases_dir}; known: {', '.join(cases)}",
            file=sys.stderr)
        return 1
    say(f"{case.id}: {case.title}  ({case.path})")
    if case.typed:
        say("  typed by the user: " + ", ".join(f"{k}={v}" for k, v in case.typed.items()))
    say(*_configuration(case))
    say(f"  parameters by the formula: {formula_parameters(case)}")
    last = _last_rows(args.results, case.id)
    say(f"runners (figures from {args.results if last else 'no results.json row'}):")
    for runner, text in _translations(case):
        say(f"  [{runner.name}] {text}", f"      last run: {_figures(last.get(runner.name))}")
    return 0
