"""The shared cache verifies before it trusts: each entry is sealed with an HMAC under a
per-user key kept outside the cache, so a rewritten entry with its digest recomputed beside
it, an entry signed under another key, an ONNX entry whose tensors read files outside it,
or an executable planted for JAX is evicted and made again, never used."""
from __future__ import annotations

import hashlib
import json
import os
import stat

import numpy as np
import pytest

from conformance import cache
from conformance.paths import CACHE_ENV, CACHE_KEY_ENV, cache_key_path


@pytest.fixture
def home(tmp_path, monkeypatch):
    """A cache folder and a key file of the test's own."""
    monkeypatch.setenv(CACHE_ENV, str(tmp_path / "cache"))
    monkeypatch.setenv(CACHE_KEY_ENV, str(tmp_path / "config" / "cache.key"))
    return tmp_path


def _plain_digest(store: cache.BytesCache, k: str, data: bytes) -> bytes:
    """What the cache wrote beside an entry before it was sealed: anyone can compute it."""
    return hashlib.sha256(store.full_key(k).encode() + b"\0" + data).hexdigest().encode()


def test_the_key_lives_outside_the_cache_made_private_once(home, monkeypatch):
    monkeypatch.delenv(CACHE_KEY_ENV)
    monkeypatch.setenv("XDG_CONFIG_HOME", str(home / "xdg"))
    assert cache_key_path() == home / "xdg" / "attention-conformance" / "cache.key"
    monkeypatch.setenv(CACHE_KEY_ENV, str(home / "config" / "cache.key"))
    reads = []
    real = cache._read_key
    monkeypatch.setattr(cache, "_read_key", lambda p: reads.append(p) or real(p))
    first = cache.secret()
    assert first is not None and len(first) == cache.KEY_BYTES
    assert cache.secret() == first and len(reads) <= 2  # absent, then made: never again
    key_file = home / "config" / "cache.key"
    assert stat.S_IMODE(key_file.stat().st_mode) == 0o600
    assert not str(key_file).startswith(str(home / "cache"))
    cache.BytesCache("onnx", ".onnx").put("k", b"graph")
    assert cache.BytesCache("onnx", ".onnx").get("k") == b"graph" and len(reads) <= 2


def test_a_key_others_may_read_turns_the_cache_off(home, monkeypatch, capsys):
    key_file = home / "shared.key"
    key_file.write_bytes(os.urandom(cache.KEY_BYTES))
    key_file.chmod(0o644)
    monkeypatch.setenv(CACHE_KEY_ENV, str(key_file))
    store = cache.BytesCache("onnx", ".onnx")
    store.put("k", b"graph")
    assert store.get("k") is None and not store.path("k").exists()
    err = capsys.readouterr().err
    assert err.count("may be read or written by others") == 1, err


def test_a_rewritten_entry_with_its_digest_recomputed_is_made_again(home, capsys):
    store = cache.BytesCache("onnx", ".onnx")
    store.put("k", b"the real graph")
    forged = b"a planted graph"
    store.path("k").write_bytes(forged)
    (store.directory / "k.sha256").write_bytes(_plain_digest(store, "k", forged))
    assert store.get_or_make("k", lambda: b"the real graph") == (b"the real graph", False)
    assert str(store.path("k")) in capsys.readouterr().err
    assert store.get("k") == b"the real graph"  # the entry made again verifies
    store.path("k").write_bytes(forged)  # the seal left as it was: the bytes differ
    assert store.get("k") is None and "does not match" in capsys.readouterr().err


def test_an_entry_sealed_under_another_key_is_refused(home, monkeypatch, capsys):
    store = cache.BytesCache("spec-vectors", ".json")
    store.put("k", b"[]")
    assert store.get("k") == b"[]"
    monkeypatch.setenv(CACHE_KEY_ENV, str(home / "other" / "cache.key"))  # another user's
    assert store.get("k") is None and not store.path("k").exists()
    assert "signed with another key" in capsys.readouterr().err


