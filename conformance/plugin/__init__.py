"""The pytest plugin: one item per (case x runner), one report per run.

Collection reads `cases/*.yaml` (no framework is imported), yields items
named `<case-id>[<runner>]` with a marker per framework, and each item
evaluates itself (run/evaluate.py), records its Row and turns the outcome into
pass / skip / fail, judged against what the runner's expectations file
(`expectations/<runner>.yaml`) and the case declare.  After the matrix, one item
per runner checks its conventions ledger cells against the `conventions:` of that
file (conventions_items.py; --update-expectations writes observed values instead).
At the end of the session the rows go to the report package, and the ledger to
reports/conventions.{json,md}.

The full default matrix writes `reports/` (the committed scoreboard); a
subset run (-k, -m, --runner, --case) writes nothing there unless given
`--report-dir DIR`, so a partial run never overwrites the full scoreboard.
"""
from __future__ import annotations

from conformance.plugin import plain_imports  # first: the suite's imports are not rewritten

from pathlib import Path

import pytest

from conformance.plugin import generated
from conformance.plugin.items import (
    STATE_KEY, CaseFile, MatrixItem, expectations_dir, session_expectations, session_state)
from conformance.paths import CASES_DIR, REPORTS_DIR
from conformance.runners import all_runners


PRUNED_KEY = pytest.StashKey[str]()  # what pruning the cache removed, for the summary
ATTENTION_KEY = pytest.StashKey[object]()  # CONFORMANCE_ATTENTION before --attention set it
FIGURES_KEY = pytest.StashKey[object]()  # the process's figure setting before this run's


def pytest_addoption(parser):
    group = parser.getgroup("conformance", "attention conformance matrix")
    group.addoption("--runner", action="append", default=[], metavar="NAME",
                    help="run only these runners (repeat or comma-separate), e.g. torch.mha")
    group.addoption("--case", action="append", default=[], metavar="ID",
                    help="run only these case ids (repeat or comma-separate)")
    group.addoption("--report-dir", default=None, metavar="DIR",
                    help="write this run's reports to DIR (any run, full or subset)")
    group.addoption("--cases-dir", default=str(CASES_DIR), metavar="DIR",
                    help="where case files live (default: cases/)")
    group.addoption("--expectations-dir", default=None, metavar="DIR",
                    help="where the runners' expectations live, one <runner>.yaml each "
                    "(behaviours, known mismatches, pinned conventions; default: expectations/)")
    group.addoption("--item-timeout", type=float, default=None, metavar="SECONDS",
                    help="fail an item that runs longer as an error row (a hung worker is "
                    "killed and restarted; default $CONFORMANCE_ITEM_TIMEOUT or 300; 0: none)")
    group.addoption("--isolate", action="store_true", default=None,
                    help="run every runner in a worker subprocess, so a hard crash costs one "
                    "row (the default, unless $CONFORMANCE_ISOLATE=0)")
    group.addoption("--no-isolate", dest="isolate", action="store_false",
                    help="run runners without their own worker in the pytest process (a hard "
                    "crash there ends the session; CONFORMANCE_ISOLATE=0)")
    group.addoption("--max-elements", type=int, default=None, metavar="N",
                    help="numbers budget: a case with more weight or activation elements "
                    "is counted, not computed (a 'count only' row: parameters by the "
                    "runner's allocation-free count); default $CONFORMANCE_MAX_WEIGHT_ELEMENTS"
                    " / $CONFORMANCE_MAX_ACTIVATION_ELEMENTS, else 50,000,000")
    group.addoption("--update-expectations", "--update-conventions", action="store_true",
                    dest="update_expectations", default=False,
                    help="write observed conventions and fully-masked / non-finite behaviours "
                    "into expectations/<runner>.yaml (for review) instead of failing on them")
    group.addoption("--shard", default=None, metavar="I/N",
                    help="run shard I of N: whole runners (a worker's runners together), "
                    "balanced by expected seconds (parallel.py); write with --report-dir, "
                    "combine with `python -m conformance merge`")
    group.addoption("--cache-limit", default=None, metavar="SIZE",
                    help="prune the shared cache of converted artefacts to SIZE at the end "
                    "of the run, least recently used first (default $CONFORMANCE_CACHE_LIMIT "
                    "or 2GB; 0: no limit)")
    group.addoption("--attention", default=None, metavar="TARGET",
                    help="add your attention to this run as a runner: module:function (kinds "
                    "sdpa, torch-mha), an .onnx file (onnx) or a transformers model_type (hf); "
                    "runs your code by design (docs/probe.md)")
    group.addoption("--attention-kind", default="sdpa", metavar="KIND",
                    help="what --attention is: sdpa, torch-mha, onnx or hf (default sdpa)")
    group.addoption("--attention-array", default="numpy", metavar="LIB",
                    help="the arrays an sdpa --attention takes: numpy, torch, jax or mlx")
    group.addoption("--attention-name", default="", metavar="NAME",
                    help="its column in the reports (default target.<function>)")
    group.addoption("--no-progress", action="store_true", default=False,
                    help="no progress line (per runner family n/N and the time left, shown "
                    "while the run waits on conversions)")
    generated.add_options(group)  # --generated N: generated cases (generated.py)


