"""--shard I/N and `python -m conformance merge`: three shards of a tiny matrix
(torch runners, the toy runner and a worker runner) merge into the reports of one
run (check-reports clean), conventions items included (parallel.py, shards.py)."""
from __future__ import annotations

import importlib.util
import json
import os
from types import SimpleNamespace

import pytest

from conformance.contract.runner import WorkerSpec
from conformance.plugin.parallel import assign, group_costs, parse_shard
from conformance.paths import ROOT
from conformance.report.results_files import read_results
from tests.inprocess import cli

pytest_plugins = ["pytester"]
needs_torch = pytest.mark.skipif(importlib.util.find_spec("torch") is None,
                                 reason="torch not installed")
RUNNERS = "torch.mha,torch.sdpa,toy.numpy,quiet.worker"
CASE_FILES = ("biases.yaml", "causal.yaml", "key_padding.yaml")
QUIET = '''
from conformance.contract.runner import Observation, Runner, Translation, WorkerSpec
from conformance.oracle.reference import attention


class QuietWorker(Runner):
    """A worker runner whose rows do not depend on the process (no pid in its notes)."""
    name, framework = "quiet.worker", "fake"
    worker = WorkerSpec("quiet", {})

    def translate(self, case):
        return Translation("quiet()")

    def run(self, case, translation, data):
        return Observation(output=attention(case, data).output)
'''


@pytest.fixture
def tiny(pytester, monkeypatch):
    """A cases dir of three shipped case files, the quiet worker runner, and env."""
    cases = pytester.path / "cases"
    cases.mkdir()
    for name in CASE_FILES:
        (cases / name).write_text((ROOT / "cases" / name).read_text())
    (pytester.path / "shardrunners.py").write_text(QUIET)
    (pytester.path / "expectations").mkdir()
    monkeypatch.setenv("CONFORMANCE_EXTRA_RUNNERS",
                       "tests.toy_runner:ToyRunner,shardrunners:QuietWorker")
    monkeypatch.setenv("PYTHONPATH", f"{ROOT}{os.pathsep}{pytester.path}")
    monkeypatch.setenv("TF_CPP_MIN_LOG_LEVEL", "3")
    pytester.syspathinsert()  # shardrunners for the in-process runs (PYTHONPATH: workers)
    return pytester


def run(pytester, *args, alone: bool = False):
    """One run of the tiny matrix: in this process, or (`alone`) in a subprocess of its
    own, for a run that starts processes of its own that must find the runners (xdist)."""
    cases = str(pytester.path / "cases")
    start = pytester.runpytest_subprocess if alone else pytester.runpytest_inprocess
    return start(
        "-p", "conformance.plugin", "-p", "no:cacheprovider", cases, "--cases-dir", cases,
        "--runner", RUNNERS, "--expectations-dir", str(pytester.path / "expectations"), *args)


def single_run(pytester):
    """The reference: one serial run, which also pins expectations/ for the later runs
    (--update-conventions: the old spelling of --update-expectations, kept)."""
    res = run(pytester, "--update-conventions", f"--report-dir={pytester.path / 'single'}")
    assert res.ret == 0, res.stdout.str()[-3000:]
    return pytester.path / "single"


@needs_torch
def test_three_shards_merge_into_the_single_run(tiny):
    single = single_run(tiny)
    keys = []
    for i in (1, 2, 3):
        res = run(tiny, f"--shard={i}/3", f"--report-dir={tiny.path / f'shard{i}'}")
        assert res.ret == 0, res.stdout.str()[-3000:]
        rows = read_results(tiny.path / f"shard{i}" / "results.json")["rows"]
        keys.append({(r["case"], r["runner"]) for r in rows})
        assert keys[-1], f"shard {i} ran nothing"
    assert sum(map(len, keys)) == len(set().union(*keys)) == 6 * 4
    runners_of = [{r for _, r in k} for k in keys]
    assert all(not (a & b) for n, a in enumerate(runners_of) for b in runners_of[n + 1:])
    merged = tiny.path / "merged"
    done = cli("merge", *(str(tiny.path / f"shard{i}") for i in (3, 1, 2)), "--out",
               str(merged), "--cases-dir", str(tiny.path / "cases"))
    assert done.returncode == 0, done.stderr
    check = cli("check-reports", str(merged), "--against", str(single))  # ledger too
    assert check.returncode == 0, check.stderr[-3000:]


