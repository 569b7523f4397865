"""The probe-cell cache (run/probe_cache.py): a warm run reads a runner's ledger cells
instead of probing; a changed source, a changed setting, a damaged entry or a probe that
raised never yields cached cells.  Each test runs against a cache folder and secret key of
its own, with a stand-in probe that counts its calls (no framework runs)."""
from __future__ import annotations

import json
from types import SimpleNamespace

import pytest

from conformance.conventions.axes import Convention
from conformance.conventions.probes import LEDGER_CELLS
from conformance.plugin import conventions_items
from conformance.run import probe_cache, workers

CELLS = [Convention("size_arguments", "per_head", "probe: key_dim=4 gave 4-wide heads"),
         Convention("scale", "inverse_sqrt_d", "probe: ratio 0.5000", "inverse_sqrt_d",
                    "https://example.org/doc")]


class StandIn:
    """A runner as probe_cells sees it: a name, a target, its parameters, no worker."""

    name = "standin.mha"
    target = "tests.test_probe_cell_cache:StandIn"
    worker = None

    def __init__(self, **params):
        self.params = dict(params)


@pytest.fixture
def cache_dir(tmp_path, monkeypatch):
    monkeypatch.setenv("CONFORMANCE_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setenv("CONFORMANCE_CACHE_KEY_FILE", str(tmp_path / "key" / "cache.key"))
    return tmp_path / "cache" / probe_cache.NAMESPACE


@pytest.fixture
def probe(monkeypatch, cache_dir):
    """The stand-in for ledger_cells: its calls are counted; `answer` is what it gives."""
    calls = SimpleNamespace(n=0, answer=CELLS)

    def fake(runner):
        calls.n += 1
        if isinstance(calls.answer, Exception):
            raise calls.answer
        return list(calls.answer)

    monkeypatch.setattr(conventions_items, "ledger_cells", fake)
    # the stand-in lives in tests/, which the key does not hash: taken as the suite's own
    monkeypatch.setattr(probe_cache, "cacheable", lambda runner: True)
    return calls


def session_cells(runner):
    """The cells one fresh session's conventions item gets for `runner`."""
    return conventions_items.probe_cells(SimpleNamespace(probes={}), runner)


def test_a_second_session_reads_the_cells_without_probing(probe):
    first = session_cells(StandIn())
    second = session_cells(StandIn())
    assert probe.n == 1
    assert first == second == CELLS
    assert [type(c) for c in second] == [Convention, Convention]


def test_another_runner_parameter_probes_again(probe):
    session_cells(StandIn())
    assert session_cells(StandIn(need_weights=False)) == CELLS
    assert probe.n == 2


def test_a_changed_source_file_is_not_read(probe, tmp_path, monkeypatch):
    tree = tmp_path / "repo"
    (tree / "conformance").mkdir(parents=True)
    source = tree / "conformance" / "probe.py"
    source.write_text("SCALE = 0.5\n")
    monkeypatch.setattr(probe_cache, "ROOT", tree)
    probe_cache.source_hash.cache_clear()
    try:
        session_cells(StandIn())
        source.write_text("SCALE = 0.25\n")  # the planted change: a probe's code moved
        probe_cache.source_hash.cache_clear()
        probe.answer = CELLS[:1]
        assert session_cells(StandIn()) == CELLS[:1]
        assert probe.n == 2
    finally:
        probe_cache.source_hash.cache_clear()


def test_a_changed_setting_probes_again_and_a_run_folder_does_not(probe, monkeypatch):
    session_cells(StandIn())
    monkeypatch.setenv("CONFORMANCE_PROGRESS_DIR", "/tmp/another-run")
    monkeypatch.setenv("TF_CPP_MIN_LOG_LEVEL", "3")  # what the benchmark sets: quieter logs
    session_cells(StandIn())
    assert probe.n == 1
    monkeypatch.setenv("ONEDNN_MAX_CPU_ISA", "SSE41")
    session_cells(StandIn())
    assert probe.n == 2


def test_a_probe_that_raised_is_not_stored(probe):
    probe.answer = RuntimeError("the framework refused")
    assert isinstance(session_cells(StandIn()), RuntimeError)
    probe.answer = CELLS
    assert session_cells(StandIn()) == CELLS
    assert probe.n == 2


def test_a_damaged_entry_is_a_miss_not_a_crash(probe, cache_dir, capsys):
    session_cells(StandIn())
    (entry,) = cache_dir.glob("*.json")
    entry.write_bytes(entry.read_bytes().replace(b"per_head", b"total_over_heads"))
    assert session_cells(StandIn()) == CELLS  # probed again, not the forged word
    assert probe.n == 2
    assert "evicted" in capsys.readouterr().err


@pytest.mark.parametrize("data", [b"", b"\xff\xfe", b"[" * 100_000, b'{"format": 1}',
                                  json.dumps({"format": 1, "cells": [{"axis": 1}]}).encode(),
                                  json.dumps({"format": 1, "cells": [
                                      {"axis": "a", "value": None, "evidence": "",
                                       "documented": None, "documented_source": ""}]}).encode()])
def test_a_sealed_entry_that_holds_no_cells_is_evicted(probe, data, capsys):
    probe_cache.CACHE.put(probe_cache.entry_key(StandIn(), LEDGER_CELLS), data)
    assert session_cells(StandIn()) == CELLS
    assert probe.n == 1
    assert "holds no probe cells" in capsys.readouterr().err


def test_a_cell_that_is_not_a_plain_convention_is_not_stored(probe):
    class Derived(Convention):
        pass

    probe.answer = [Derived("scale", "inverse_sqrt_d", "probe")]
    session_cells(StandIn())
    session_cells(StandIn())
    assert probe.n == 2


def test_prefetch_queues_no_probe_whose_cells_are_cached(probe, monkeypatch):
    queued = []
    monkeypatch.setattr(workers, "_queue", lambda key, *rest: queued.append(key))
    workers.prefetch_conventions(StandIn(), LEDGER_CELLS)
    session_cells(StandIn())
    workers.prefetch_conventions(StandIn(), LEDGER_CELLS)
    assert queued == [("conventions", StandIn.name, LEDGER_CELLS)]


def test_only_the_suites_own_runners_are_cached():
    """A runner whose code the key does not hash (a test's fake, an out-of-tree runner, the
    user's attention behind runners/target/) is probed every time: an edit of it would
    otherwise read the cells of its old code."""
    from conformance.runners import load

    assert probe_cache.cacheable(load("conformance.runners.torch.mha:TorchMHA", {}))
    assert not probe_cache.cacheable(StandIn())  # defined in tests/
    from conformance.runners.target.sdpa import TargetSDPA

    assert not probe_cache.cacheable(TargetSDPA.__new__(TargetSDPA))

