"""The end of a session: decide what the run was (the full default matrix, a subset, a
shard) and write its reports in one step (report/run_reports.py).

The full default matrix rewrites reports/; a subset writes only where --report-dir
points and says so; a shard also writes its shard file (an empty one when it selected
nothing, so that a fixed CI matrix always merges).  The decision is returned as a
RunEnd for the terminal summary, never parsed back out of text.
"""
from __future__ import annotations

from pathlib import Path

from conformance.paths import CASES_DIR, REPORTS_DIR
from conformance.plugin.items import RunEnd, SessionState, session_cases, split


def selection_parts(config) -> list[str]:
    """The options that narrowed the run, as a user typed them."""
    parts = []
    for opt, flag in (("keyword", "-k"), ("markexpr", "-m")):
        value = config.getoption(opt)
        if value:
            parts.append(f"{flag} {value!r}")
    for opt in ("runner", "case"):
        if config.getoption(opt):
            parts.append(f"--{opt} {','.join(split(config.getoption(opt)))}")
    return parts


def _default_cases(config) -> bool:
    return Path(config.getoption("cases_dir")).resolve() == CASES_DIR.resolve()


def finish(config, state: SessionState) -> RunEnd | None:
    """Write what this run owes and say what was written (None: nothing to say)."""
    if not state.rows:
        return _empty_shard(config, state)
    from conformance.report.run_reports import run_metadata, selection_text, write_run_reports

    cases = session_cases(config, state)  # the xdist controller collected nothing
    full = [(c.id, r.name) for c in cases for r in state.runners]
    is_full = (sorted(state.rows) == sorted(full) and _default_cases(config)
               and not state.case_errors)  # a broken case file: not the full matrix
    target, shard, parts = (config.getoption("report_dir"), config.getoption("shard"),
                            selection_parts(config))
    selection = selection_text(len(state.rows), len(full), is_full,
                               parts + ([f"--shard {shard}"] if shard else []))
    if target is None and not is_full:
        return RunEnd(f"conformance: subset run ({selection}); reports/ left unchanged. Add "
                      "--report-dir=DIR to write this run's reports.")
    out = Path(target) if target else REPORTS_DIR
    write_run_reports(state.rows, state.probes, cases, state.runners, out, selection,
                      run_metadata(state.seconds))
    if shard:
        _write_shard(config, state, out, len(full))
    note = _target_report(state, out)
    return RunEnd(f"conformance: reports written to {out} ({selection}){note}", out)


def _target_report(state: SessionState, out: Path) -> str:
    """The judgement of the user's attention (--attention), beside the run's reports:
    index.md where it is the run's only runner (the probe command), else
    attention-<name>.md."""
    from conformance.runners.target import from_environment

    spec = from_environment()
    if spec is None:
        return ""
    from conformance.report.target import write_target_report

    ran = {runner for _case, runner in state.rows}
    name = spec.runner_name()
    page = "index.md" if ran == {name} else f"attention-{name}.md"
    write_target_report(out, name, spec.target, spec.kind, out / page)
    return f"; your attention judged in {out / page}"


def _write_shard(config, state: SessionState, out: Path, total: int) -> None:
    from conformance.plugin.parallel import parse_shard
    from conformance.plugin.shards import write_shard

    write_shard(out, parse_shard(config.getoption("shard")), state, selection_parts(config),
                total, _default_cases(config))


def _empty_shard(config, state: SessionState) -> RunEnd | None:
    """A shard that selected nothing still writes its (empty) shard file."""
    shard, target = config.getoption("shard"), config.getoption("report_dir")
    if not shard or not target or config.option.collectonly:
        return None
    cases = session_cases(config, state)
    _write_shard(config, state, Path(target), len(cases) * len(state.runners))
    return RunEnd(f"conformance: shard {shard} ran nothing; wrote an empty shard file to "
                  f"{target}")


def written_files(out: Path) -> str:
    """The report files a run wrote into `out`, for the terminal summary."""
    from conformance.report.drift import report_names

    names = [n for n in report_names(out) if (out / n).exists()]
    pages = [n for n in names if "/" in n]
    return ("conformance: wrote " + ", ".join(str(out / n) for n in names if "/" not in n)
            + (f" and {len(pages)} case pages in {out / 'cases'}" if pages else ""))
