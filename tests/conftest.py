"""Shared set-up of the suite's own tests.

Meta-tests start pytest in subprocesses (pytester, `python -m pytest`), each a tiny
selection.  pytest autoloads every installed `pytest11` plugin there, and rewrites the
asserts of each plugin's whole package: hydra-core (pulled in by executorch), anyio,
hypothesis and kgb cost 2.8 s per subprocess on this 2-core machine, more than the tiny
selection itself, and far more where PYTHONDONTWRITEBYTECODE is set (the rewritten
modules are then never cached).  pyproject's addopts leave them out of runs rooted in
the repository; a subprocess rooted elsewhere (pytester's temporary folder) does not
read it, so the same `-p no:NAME` options reach it through PYTEST_ADDOPTS.
"""
from __future__ import annotations

import os
from pathlib import Path

import pytest

from conformance.paths import CACHE_ENV, CACHE_KEY_ENV, cache_key_path, cache_root
from conformance.settings import FIGURES_ENV

# the tests .ci/run runs on the base install (tests/import_scan.py says which)
OPTIONAL = "optional_packages"


def pytest_configure(config):
    config.addinivalue_line(
        "markers", f"{OPTIONAL}: the test's module names a package the base install lacks "
                   "(tests/import_scan.py); .ci/run runs these without any framework")


@pytest.hookimpl(tryfirst=True)  # before -m deselects by the mark
def pytest_collection_modifyitems(config, items):
    """Mark the items of every module that names an optional package, only where -m asks
    for the mark: reading the modules costs a plain collection nothing."""
    if OPTIONAL not in (config.option.markexpr or ""):
        return
    from tests.import_scan import base_modules, names_optional

    named = {path: path.suffix == ".py" and bool(names_optional(path, base_modules()))
             for path in {Path(i.path) for i in items}}  # a case file (YAML) names none
    for item in items:
        if named[Path(item.path)]:
            item.add_marker(OPTIONAL)


def plugins_off(config) -> str:
    """The `-p no:NAME` options of pyproject's addopts, as one string."""
    args = config.getini("addopts")
    return " ".join(f"-p {value}" for flag, value in zip(args, args[1:])
                    if flag == "-p" and value.startswith("no:"))


@pytest.fixture(scope="session", autouse=True)
def subprocess_pytest_without_unused_plugins(request):
    """PYTEST_ADDOPTS for every pytest the tests start (kept: what the user set)."""
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("PYTEST_ADDOPTS",
                  f"{os.environ.get('PYTEST_ADDOPTS', '')} {plugins_off(request.config)}".strip())
        # No test of a subprocess run looks at its PNGs: drawing them costs each run a
        # matplotlib import (~1.5 s of CPU).  This session read the variable at configure.
        mp.setenv(FIGURES_ENV, "0")
        yield


# The session's cache folder and key, before any test moves HOME (pytester does)
SESSION_CACHE = (cache_root(), cache_key_path())


@pytest.fixture
def pytester(pytester, monkeypatch, request):
    """pytester clears PYTEST_ADDOPTS to isolate its runs; set it again, to the plugins
    its subprocesses leave out, so that they too skip them.  It also points HOME at its
    own folder, where the suite's cache and its key live unless named: its runs would
    convert every artefact again in an empty cache (the ONNX specification's vectors alone
    are four engine processes, ~25 s), or, where CONFORMANCE_CACHE_DIR names the shared
    folder, sign entries there with a new key that the next run evicts.  They use the
    session's cache and key, as its subprocess runs do (a test names its own to differ)."""
    monkeypatch.setenv("PYTEST_ADDOPTS", plugins_off(request.config))
    folder, key_file = SESSION_CACHE
    monkeypatch.setenv(CACHE_ENV, os.environ.get(CACHE_ENV) or str(folder))
    monkeypatch.setenv(CACHE_KEY_ENV, os.environ.get(CACHE_KEY_ENV) or str(key_file))
    return pytester
