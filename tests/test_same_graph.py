"""runners/_export/same_graph.py: cases whose modules export to equal programs share one
conversion, and anything that changes the program (a weight, a shape, the caller's parts)
makes a conversion of its own; a warm lookup never exports."""
from __future__ import annotations

import pytest

from conformance import progress
from conformance.cache import BytesCache
from conformance.runners._export import same_graph
from conformance.runners._export.same_graph import SameGraph, program_digest

from .mha_call import args, call, mha

@pytest.fixture(scope="module")
def torch():
    """torch, imported when a test of this file runs (collection stays framework-free)."""
    return pytest.importorskip("torch")


@pytest.fixture
def cache(tmp_path, monkeypatch):
    monkeypatch.setenv("CONFORMANCE_CACHE_DIR", str(tmp_path / "cache"))
    return SameGraph(BytesCache("toy", ".bin"))


class Converter:
    """Counts its conversions; the artefact says which one made it."""

    def __init__(self):
        self.made = 0

    def __call__(self) -> bytes:
        self.made += 1
        return f"artefact {self.made}".encode()


def test_equal_programs_share_one_conversion_and_a_warm_lookup_never_exports(
        torch, cache, monkeypatch):
    convert = Converter()
    a, hit_a = cache.get_or_make("case-a", torch, call(torch, mha(torch)), args(torch),
                                 convert, "v1")
    b, hit_b = cache.get_or_make("case-b", torch, call(torch, mha(torch)), args(torch),
                                 convert, "v1")
    assert convert.made == 1 and a == b == b"artefact 1" and (hit_a, hit_b) == (False, True)
    monkeypatch.setattr(same_graph, "program_digest", lambda *a: pytest.fail("exported"))
    again, hit = SameGraph(cache.cache).get_or_make("case-b", torch, None, (), convert, "v1")
    assert (again, hit, convert.made) == (b"artefact 1", True, 1)


@pytest.mark.parametrize("change", ["weight", "shape", "parts", "seed"])
def test_what_changes_the_program_makes_its_own_conversion(torch, cache, change):
    convert = Converter()
    cache.get_or_make("case-a", torch, call(torch, mha(torch)), args(torch), convert, "v1")
    module = call(torch, mha(torch, seed=1 if change == "seed" else 0,
                             bump=change == "weight"))
    other, _ = cache.get_or_make("case-b", torch, module,
                                 args(torch, 4 if change == "shape" else 3), convert,
                                 "v2" if change == "parts" else "v1")
    assert convert.made == 2 and other == b"artefact 2"


def test_a_module_torch_export_refuses_falls_back_to_the_case_key(torch, cache):
    class Refused(torch.nn.Module):
        def forward(self, x):
            if x.sum() > 0:  # data-dependent control flow: torch.export raises
                return x
            return -x

    assert program_digest(torch, Refused(), (torch.ones(2),)) is None
    convert = Converter()
    for k in ("case-a", "case-b", "case-a"):
        cache.get_or_make(k, torch, Refused(), (torch.ones(2),), convert)
    assert convert.made == 2  # one per case key, as without sharing


def test_the_index_entries_are_not_counted_as_conversions(torch, cache, tmp_path,
                                                          monkeypatch):
    monkeypatch.setenv(progress.PROGRESS_ENV, str(tmp_path))
    cache.get_or_make("case-a", torch, call(torch, mha(torch)), args(torch), Converter())
    lines = [line for f in tmp_path.glob("*.jsonl") for line in f.read_text().splitlines()]
    assert lines == ['{"k":"toy"}']
