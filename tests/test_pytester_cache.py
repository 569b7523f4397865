"""tests/conftest.py's pytester: the suite's runs inside a test use the session's cache folder
and key, not the empty ones under the HOME pytester gives them (where every artefact, and
the ONNX specification's vectors, would be made again in each run)."""
from __future__ import annotations

from pathlib import Path

from tests.conftest import SESSION_CACHE

pytest_plugins = ["pytester"]

WHERE = """
from conformance.paths import cache_key_path, cache_root


def test_where():
    print(f"cache={cache_root()} key={cache_key_path()}")
"""


def cache_seen(pytester) -> tuple[Path, Path]:
    """The cache folder and key file a run inside pytester resolves."""
    pytester.makepyfile(test_where=WHERE)
    out = pytester.runpytest_inprocess("-p", "no:cacheprovider", "-s", "-q").stdout.str()
    line = next(s for s in out.splitlines() if s.startswith("cache="))
    cache, key = line.removeprefix("cache=").split(" key=")
    return Path(cache), Path(key)


def test_a_pytester_run_uses_the_session_s_cache_and_key(pytester):
    assert cache_seen(pytester) == SESSION_CACHE
    assert pytester.path not in SESSION_CACHE[0].parents  # not the folder pytester made


def test_planted_without_the_two_settings_the_run_resolves_under_pytester_s_home(
        pytester, monkeypatch):
    """What the fixture prevents: pytester's HOME is the test's folder, so the cache and the
    key it signs entries with are new and empty (where XDG_* name no other place)."""
    for name in ("CONFORMANCE_CACHE_DIR", "CONFORMANCE_CACHE_KEY_FILE", "XDG_CACHE_HOME",
                 "XDG_CONFIG_HOME"):
        monkeypatch.delenv(name, raising=False)
    cache, key = cache_seen(pytester)
    assert pytester.path in cache.parents and pytester.path in key.parents
    assert (cache, key) != SESSION_CACHE
