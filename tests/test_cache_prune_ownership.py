"""The prune deletes only what the suite wrote: entries whose seal's owner tag verifies under
the user's key.  A cache folder shared with other files is left whole (said once), a cache
folder that is a symlink is refused, and no symlink inside is followed or deleted through."""
from __future__ import annotations

import os

import pytest

from conformance.cache import BytesCache, Seal, owner_tag, secret
from conformance.cache_prune import prune
from conformance.paths import CACHE_ENV, CACHE_KEY_ENV


@pytest.fixture
def root(tmp_path, monkeypatch):
    monkeypatch.setenv(CACHE_ENV, str(tmp_path / "cache"))
    monkeypatch.setenv(CACHE_KEY_ENV, str(tmp_path / "config" / "cache.key"))
    return tmp_path / "cache"


def _entries(n: int, size: int = 1000) -> BytesCache:
    store = BytesCache("onnx", ".onnx")
    for i in range(n):
        store.put(f"k{i}", b"x" * size)
        os.utime(store.path(f"k{i}"), (1e9 + i, 1e9 + i))
    return store


def test_the_suites_own_entries_are_pruned_oldest_first(root):
    store = _entries(3)
    done = prune(1, root)
    assert (done.removed, done.refused) == (3, "") and not any(store.directory.iterdir())


def test_a_folder_shared_with_a_foreign_file_is_not_pruned(root, capsys):
    store = _entries(3)
    foreign = root / "notes.txt"
    foreign.write_text("the user's own notes")
    for _ in range(2):
        done = prune(1, root)
        assert done.removed == 0 and "notes.txt" in done.refused and CACHE_ENV in done.refused
    assert foreign.read_text() == "the user's own notes"
    assert all(store.path(f"k{i}").exists() for i in range(3))
    assert capsys.readouterr().err.count("not pruned") == 1  # said once


def test_a_file_named_like_an_entry_is_not_the_suites_without_its_key(root):
    """A file beside the entries named as one, with a seal made under another key (or a
    plain digest), is foreign: the folder is refused and the file kept."""
    store = _entries(1)
    planted = store.directory / "feedfacefeedfacefeedfacefeedface.onnx"
    planted.write_bytes(b"y" * 10)
    where = f"onnx/{planted.name}"
    other = owner_tag(b"k" * 32, where, 10)
    (store.directory / "feedfacefeedfacefeedfacefeedface.sha256").write_text(
        Seal("0" * 64, other).text())
    done = prune(1, root)
    assert done.removed == 0 and "feedface" in done.refused and planted.exists()
    assert owner_tag(secret(), where, 10) != other


def test_a_cache_folder_that_is_a_symlink_is_refused(tmp_path, root, capsys):
    real = tmp_path / "real"
    real.mkdir()
    root.symlink_to(real)
    (real / "old.bin").write_bytes(b"z" * 5000)
    done = prune(1, root)
    assert done.removed == 0 and "symbolic link" in done.refused
    assert CACHE_ENV in capsys.readouterr().err
    assert (real / "old.bin").exists()


def test_an_entry_swapped_for_a_symlink_out_is_not_the_suites(tmp_path, root):
    """An entry's file swapped for a link to an outside file of its size: its seal's owner
    tag still verifies for that size, but a link is no file the suite wrote."""
    outside = tmp_path / "precious.bin"
    outside.write_bytes(b"p" * 1000)
    store = _entries(2)
    store.path("k0").unlink()
    store.path("k0").symlink_to(outside)
    done = prune(1, root)
    assert done.removed == 0 and "k0.onnx" in done.refused
    assert outside.read_bytes() == b"p" * 1000 and store.path("k0").is_symlink()
    os.unlink(store.path("k0"))
    os.unlink(store.directory / "k0.sha256")  # a seal without its bytes is no entry either
    done = prune(1, root)  # once those are gone, the rest is the suite's own
    assert done.refused == "" and done.removed == 1


def test_a_folder_linked_out_of_the_cache_is_never_listed(tmp_path, root, monkeypatch):
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "precious.bin").write_bytes(b"p" * 1000)
    _entries(2)
    (root / "linked").symlink_to(outside)
    listed = []
    real_scandir = os.scandir
    monkeypatch.setattr("conformance.cache_prune.os.scandir",
                        lambda top: listed.append(top) or real_scandir(top))
    done = prune(1, root)
    assert done.removed == 0 and "linked" in done.refused
    assert (outside / "precious.bin").read_bytes() == b"p" * 1000
    assert len(listed) == 2  # the root and onnx/: the linked folder is never listed