def test_a_rewritten_spec_vectors_entry_gives_no_passes(home):
    """Rows of an engine read back from the cache: a rewritten entry (all `pass`, its digest
    recomputed) is not read back, so the engine runs again."""
    spec_cache = pytest.importorskip("conformance.runners.onnx.spec_cache")
    k = spec_cache._key("onnxruntime")
    rows = [{"case": f"c{i}", "runner": "onnxruntime", "opset": 23, "kind": "value",
             "outcome": "fail" if i < 3 else "pass", "reason": "", "max_abs_error": 1.0}
            for i in range(10)]
    spec_cache.CACHE.put(k, json.dumps(rows).encode())
    assert json.loads(spec_cache.CACHE.get(k)) == rows
    forged = json.dumps([{**r, "outcome": "pass"} for r in rows]).encode()
    spec_cache.CACHE.path(k).write_bytes(forged)
    (spec_cache.CACHE.directory / f"{spec_cache.CACHE.full_key(k)}.sha256").write_bytes(
        _plain_digest(spec_cache.CACHE, k, forged))
    assert spec_cache.CACHE.get(k) is None


def test_an_entry_that_is_a_symlink_is_neither_read_nor_followed(home, capsys):
    outside = home / "outside.txt"
    outside.write_bytes(b"a file of the user's")
    store = cache.BytesCache("onnx", ".onnx")
    store.put("k", b"graph")
    store.path("k").unlink()
    store.path("k").symlink_to(outside)
    assert store.get("k") is None
    assert not store.path("k").is_symlink() and outside.read_bytes() == b"a file of the user's"
    assert "cannot be read as a file" in capsys.readouterr().err


def test_a_cache_folder_that_is_a_symlink_is_not_used(home, capsys):
    (home / "elsewhere").mkdir()
    (home / "cache").symlink_to(home / "elsewhere")
    store = cache.BytesCache("onnx", ".onnx")
    store.put("k", b"graph")
    assert store.get("k") is None and not any((home / "elsewhere").iterdir())
    assert CACHE_ENV in capsys.readouterr().err


def _model_with(tensor, *, in_subgraph: bool = False):
    from onnx import TensorProto, helper

    out = helper.make_tensor_value_info("y", TensorProto.FLOAT, [4])
    node = helper.make_node("Identity", [tensor.name], ["y"])
    if not in_subgraph:
        return helper.make_model(helper.make_graph([node], "g", [], [out], [tensor]))
    branch = helper.make_graph([node], "b", [], [out], [tensor])
    cond = helper.make_tensor_value_info("c", TensorProto.BOOL, [])
    node = helper.make_node("If", ["c"], ["y"], then_branch=branch, else_branch=branch)
    return helper.make_model(helper.make_graph([node], "g", [cond], [out]))


def _external(location: str, *, flagged: bool = True):
    from onnx import TensorProto

    t = TensorProto(name="w", data_type=TensorProto.FLOAT, dims=[4])
    if flagged:
        t.data_location = TensorProto.EXTERNAL
    entry = t.external_data.add()
    entry.key, entry.value = "location", location
    return t


def test_an_onnx_entry_reading_a_file_of_the_working_directory_is_refused(
        home, monkeypatch, capsys):
    """Sealed under the right key (as an export that wrote external data would be), the
    entry still never reaches a runtime: OpenVINO's read_model(bytes) reads `location`
    relative to the working directory."""
    pytest.importorskip("onnx")
    from onnx import numpy_helper

    from conformance.runners._export.onnx_runtime import CACHE

    monkeypatch.chdir(home)
    np.arange(4, dtype=np.float32).tofile(home / "secret.bin")
    CACHE.put("ext", _model_with(_external("secret.bin")).SerializeToString())
    assert CACHE.get("ext") is None and not CACHE.path("ext").exists()
    assert "'w' keeps its data outside the entry" in capsys.readouterr().err
    inline = _model_with(numpy_helper.from_array(np.ones(4, np.float32), "w"))
    CACHE.put("inline", inline.SerializeToString())
    assert CACHE.get("inline") == inline.SerializeToString()