def pytest_configure(config):
    """One marker per runner framework (so `-m torch` works under --strict-markers)."""
    plain_imports.unmark()  # an in-process run's own hook marked the package again
    _attention_target(config)  # before any registry read: it is one of the runners
    for framework in sorted({r.framework for r in all_runners()}):
        config.addinivalue_line("markers", f"{framework}: matrix items of {framework} runners")
    from conformance.run import counting

    counting.configure(config.getoption("max_elements"))  # before any item allocates
    config.addinivalue_line("markers", "matrix: a (case x runner) item of the matrix")
    config.addinivalue_line("markers", "conventions: a runner's pinned conventions (ledger)")
    state = _configured(config)  # bad settings, --runner, --report-dir: usage errors now
    session_expectations(config)  # so is a bad expectations file
    _collect_cases_dir(config)
    generated.configure(config)
    from conformance.run import isolation
    from conformance.settings import item_timeout

    isolate = config.getoption("isolate")
    isolation.configure(item_timeout(config.getoption("item_timeout")),
                        isolation.env_isolate() if isolate is None else isolate,
                        state.runners)
    from conformance.plugin import parallel

    parallel.configure(config)  # xdist: loadgroup, rows sent to the controller
    from conformance.plugin import progress

    progress.configure(config)  # the controller's progress line (its events folder)


def _attention_target(config) -> None:
    """--attention: the user's implementation joins the registry for this run (and every
    process of it: CONFORMANCE_ATTENTION); a target that cannot be used is a usage error
    naming it (runners/target/)."""
    text = config.getoption("attention")
    if not text:
        return
    import os

    from conformance.runners.target import ENV, TargetError, TargetSpec, check_spec, encode
    from conformance.runners.target.checks import first_call

    try:
        spec = check_spec(TargetSpec(text, config.getoption("attention_kind"),
                                     config.getoption("attention_array"),
                                     config.getoption("attention_name"), os.getcwd()))
        first_call(spec)
    except TargetError as exc:
        raise pytest.UsageError(str(exc)) from None
    config.stash[ATTENTION_KEY] = os.environ.get(ENV)
    os.environ[ENV] = encode(spec)


def pytest_unconfigure(config):
    """The run's --attention leaves the environment as it found it (an in-process run,
    e.g. `probe`, must not leave its target in the next run's registry), and its figure
    setting the process's (a test's in-process run must not turn its session's off)."""
    if FIGURES_KEY in config.stash:
        from conformance.report import plots

        plots.configure(config.stash[FIGURES_KEY])
    if ATTENTION_KEY in config.stash:
        import os

        from conformance.runners.target import ENV

        before = config.stash[ATTENTION_KEY]
        if before is None:
            os.environ.pop(ENV, None)
        else:
            os.environ[ENV] = before


