"""Parallel and sharded runs of the matrix: pytest-xdist (-n N) and --shard I/N.

A GROUP is what must run in one process: the items of one worker key (every
runner of one Keras backend shares one worker subprocess, so it starts once),
else the items of one runner; a runner's conventions item joins its group, so
it runs after that runner's matrix items and sees their rows.

xdist (`-n 2`, `-n auto`): every item gets an `xdist_group` marker named after
its group, and `--dist load` (xdist's default) becomes `loadgroup`, so one
xdist worker runs a whole group.  A worker never writes a report: each test
report of a matrix item carries its Row (and seconds), each conventions item's
report its probe cells (`report.conformance`, a pickled blob that xdist ships
with the report); the controller collects them and writes every report once,
from the merged rows, at the end (plugin.pytest_sessionfinish).  A worker
queues a worker runner's items (prefetch) when the first item of its group
arrives, not at collection (every xdist worker collects every item).

--shard I/N keeps the groups assigned to shard I: groups are dealt out by
expected cost (longest first, each to the least loaded shard), the cost of a
group being its items times its runners' seconds per item (the last
reports/results.json's metadata "seconds per item by runner", else the runner
class's own `seconds`) plus WORKER_START for a worker group.  Items that
are not matrix or conventions items (tests/) run in shard 1.  shards.py writes
and merges the shards' results.
"""
from __future__ import annotations

import base64
import json
import pickle
import re
from pathlib import Path

import pytest

from conformance.paths import REPORTS_DIR
from conformance.report.run_reports import SECONDS_KEY  # results.json metadata

WORKER_START = 6.0  # a worker subprocess: start-up and framework imports
_SWITCHED = ("load", "loadscope", "loadfile", "worksteal")


def is_worker(config) -> bool:
    """This process is an xdist worker (it never writes reports)."""
    return hasattr(config, "workerinput")


def xdist_active(config) -> bool:
    """The session distributes items (controller or worker)."""
    if is_worker(config):
        return True
    return (config.pluginmanager.hasplugin("xdist")
            and getattr(config.option, "dist", "no") != "no"
            and bool(getattr(config.option, "tx", None)))


def configure(config) -> None:
    """Controller: distribute by group (loadgroup) and collect the workers' rows."""
    if xdist_active(config) and not is_worker(config):
        if config.option.dist in _SWITCHED:
            config.option.dist = "loadgroup"
        config.pluginmanager.register(_SchedulerHook(), "conformance-xdist-scheduler")
    config.pluginmanager.register(_Hooks(config), "conformance-parallel")


class _SchedulerHook:
    """Registered only with xdist (its hook).  xdist's loadgroup reads an `@group` suffix
    that its workers append to node ids, which pytest 9 ignores (Node.nodeid is no longer
    `_nodeid`); so the controller groups by the runner named in the node id instead."""

    @pytest.hookimpl(tryfirst=True)
    def pytest_xdist_make_scheduler(self, config, log):
        if config.getvalue("dist") == "loadgroup":
            return group_scheduling(config, log)
        return None


_RUNNER_IN_ID = re.compile(r"\.yaml::[^@]*\[([^\[\]]+)\]$")


def group_scheduling(config, log):
    """A LoadGroupScheduling whose scope of a matrix or conventions item is its group."""
    from xdist.scheduler import LoadGroupScheduling

    from conformance.plugin.items import session_state

    groups = {r.name: group_of(r) for r in session_state(config).runners}

    class GroupScheduling(LoadGroupScheduling):
        def _split_scope(self, nodeid: str) -> str:
            found = _RUNNER_IN_ID.search(nodeid.split("@")[0] if "@" in nodeid else nodeid)
            if found and found[1] in groups:
                return "group:" + groups[found[1]]
            return super()._split_scope(nodeid)

    return GroupScheduling(config, log)


def group_of(runner) -> str:
    """The worker key of a worker runner, else the runner's name."""
    return runner.worker.key if runner.worker else runner.name


def parse_shard(text: str | None) -> tuple[int, int] | None:
    if not text:
        return None
    try:
        index, count = (int(p) for p in text.split("/"))
    except ValueError:
        raise pytest.UsageError(f"--shard {text}: expected I/N, e.g. 1/3") from None
    if not 1 <= index <= count:
        raise pytest.UsageError(f"--shard {text}: I must be within 1..N")
    return index, count