@pytest.mark.parametrize("tensor, in_subgraph", [
    (("/etc/passwd", True), False), (("../x.bin", True), True),
    (("secret.bin", False), False)], ids=["absolute", "in-a-subgraph", "unflagged"])
def test_every_external_tensor_is_found(tensor, in_subgraph):
    pytest.importorskip("onnx")
    model = _model_with(_external(tensor[0], flagged=tensor[1]), in_subgraph=in_subgraph)
    assert "keeps its data outside" in cache.onnx_external_data(model.SerializeToString())
    assert "no ONNX model" in cache.onnx_external_data(b"\xff\xff not protobuf")


def test_jax_loads_only_executables_whose_seal_verifies(home, capsys):
    """Every program JAX stores lands sealed in the suite's cache (never JAX's own file
    cache); executables replaced by garbage are evicted and compiled again (loading them
    would crash or run them), and the result stays right."""
    jax = pytest.importorskip("jax")
    import jax.numpy as jnp

    from conformance.runners.jax_cache import SignedExecutables, signed_compilation_cache

    def f(x):
        return jnp.sin(x) @ x.T + 3.0

    folder = signed_compilation_cache()
    if folder is None:
        pytest.skip("this JAX has no compilation-cache hook: its persistent cache is off")
    from jax._src import compilation_cache as jax_cc

    assert isinstance(jax_cc._cache, SignedExecutables)
    want = np.asarray(jax.jit(f)(jnp.ones((8, 8))))
    stored = [p for p in os.scandir(folder) if p.name.endswith(".xla")]
    assert stored and all(os.path.exists(p.path[:-4] + ".sha256") for p in stored)
    for p in stored:
        with open(p.path, "wb") as fh:
            fh.write(b"\x00garbage machine code")
    jax.clear_caches()
    assert np.array_equal(np.asarray(jax.jit(f)(jnp.ones((8, 8)))), want)
    assert capsys.readouterr().err.count("evicted") >= 1


def test_a_jax_without_the_hook_keeps_its_persistent_cache_off(home, monkeypatch, capsys):
    """Rather than JAX's own file cache (which loads whatever the folder holds), none."""
    jax = pytest.importorskip("jax")
    from jax._src import compilation_cache as jax_cc

    from conformance.runners import jax_cache

    monkeypatch.setattr(jax_cache, "HOOKS", (*jax_cache.HOOKS, "_a_hook_this_jax_lacks"))
    before = (jax_cc._cache, jax.config.jax_compilation_cache_dir)
    assert jax_cache.signed_compilation_cache() is None
    assert (jax_cc._cache, jax.config.jax_compilation_cache_dir) == before
    assert "stays off" in capsys.readouterr().err


def test_a_planted_entry_over_the_size_limit_is_never_read(home, monkeypatch, capsys):
    monkeypatch.setattr(cache, "MAX_ENTRY", 100)
    store = cache.BytesCache("onnx", ".onnx")
    store.put("k", b"x" * 50)
    store.path("k").write_bytes(b"x" * 101)
    assert store.get("k") is None and "over 100 bytes" in capsys.readouterr().err
    store.put("big", b"x" * 101)  # nothing stored that could never be read back
    assert not store.path("big").exists()


@pytest.mark.parametrize("damage", [b"\xff", b"G", b"\n"], ids=["non-ascii", "non-hex", "line"])
def test_a_damaged_seal_is_no_seal(home, damage, capsys):
    """compare_digest refuses non-ASCII text with a TypeError: a seal damaged that way is
    evicted like any other, never a traceback."""
    store = cache.BytesCache("onnx", ".onnx")
    store.put("k", b"graph")
    seal = store.directory / "k.sha256"
    raw = seal.read_bytes()
    at = len(cache.SEAL_HEADER) + 5
    seal.write_bytes(raw[:at] + damage + raw[at + 1:])
    assert store.get("k") is None and not store.path("k").exists()
