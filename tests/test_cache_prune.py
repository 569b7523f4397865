"""The shared cache: where it lives (the user's cache folder, shared by clones) and its
size limit (least recently used entries go first, a key and its digest together)."""
from __future__ import annotations

import os

import pytest

from conformance.cache import BytesCache
from conformance.cache_prune import limit_bytes, parse_size, prune
from conformance.paths import CACHE_ENV, cache_root


def test_the_cache_lives_in_the_users_cache_folder(monkeypatch, tmp_path):
    monkeypatch.delenv(CACHE_ENV, raising=False)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert cache_root() == tmp_path / "xdg" / "attention-conformance"
    monkeypatch.setenv("XDG_CACHE_HOME", "relative/ignored")  # the XDG spec: absolute only
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    assert cache_root() == tmp_path / "home" / ".cache" / "attention-conformance"
    monkeypatch.setenv(CACHE_ENV, str(tmp_path / "mine"))
    assert cache_root() == tmp_path / "mine"


def test_two_clones_share_one_entry(monkeypatch, tmp_path):
    """Nothing in the root or a key names the clone: a second clone's lookup hits."""
    monkeypatch.setenv(CACHE_ENV, str(tmp_path))
    BytesCache("onnx", ".onnx").put("k", b"graph")
    assert BytesCache("onnx", ".onnx").get("k") == b"graph"
    assert "main" not in str(BytesCache("onnx", ".onnx").path("k").relative_to(tmp_path))


def _entry(cache: BytesCache, k: str, size: int, age: float) -> None:
    cache.put(k, b"x" * size)
    for p in (cache.path(k), cache.directory / f"{cache.full_key(k)}.sha256"):
        os.utime(p, (1e9 + age, 1e9 + age))


def test_prune_removes_the_least_recently_used_entry_and_its_digest(monkeypatch, tmp_path):
    monkeypatch.setenv(CACHE_ENV, str(tmp_path))
    cache = BytesCache("onnx", ".onnx")
    _entry(cache, "old", 1000, 0)
    _entry(cache, "new", 1000, 10)
    _entry(cache, "hit", 1000, 5)
    assert cache.get("hit") == b"x" * 1000  # a hit makes it the most recent
    entry = sum(p.stat().st_size for p in cache.directory.iterdir()) // 3  # bytes and seal
    done = prune(2 * entry + 100, tmp_path)
    assert done.removed == 1
    assert not cache.path("old").exists()
    assert not (cache.directory / f"{cache.full_key('old')}.sha256").exists()
    assert cache.get("new") is not None and cache.get("hit") is not None
    assert done.kept == 2 * entry


def test_prune_leaves_the_drift_envs_alone_and_does_not_count_them(monkeypatch, tmp_path):
    """A drift build (newer and far larger than the artefacts) must neither push the
    artefacts out nor lose files of its envs: the bug this guards fired once, removing
    4.3 GB of artefacts and uv files while an install ran."""
    monkeypatch.setenv(CACHE_ENV, str(tmp_path))
    cache = BytesCache("onnx", ".onnx")
    _entry(cache, "artefact", 1000, 0)
    env = tmp_path / "drift" / "envs" / "keras-3.6.0" / "lib" / "site.py"
    env.parent.mkdir(parents=True)
    env.write_bytes(b"y" * 50_000)
    done = prune(2000, tmp_path)
    assert done.removed == 0 and done.kept < 2000  # the 50 kB env is not counted
    assert env.exists() and cache.get("artefact") is not None
    done = prune(10, tmp_path)  # the artefact goes; the env still stays
    assert done.removed == 1 and env.exists()


def test_prune_never_walks_into_the_drift_folder(monkeypatch, tmp_path):
    """A drift build holds ~500k files: walking them to skip each cost every session ~10 s
    at its finish (and every collection).  The pruner lists no folder under drift/."""
    import os as _os

    (tmp_path / "drift" / "envs" / "jax-0.4.25" / "lib").mkdir(parents=True)
    monkeypatch.setenv(CACHE_ENV, str(tmp_path))
    BytesCache("onnx", ".onnx").put("k", b"x")
    walked = []
    real = _os.scandir

    def spy(top, *a, **kw):
        walked.append(top if isinstance(top, int) else str(top))
        return real(top, *a, **kw)
    monkeypatch.setattr("conformance.cache_prune.os.scandir", spy)
    done = prune(10 ** 9, tmp_path)
    assert not done.refused and done.kept > 0
    assert len(walked) == 2, walked  # the root and onnx/, never drift/ (opened by fd)


def test_prune_keeps_everything_under_the_limit_or_without_one(tmp_path):
    (tmp_path / "a.bin").write_bytes(b"x" * 100)
    assert prune(1000, tmp_path).removed == 0
    assert prune(0, tmp_path).removed == 0 and (tmp_path / "a.bin").exists()
    assert prune(10, tmp_path / "absent").removed == 0


@pytest.mark.parametrize("text, size", [("2GB", 2 * 10 ** 9), ("500 MB", 5 * 10 ** 8),
                                        ("1GiB", 2 ** 30), ("0", 0), ("123", 123)])
def test_sizes_parse(text, size):
    assert parse_size(text) == size


@pytest.mark.parametrize("bad", ["two GB", "-1GB", "1XB", ""])
def test_a_bad_size_names_where_it_came_from(bad, monkeypatch):
    with pytest.raises(ValueError, match="--cache-limit.*e.g. 2GB"):
        limit_bytes(bad)
    monkeypatch.setenv("CONFORMANCE_CACHE_LIMIT", bad or "?")
    with pytest.raises(ValueError, match="CONFORMANCE_CACHE_LIMIT"):
        limit_bytes()


def test_the_default_limit_is_two_gigabytes(monkeypatch):
    monkeypatch.delenv("CONFORMANCE_CACHE_LIMIT", raising=False)
    assert limit_bytes() == 2 * 10 ** 9