def _configured(config) -> dict:
    """The session state, once every setting is known good: an environment value, an
    option or an unwritable --report-dir is one usage error naming it, before any item
    runs (settings.py; report/staging.py)."""
    from conformance.case.loader import load_budget
    from conformance.report import plots
    from conformance.report.staging import check_writable
    from conformance.run.isolation import env_isolate
    from conformance.settings import SettingError, figures_wanted, item_timeout

    try:
        load_budget()
        env_isolate()
        # read once: tests change it for subprocesses; put back at unconfigure
        config.stash[FIGURES_KEY] = plots.configure(figures_wanted())
        item_timeout(config.getoption("item_timeout"))
        cache_limit(config)
        state = session_state(config)
        if config.getoption("report_dir"):
            check_writable(Path(config.getoption("report_dir")), "--report-dir")
    except (SettingError, OSError, ValueError) as exc:
        raise pytest.UsageError(str(exc)) from None
    return state


def cache_limit(config) -> int:
    """The shared cache's size limit in bytes (cache_prune.py); a bad value is a usage error."""
    from conformance.cache_prune import limit_bytes

    return limit_bytes(config.getoption("cache_limit"))


def pytest_report_header(config):
    from conformance.versions import versions

    return "conformance: " + ", ".join(f"{k} {v}" for k, v in versions().items())


def pytest_collect_file(file_path: Path, parent):
    cases_dir = Path(parent.config.getoption("cases_dir")).resolve()
    if file_path.suffix == ".yaml" and file_path.parent.resolve() == cases_dir:
        if file_path.name.startswith(".#"):  # an editor lock file: named at the end
            return None
        return CaseFile.from_parent(parent, path=file_path)
    if file_path.suffix == ".yaml" and \
            file_path.parent.resolve() == expectations_dir(parent.config).resolve():
        from conformance.plugin.conventions_items import ConventionsFile

        return ConventionsFile.from_parent(parent, path=file_path)
    return None


LISTED_KEY = pytest.StashKey[bool]()  # --cases-dir's files are listed by the plugin


def _collect_cases_dir(config) -> None:
    """`--cases-dir DIR` runs DIR's cases from any directory without handing DIR to
    pytest: the plugin lists DIR's case files itself and adds their items at collection
    (items.add_listed_cases), so nothing in DIR is imported, collected as Python or read
    as configuration.  With no path named, nothing else is collected (the default test
    paths are dropped); a path in DIR named on the command line is pytest's to collect,
    as named."""
    cases_dir = Path(config.getoption("cases_dir")).resolve()
    config.stash[LISTED_KEY] = False
    if cases_dir == CASES_DIR.resolve() or config.getoption("generated", 0):
        return
    if not cases_dir.is_dir():
        raise pytest.UsageError(f"--cases-dir {config.getoption('cases_dir')}: not a folder "
                                "(give the folder that holds the case files)")
    _refuse_config_from(cases_dir, config)
    if config.args_source is not pytest.Config.ArgsSource.ARGS:
        config.args[:] = []
    named = [Path(a.split("::")[0]).resolve() for a in config.args]
    config.stash[LISTED_KEY] = not any(
        p == cases_dir or cases_dir in p.parents or p in cases_dir.parents for p in named)


def _refuse_config_from(cases_dir: Path, config) -> None:
    """A run configured by an ini file inside the cases folder is refused before any item
    runs: pytest looks for its ini file before any plugin's option is known, so
    `--cases-dir DIR` written with a space hands DIR to that search as a test path (as
    does a run started inside DIR); `--cases-dir=DIR` from outside never does."""
    ini = config.inipath
    if ini is not None and (ini.parent == cases_dir or cases_dir in ini.parents):
        raise pytest.UsageError(
            f"--cases-dir: this run was configured by {ini}, inside the cases folder (a "
            "cases folder is data): write --cases-dir=DIR (with '=': pytest reads a separate "
            "DIR as a test path before the plugin loads) and run from outside the folder")