def weights(results: Path = REPORTS_DIR / "results.json") -> dict[str, float]:
    """Seconds per item by runner, measured by the run that wrote `results`."""
    try:
        meta = json.loads(Path(results).read_text(encoding="utf-8")).get("metadata", {})
        table = meta.get(SECONDS_KEY) or {}
        return {str(k): float(v) for k, v in table.items()}
    except (OSError, ValueError, AttributeError, TypeError):
        return {}


def group_costs(runners, case_count: int, measured: dict[str, float]) -> dict[str, float]:
    costs: dict[str, float] = {}
    for r in runners:
        per_item = measured.get(r.name, r.seconds)
        key = group_of(r)
        start = WORKER_START if r.worker and key not in costs else 0.0
        costs[key] = costs.get(key, 0.0) + per_item * case_count + start
    return costs


def assign(costs: dict[str, float], count: int) -> dict[str, int]:
    """group -> shard (1-based): longest first, each to the least loaded shard;
    deterministic (ties by name, then by lowest shard)."""
    load = [0.0] * count
    out = {}
    for name in sorted(costs, key=lambda g: (-costs[g], g)):
        shard = min(range(count), key=lambda s: (load[s], s))
        load[shard] += costs[name]
        out[name] = shard + 1
    return out


def select_shard(config, items, runners, case_count: int) -> None:
    """Deselect the items of other shards (pytest_deselected reports them)."""
    shard = parse_shard(config.getoption("shard"))
    if shard is None:
        return
    index, count = shard
    plan = assign(group_costs(runners, case_count, weights()), count)
    keep, drop = [], []
    for item in items:
        runner = getattr(item, "runner", None)
        mine = plan.get(group_of(runner)) == index if runner is not None else index == 1
        (keep if mine else drop).append(item)
    if drop:
        config.hook.pytest_deselected(items=drop)
        items[:] = keep


def mark_groups(config, items) -> None:
    """xdist_group markers (when distributing): one group per worker key / runner."""
    if not xdist_active(config):
        return
    for item in items:
        runner = getattr(item, "runner", None)
        if runner is not None:
            item.add_marker(pytest.mark.xdist_group(group_of(runner)))


def prefetch_group(item) -> None:
    """On an xdist worker: queue the worker items of this item's group when its first
    item arrives (loadgroup sends the whole group here)."""
    from conformance.run.evaluate import prefetch
    from conformance.plugin.items import MatrixItem, session_state

    state = session_state(item.config)
    done = state.prefetched
    key = group_of(item.runner)
    if key in done or not item.runner.worker:
        return
    done.add(key)
    for other in item.session.items:
        if isinstance(other, MatrixItem) and group_of(other.runner) == key:
            prefetch(other.case, other.runner)


def pack(obj) -> str:
    return base64.b64encode(pickle.dumps(obj, protocol=pickle.HIGHEST_PROTOCOL)).decode()


def unpack(text: str):
    return pickle.loads(base64.b64decode(text))  # noqa: S301 - our own workers' data


def _safe_probe(probe):
    """Probe cells, or the exception they raised (as RuntimeError if unpicklable)."""
    if isinstance(probe, BaseException):
        try:
            pickle.dumps(probe)
        except Exception:
            return RuntimeError(str(probe))
    return probe


class _Hooks:
    """xdist: workers attach what they recorded to reports; the controller keeps it."""

    def __init__(self, config):
        self.config = config

    @pytest.hookimpl(wrapper=True)
    def pytest_runtest_makereport(self, item, call):
        report = yield
        if call.when == "call" and is_worker(item.config):
            from conformance.plugin.items import session_state

            state = session_state(item.config)
            runner = getattr(item, "runner", None)
            case = getattr(item, "case", None)
            if case is not None and (case.id, runner.name) in state.rows:
                key = (case.id, runner.name)
                report.conformance = pack(("row", state.rows[key],
                                           state.seconds.get(key)))
            elif runner is not None and runner.name in state.probes:
                report.conformance = pack(("probe", runner.name,
                                           _safe_probe(state.probes[runner.name])))
        return report

    def pytest_runtest_logreport(self, report):
        blob = getattr(report, "conformance", None)
        config = self.config
        if blob is None or is_worker(config):
            return
        from conformance.plugin.items import session_state

        state = session_state(config)
        kind, *rest = unpack(blob)
        if kind == "row":
            row, seconds = rest
            state.rows[(row.case, row.runner)] = row
            if seconds is not None:
                state.seconds[(row.case, row.runner)] = seconds
        else:
            state.probes[rest[0]] = rest[1]
