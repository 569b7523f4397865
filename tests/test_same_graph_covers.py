"""runners/_export/same_graph.py: an artifact stored under a program digest does not hash the
cache's covered source (the weights' generator, oracle/canonical.py): the digest holds every
weight byte, so an edit of that file which leaves a program as it was converts nothing
again, while a case key's name of its digest is looked up afresh."""
from __future__ import annotations

import pytest

from conformance import cache as cache_module
from conformance.cache import BytesCache
from conformance.runners._export.same_graph import SameGraph

from .mha_call import args, call, mha
from .test_same_graph import Converter

COVERED = ("conformance/oracle/canonical.py",)


@pytest.fixture(scope="module")
def torch():
    return pytest.importorskip("torch")


class CoveredArtifacts(SameGraph):
    """Planted: the artifacts under a digest keep the covers (a covered edit reconverts)."""

    @property
    def artifacts(self) -> BytesCache:
        return self.cache


def converted_across_an_edit(torch, same, monkeypatch, bump: bool = False) -> int:
    """Conversions made for one case before and after its covered source changes."""
    convert = Converter()
    same.get_or_make("case-a", torch, call(torch, mha(torch)), args(torch), convert, "v1")
    monkeypatch.setattr(cache_module, "code_hash", lambda *files: "the file, edited")
    same.get_or_make("case-a", torch, call(torch, mha(torch, bump=bump)), args(torch),
                     convert, "v1")
    return convert.made


@pytest.fixture
def covered(tmp_path, monkeypatch):
    monkeypatch.setenv("CONFORMANCE_CACHE_DIR", str(tmp_path / "cache"))
    return BytesCache("toy", ".bin", covers=COVERED)


def test_an_edit_that_leaves_the_program_converts_nothing_again(torch, covered, monkeypatch):
    assert converted_across_an_edit(torch, SameGraph(covered), monkeypatch) == 1


def test_an_edit_that_changes_a_weight_converts_again(torch, covered, monkeypatch):
    assert converted_across_an_edit(torch, SameGraph(covered), monkeypatch, bump=True) == 2


def test_planted_artifacts_keyed_with_the_covers_convert_at_every_edit(
        torch, covered, monkeypatch):
    assert converted_across_an_edit(torch, CoveredArtifacts(covered), monkeypatch) == 2
