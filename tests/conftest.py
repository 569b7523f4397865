"""Shared set-up of the suite's own tests.

Meta-tests start pytest in subprocesses (pytester, `python -m pytest`), each a tiny
selection.  pytest autoloads every installed `pytest11` plugin there, and rewrites the
asserts of each plugin's whole package: hydra-core (pulled in by executorch), anyio,
hypothesis and kgb cost 2.8 s per subprocess on this 2-core machine, more than the tiny
selection itself, and far more where PYTHONDONTWRITEBYTECODE is set (the rewritten
modules are then never cached).  No subprocess run needs them: generated cases use
hypothesis as a library, not its pytest plugin.  `-p no:NAME` of a plugin that is not
installed is accepted, so the list holds on a machine without them.
"""
from __future__ import annotations

import os

import pytest

UNUSED_PLUGINS = ("hydra_pytest", "anyio", "hypothesispytest", "kgb")
PLUGINS_OFF = " ".join(f"-p no:{name}" for name in UNUSED_PLUGINS)


@pytest.fixture(scope="session", autouse=True)
def subprocess_pytest_without_unused_plugins():
    """PYTEST_ADDOPTS for every pytest the tests start (kept: what the user set)."""
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("PYTEST_ADDOPTS", f"{os.environ.get('PYTEST_ADDOPTS', '')} {PLUGINS_OFF}".strip())
        yield


@pytest.fixture
def pytester(pytester, monkeypatch):
    """pytester clears PYTEST_ADDOPTS to isolate its runs; set it again, to the plugins
    its subprocesses leave out, so that they too skip them."""
    monkeypatch.setenv("PYTEST_ADDOPTS", PLUGINS_OFF)
    return pytester