@pytest.hookimpl(tryfirst=True)  # before -k / -m deselect: they apply to these items too
def pytest_collection_modifyitems(session, config, items):
    """The conventions items run after every matrix item (they read its rows); a
    matrix run of the default cases (or one naming --expectations-dir) gets one per
    selected runner even when its expectations file was not among the paths collected."""
    from conformance.plugin.conventions_items import ConventionsItem, add_conventions_items

    if config.stash.get(LISTED_KEY, False):
        from conformance.plugin.items import add_listed_cases

        add_listed_cases(session, items)
    matrix = any(isinstance(i, MatrixItem) for i in items)
    own_file = (Path(config.getoption("cases_dir")).resolve() == CASES_DIR.resolve()
                or config.getoption("expectations_dir"))
    if matrix and own_file:
        add_conventions_items(session, expectations_dir(config), items)
    items.sort(key=lambda i: isinstance(i, ConventionsItem))  # stable: order kept otherwise
    from conformance.plugin import parallel

    state = session_state(config)
    runners = [r for r in state.runners
               if not state.chosen_runners or r.name in state.chosen_runners]
    cases = [c for c in state.cases or []
             if not state.chosen_cases or c.id in state.chosen_cases]
    parallel.mark_groups(config, items)
    parallel.select_shard(config, items, runners, len(cases))


def pytest_runtest_setup(item):
    """On an xdist worker, a worker group's subprocess requests are queued when its
    first item arrives (parallel.py)."""
    from conformance.plugin.parallel import is_worker, prefetch_group

    if isinstance(item, MatrixItem) and is_worker(item.config):
        prefetch_group(item)


def pytest_collection_finish(session):
    """Queue every selected worker item now, then the worker runners' convention probes,
    so worker subprocesses (other Keras backends) compute in parallel with everything
    else (workers.py)."""
    from conformance.plugin.parallel import is_worker

    if session.config.option.collectonly or is_worker(session.config):
        return  # an xdist worker queues a group when its first item arrives
    from conformance.plugin.conventions_items import ConventionsItem
    from conformance.run.evaluate import prefetch
    from conformance.conventions.probes import LEDGER_CELLS
    from conformance.run.workers import prefetch_conventions

    for item in session.items:
        if isinstance(item, MatrixItem):
            prefetch(item.case, item.runner)  # a translate that raises queues nothing
    for item in session.items:  # the probes behind every matrix run of their worker
        if isinstance(item, ConventionsItem) and item.runner.worker \
                and not item.runner.available():
            prefetch_conventions(item.runner, LEDGER_CELLS)


def pytest_sessionfinish(session, exitstatus):
    from conformance.plugin.parallel import is_worker
    from conformance.plugin.run_end import finish
    from conformance.run.workers import shutdown

    shutdown()
    state = session.config.stash.get(STATE_KEY, None)
    if state is not None and not is_worker(session.config):  # a worker's rows went with
        state.end = finish(session.config, state)            # its reports to the controller
    if not is_worker(session.config):
        from conformance.cache_prune import prune

        pruned = prune(cache_limit(session.config))
        if pruned.removed:
            session.config.stash[PRUNED_KEY] = pruned.line()


def pytest_terminal_summary(terminalreporter, exitstatus, config):
    """The case x runner symbol matrix of this run and its headline sentences, odd
    case-folder entries, and what the session's end wrote."""
    state = config.stash.get(STATE_KEY, None)
    if state is None:
        return
    if state.rows:
        from conformance.report.terminal import headline_sentences, matrix_lines

        for line in matrix_lines(state.rows.values(), state.cases or [], state.runners):
            terminalreporter.write_line(line)
        out = (state.end.written_to if state.end and state.end.written_to
               else Path(config.getoption("report_dir") or REPORTS_DIR))
        for line in headline_sentences(state.rows.values(), state.cases or [], state.runners,
                                       out):
            terminalreporter.write_line(line)
    for entry in state.skipped_entries:
        terminalreporter.write_line(f"conformance: {entry}")
    if config.stash.get(PRUNED_KEY, None):
        terminalreporter.write_line(config.stash[PRUNED_KEY])
    if state.end is not None:
        terminalreporter.write_line(state.end.note)
    if state.end is not None and state.end.written_to is not None:
        from conformance.plugin.run_end import written_files

        terminalreporter.write_line(written_files(state.end.written_to))
