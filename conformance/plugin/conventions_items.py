"""The conventions items of the pytest plugin: one per runner, after the matrix.

`expectations/<runner>.yaml::conventions[<runner>]` gathers the runner's ledger
cells (its probes, run once per session, in its worker when it has one, and
the cells derived from the matrix rows recorded so far) and compares them with
the values pinned in that file's `conventions:` (pinning.py).  The file need not
exist: a runner with nothing pinned fails with the lines to add.  Aggregates over
the cases (refusals, parameter formula, weight layout) and axes no row of this run
settles are compared only when the runner's matrix ran in full; a subset run
checks what it observed.
"""
from __future__ import annotations

from pathlib import Path

import pytest
from _pytest.runner import collect_one_node

from conformance.conventions import pinning
from conformance.conventions.axes import Convention
from conformance.conventions.probes import LEDGER_CELLS, ledger_cells
from conformance.conventions.ledger import (
    AGGREGATE_AXES, CONFLICT, PROBE, cell_problem, derive, merge)
from conformance.plugin.items import (
    ItemsFile, marked, selected_runners, session_expectations, session_state)


class ConventionsFile(ItemsFile):
    """`expectations/<runner>.yaml`: the conventions item of its runner, if selected."""

    def collect(self):
        state = session_state(self.config)
        for runner in selected_runners(state):
            if runner.name == self.path.stem:
                yield marked(ConventionsItem.from_parent(
                    self, name=f"conventions[{runner.name}]", runner=runner), runner,
                    "conventions")


def add_conventions_items(session, directory, items) -> None:
    """One conventions item per selected runner that has none among `items`, collected
    from its expectations file as if it had been named (the file may not exist yet)."""
    from conformance.conventions.expectations import path_for

    have = {i.runner.name for i in items if isinstance(i, ConventionsItem)}
    for runner in selected_runners(session_state(session.config)):
        if runner.name in have:
            continue
        node = ConventionsFile.from_parent(session, path=path_for(directory, runner.name))
        report = collect_one_node(node)
        session.ihook.pytest_collectreport(report=report)
        if report.passed:
            items.extend(report.result)


class ConventionsFailure(Exception):
    pass


def probe_cells(state, runner):
    """The runner's probe Conventions, run once per session (an exception is kept), read
    from the cache when an earlier run probed the same code, data and libraries
    (run/probe_cache.py); a probe that answered is stored there."""
    from conformance.run import probe_cache

    probes = state.probes
    if runner.name not in probes:
        cached = probe_cache.read(runner, LEDGER_CELLS, Convention)
        if cached is not None:
            probes[runner.name] = cached
            return cached
        try:
            if runner.worker:
                from conformance.run.workers import conventions_in_worker

                probes[runner.name] = list(conventions_in_worker(runner, LEDGER_CELLS))
            else:
                probes[runner.name] = list(ledger_cells(runner))
        except Exception as exc:  # a failure of this item, never of the session
            probes[runner.name] = exc
        else:
            probe_cache.write(runner, LEDGER_CELLS, probes[runner.name], Convention)
    return probes[runner.name]


def _complete(state, runner) -> bool:
    """Every case of the cases directory has a row of this runner in this run."""
    cases = state.cases or []
    return bool(cases) and all((c.id, runner.name) in state.rows for c in cases)


def _paired(config) -> bool:
    """The expectations directory goes with the cases directory: both the defaults, or
    both chosen (a chosen cases directory with the shipped expectations is not)."""
    from conformance.paths import CASES_DIR

    default = Path(config.getoption("cases_dir")).resolve() == CASES_DIR.resolve()
    return default != bool(config.getoption("expectations_dir"))


def _stale_answers(runner, expected, cases) -> list[str]:
    """An extreme-input answer that names no case of the directory pins nothing."""
    ids = {c.id for c in cases}
    return [f"{runner.name}: {expected.path}: behaviours.nonfinite_input.{i}: names no case "
            "of the cases directory; remove it" for i in sorted(set(expected.nonfinite_input)
                                                               - ids)]


class ConventionsItem(pytest.Item):
    def __init__(self, *, runner, **kwargs):
        super().__init__(**kwargs)
        self.runner = runner

    def runtest(self):
        state, runner = session_state(self.config), self.runner
        path, expected = self.path, session_expectations(self.config).get(runner.name)
        missing = runner.available()
        if missing:
            pytest.skip(f"{runner.name}: skipped: {missing}")
        probe = probe_cells(state, runner)
        rows = [r for r in state.rows.values() if r.runner == runner.name]
        cells = merge(runner.name, probe, derive(rows, [runner], state.cases),
                      state.probes)
        problems = []
        if isinstance(probe, BaseException):
            from conformance.run.workers import described

            problems.append(f"{runner.name}: conventions() raised {described(probe)}")
        else:
            problems += [f"{runner.name}: probe cell {p}" for p in
                         (cell_problem(c) for c in probe) if p]
        complete = _complete(state, runner)
        if complete and expected is not None and _paired(self.config):
            problems += _stale_answers(runner, expected, state.cases)
        compared = {c.axis for c in cells if complete or c.source == PROBE
                    or (c.observed and c.axis not in AGGREGATE_AXES)}
        split = [c for c in cells if c.value == CONFLICT]  # never pinned: a failure
        problems += [f"{runner.name}: {c.axis}: two witnesses disagree: {c.evidence}"
                     for c in split]
        compared -= {c.axis for c in split}
        if not runner.pinned:
            pass  # the user's attention (runners/target/): its cells are reported, not pinned
        elif self.config.getoption("update_expectations"):
            pinning.update(path, runner.name, cells, compared)
        else:
            problems += pinning.check(runner.name, cells,
                                      dict(expected.conventions) if expected else None,
                                      compared, path)
        if problems:
            raise ConventionsFailure("\n".join(problems))

    def repr_failure(self, excinfo):
        if isinstance(excinfo.value, ConventionsFailure):
            return str(excinfo.value)
        return super().repr_failure(excinfo)

    def reportinfo(self):
        return self.path, 0, f"conventions[{self.runner.name}]"
