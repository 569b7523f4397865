"""pytest -n 2 (pytest-xdist): a worker's runners and its conventions item run on
one xdist worker, and the controller writes the same reports as a serial run."""
from __future__ import annotations

import importlib.util
import re

import pytest

from tests.test_shards import cli, needs_torch, run, single_run, tiny  # noqa: F401

pytest_plugins = ["pytester"]
needs_xdist = pytest.mark.skipif(importlib.util.find_spec("xdist") is None,
                                 reason="pytest-xdist not installed (pip install pytest-xdist)")


@needs_xdist
@needs_torch
def test_two_xdist_workers_write_the_serial_reports(tiny):  # noqa: F811
    single = single_run(tiny)
    res = run(tiny, "-n", "2", "-v", f"--report-dir={tiny.path / 'xdist'}", alone=True)
    assert res.ret == 0, res.stdout.str()[-3000:]
    where: dict[str, set[str]] = {}
    for gw, name in re.findall(r"\[(gw\d)\].*?(?:PASSED|SKIPPED|XFAIL)\S* \S*::\S*\[(\S+)\]",
                               res.stdout.str()):
        where.setdefault(name, set()).add(gw)
    assert set(where) == {"torch.mha", "torch.sdpa", "toy.numpy", "quiet.worker"}
    assert all(len(gws) == 1 for gws in where.values()), where  # matrix + conventions
    check = cli("check-reports", str(tiny.path / "xdist"), "--against", str(single))
    assert check.returncode == 0, check.stderr[-3000:]
    assert not (tiny.path / "xdist" / "shard.json").exists()
