"""The pytest session state and the matrix's items, apart from the hooks (plugin/__init__.py),
so that the plugin's helper modules (conventions items, parallel runs, generated
cases) import them without importing the plugin.

`session_state(config)` is one SessionState per session, in the pytest stash: the
runners, the selection, the cases and what the run recorded so far.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import pytest

from conformance.case.expectations import Expectations, declared
from conformance.case.loader import load_cases_report
from conformance.run.evaluate import evaluate, failure_message
from conformance.runners import all_runners
from conformance.compare.verdict import Outcome



@dataclass
class RunEnd:
    """What the end of the session did with the reports, for the terminal summary."""

    note: str  # one line for people: where the reports went, or why none were written
    written_to: Path | None = None  # the folder the reports were written to, if any


@dataclass
class SessionState:
    """The matrix's state in one pytest session: set up at configure, filled by the
    items (and, under xdist, by the workers' reports), read at the session's end."""

    runners: list  # every registered runner, in registry order
    chosen_runners: list[str]  # --runner (empty: all)
    chosen_cases: list[str]  # --case (empty: all)
    cases: list | None = None  # the cases directory's good cases, once loaded
    case_errors: list = field(default_factory=list)  # bad case files: one error item each
    skipped_entries: list = field(default_factory=list)  # odd entries, named at the end
    rows: dict = field(default_factory=dict)  # (case id, runner name) -> Row
    probes: dict = field(default_factory=dict)  # runner name -> its probe cells
    seconds: dict = field(default_factory=dict)  # (case id, runner name) -> seconds
    prefetched: set = field(default_factory=set)  # cases queued in worker runners
    end: RunEnd | None = None  # set by the session's end (plugin/run_end.py)


STATE_KEY = pytest.StashKey[SessionState]()
EXPECTATIONS_KEY = pytest.StashKey[dict]()  # runner -> Expectations, loaded once


def split(values: list[str]) -> list[str]:
    return [v for item in values for v in item.split(",") if v]


def session_state(config) -> SessionState:
    if STATE_KEY not in config.stash:
        runners = all_runners()
        names = [r.name for r in runners]
        chosen = split(config.getoption("runner"))
        unknown = sorted(set(chosen) - set(names))
        if unknown:
            raise pytest.UsageError(f"--runner {unknown[0]}: unknown; known runners: {names}")
        config.stash[STATE_KEY] = SessionState(runners, chosen,
                                               split(config.getoption("case")))
    return config.stash[STATE_KEY]


def session_cases(config, state):
    """All good cases of the directory, loaded and checked once per session; a bad
    file or entry is kept in state.case_errors (an error item of its file), a
    skipped entry in state.skipped_entries (named at the end): none hides the
    other files' cases (case/discovery.py)."""
    if state.cases is None:
        from conformance.case.discovery import discover

        directory = config.getoption("cases_dir")
        state.cases, state.case_errors = load_cases_report(
            directory, {r.name for r in state.runners})
        state.skipped_entries = discover(directory).skipped
        unknown = sorted(set(state.chosen_cases) - {c.id for c in state.cases})
        if unknown:  # a --case that matches nothing
            raise pytest.UsageError(f"--case {unknown[0]}: no such case id in "
                                    f"{directory} (python -m conformance list shows them)")
    return state.cases


def expectations_dir(config) -> Path:
    from conformance.conventions.expectations import EXPECTATIONS_DIR

    return Path(config.getoption("expectations_dir") or EXPECTATIONS_DIR)


def session_expectations(config) -> dict[str, Expectations]:
    """Every runner's expectations file, read and validated once per session; a bad one
    is a usage error naming the file, the field and the fix."""
    if EXPECTATIONS_KEY not in config.stash:
        from conformance.conventions.expectations import ExpectationError, load_dir

        names = [r.name for r in session_state(config).runners]
        try:
            config.stash[EXPECTATIONS_KEY] = load_dir(expectations_dir(config), names)
        except ExpectationError as exc:
            raise pytest.UsageError(str(exc)) from None
    return config.stash[EXPECTATIONS_KEY]


def selected_runners(state) -> list:
    """The session's runners that --runner chose (all of them when it chose none)."""
    chosen = state.chosen_runners
    return [r for r in state.runners if not chosen or r.name in chosen]


def marked(item, runner, kind: str):
    """`item` with its runner's framework marker and `kind` (matrix, conventions, ...)."""
    item.add_marker(runner.framework)
    item.add_marker(kind)
    return item


class ItemsFile(pytest.File):
    """A file of items whose collection error is shown as its message alone."""

    def repr_failure(self, excinfo):
        if isinstance(excinfo.value, self.CollectError):
            return str(excinfo.value.args[0])
        return super().repr_failure(excinfo)


class CaseFileError(pytest.Item):
    """A case file (or entry) that cannot be used: one failing item naming it, so the
    other files' items still run and the run says what is wrong."""

    def __init__(self, *, errors, case_path, **kwargs):
        super().__init__(**kwargs)
        self.errors, self.case_path = errors, case_path

    def runtest(self):
        raise MatrixFailure("\n".join(str(e) for e in self.errors))

    def repr_failure(self, excinfo):
        return str(excinfo.value) if isinstance(excinfo.value, MatrixFailure) \
            else super().repr_failure(excinfo)

    def reportinfo(self):
        return self.case_path, 0, f"{self.case_path.name}: case file error"


def case_items(parent, case_path: Path):
    """The items of one case file: its error item (if any of its cases or the file is
    bad), then one MatrixItem per (chosen case x selected runner)."""
    session = session_state(parent.config)
    cases = session_cases(parent.config, session)
    errors = [e for e in session.case_errors
              if Path(e.path).absolute() == case_path.absolute()]
    if errors:
        yield CaseFileError.from_parent(parent, name="case-file-error", errors=errors,
                                        case_path=case_path)
    chosen = session.chosen_cases
    for case in cases:
        if Path(case.path).resolve() != case_path.resolve():
            continue
        if chosen and case.id not in chosen:
            continue
        for runner in selected_runners(session):
            yield marked(MatrixItem.from_parent(parent, name=f"{case.id}[{runner.name}]",
                                                case=case, runner=runner), runner, "matrix")


class CaseFile(ItemsFile):
    """A case file that pytest found on a path it was given (the default cases/)."""

    def collect(self):
        yield from case_items(self, self.path)


class ListedCases(pytest.Collector):
    """The case files of `--cases-dir DIR`, listed by the suite itself (discovery.py),
    never by pytest walking DIR: a folder of someone else's cases is data, so its
    conftest.py, test_*.py or pytest.ini is never imported, collected or read (pytest
    imports a folder's conftest.py when it collects that folder).  Its node sits under
    the session, at the session's path: pytest looks conftest.py files up by node path."""

    def collect(self):
        from conformance.case.discovery import discover

        session = session_state(self.config)
        session_cases(self.config, session)  # the folder's errors, refused links included
        directory = Path(self.config.getoption("cases_dir")).absolute()
        listed = {p.absolute() for p in discover(directory).files}
        listed |= {Path(e.path).absolute() for e in session.case_errors}
        for case_path in sorted(listed, key=lambda p: p.name):
            yield ListedCaseFile.from_parent(self, name=case_path.name, case_path=case_path,
                                             nodeid=listed_id(self.config, case_path))

    def repr_failure(self, excinfo):
        if isinstance(excinfo.value, self.CollectError):
            return str(excinfo.value.args[0])
        return super().repr_failure(excinfo)


def add_listed_cases(session, items: list) -> None:
    """Collect --cases-dir's files (ListedCases) and append their items to `items`:
    pytest reports each collector as it reports the ones it found itself."""
    folder = Path(session.config.getoption("cases_dir")).absolute()
    listed = ListedCases.from_parent(session, name=folder.name,
                                     nodeid=listed_id(session.config, folder))
    items.extend(session.genitems(listed))


def listed_id(config, case_path: Path) -> str:
    """A listed case file's node id: its path from the rootdir when inside it, else its
    name (as pytest names a file under a folder it was given), so matrix items keep the
    `<file>.yaml::<case>[<runner>]` form that progress and xdist grouping read."""
    try:
        return case_path.relative_to(config.rootpath).as_posix()
    except ValueError:
        return case_path.name


class ListedCaseFile(pytest.Collector):
    """One case file of --cases-dir: its items, from the file's cases the suite loaded.
    Its node path stays the session's (ListedCases says why)."""

    def __init__(self, *, case_path: Path, **kwargs):
        super().__init__(**kwargs)
        self.case_path = case_path

    def collect(self):
        yield from case_items(self, self.case_path)

    def repr_failure(self, excinfo):
        if isinstance(excinfo.value, self.CollectError):
            return str(excinfo.value.args[0])
        return super().repr_failure(excinfo)


class MatrixFailure(Exception):
    pass


class MatrixItem(pytest.Item):
    def __init__(self, *, case, runner, **kwargs):
        super().__init__(**kwargs)
        self.case, self.runner = case, runner

    def runtest(self):
        from time import perf_counter

        start = perf_counter()
        expected = session_expectations(self.config).get(self.runner.name)
        row = evaluate(self.case, self.runner, expected)
        if self.config.getoption("update_expectations"):
            from conformance.plugin.updating import record_answers

            row, fresh = record_answers(expectations_dir(self.config), self.case,
                                        self.runner, row, expected)
            if fresh is not None:
                self.config.stash[EXPECTATIONS_KEY][self.runner.name] = expected = fresh
        recorded, key = session_state(self.config), (self.case.id, self.runner.name)
        recorded.rows[key] = row
        recorded.seconds[key] = perf_counter() - start
        if row.outcome.skips:
            label = ("not expressible" if row.outcome is Outcome.NOT_EXPRESSIBLE
                     else "skipped")
            pytest.skip(f"{self.runner.name}: {label}: {row.reason}")
        if row.outcome.failed and row.known_mismatch:
            pytest.xfail(f"known mismatch: {row.known_mismatch} | observed: {row.reason}")
        if row.outcome.failed:
            raise MatrixFailure(failure_message(self.case, row, self.nodeid))
        known = declared(self.case, self.runner.name, expected)
        if row.known_mismatch and known.strict:  # a fixed mismatch must be noticed
            raise MatrixFailure(
                f"{self.case.id}[{self.runner.name}] passed, but a known mismatch is declared "
                f"({row.known_mismatch}); remove {known.source}, or narrow its 'when'")

    def repr_failure(self, excinfo):
        # The message says it all; pytest's traceback rendering parses the source
        # of every frame (~0.3 s an item), and xfails pass through here too.
        if isinstance(excinfo.value, (MatrixFailure, pytest.xfail.Exception)):
            return str(excinfo.value)
        return super().repr_failure(excinfo)

    def reportinfo(self):
        return Path(self.case.path).absolute(), 0, f"{self.case.id}[{self.runner.name}]"