def test_merge_refuses_incomplete_or_foreign_folders(tmp_path):
    done = cli("merge", str(tmp_path), "--out", str(tmp_path / "out"))
    assert done.returncode == 1 and "shard.json" in done.stderr


@needs_torch
def test_an_empty_shard_writes_a_shard_file_that_merges(tiny):
    """Acceptance 6 of #17: one runner selected, three shards: two select nothing, still
    write an (empty) shard file, and the merge equals one run of that selection."""
    one = ("--runner", "torch.mha")
    single = tiny.path / "single"
    res = tiny.runpytest_inprocess(
        "-p", "conformance.plugin", "-p", "no:cacheprovider", str(tiny.path / "cases"),
        "--cases-dir", str(tiny.path / "cases"), *one, "--update-expectations",
        f"--expectations-dir={tiny.path / 'exp'}", f"--report-dir={single}")
    assert res.ret == 0, res.stdout.str()[-3000:]
    ran = []
    for i in (1, 2, 3):
        out = tiny.path / f"shard{i}"
        res = tiny.runpytest_inprocess(
            "-p", "conformance.plugin", "-p", "no:cacheprovider", str(tiny.path / "cases"),
            "--cases-dir", str(tiny.path / "cases"), *one,
            f"--expectations-dir={tiny.path / 'exp'}", f"--shard={i}/3", f"--report-dir={out}")
        assert res.ret in (0, 5), res.stdout.str()[-3000:]  # 5: this shard ran nothing
        assert (out / "shard.json").is_file(), f"shard {i} wrote no shard file"
        ran.append(len(json.loads((out / "shard.json").read_text())["rows"]))
    assert sorted(ran) == [0, 0, 6]  # two shards empty, one with the 6 torch.mha rows
    merged = tiny.path / "merged"
    done = cli("merge", *(str(tiny.path / f"shard{i}") for i in (1, 2, 3)), "--out",
               str(merged), "--cases-dir", str(tiny.path / "cases"))
    assert done.returncode == 0, done.stderr
    check = cli("check-reports", str(merged), "--against", str(single))
    assert check.returncode == 0, check.stderr[-3000:]


SECONDS = {"torch": 0.05, "keras": 0.3, "flax": 0.8, "hf": 0.15}  # as their classes declare


def _runner(name, framework, key=None):
    return SimpleNamespace(name=name, framework=framework, seconds=SECONDS[framework],
                           worker=WorkerSpec(key, {}) if key else None)


def test_shards_keep_worker_groups_whole_and_balance_by_cost():
    runners = [_runner("torch.mha", "torch"), _runner("torch.sdpa", "torch"),
               _runner("keras.jax", "keras", "keras-jax"),
               _runner("keras.jax.scores", "keras", "keras-jax"),
               _runner("flax.linen", "flax"), _runner("hf.bert", "hf")]
    costs = group_costs(runners, 10, {"torch.mha": 0.1, "flax.linen": 2.0})
    assert set(costs) == {"torch.mha", "torch.sdpa", "keras-jax", "flax.linen", "hf.bert"}
    assert costs["flax.linen"] == pytest.approx(20.0)  # measured beats the default
    plan = assign(costs, 2)
    assert plan == assign(dict(reversed(list(costs.items()))), 2)  # order-independent
    load = [sum(c for g, c in costs.items() if plan[g] == s) for s in (1, 2)]
    assert max(load) - min(load) <= max(costs.values())
    assert plan["flax.linen"] != plan["keras-jax"]  # the two dearest groups split


def test_parse_shard():
    assert parse_shard("2/3") == (2, 3) and parse_shard(None) is None
    for bad in ("0/3", "4/3", "x", "1/2/3"):
        with pytest.raises(pytest.UsageError):
            parse_shard(bad)
