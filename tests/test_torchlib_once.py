"""torchlib_listed_once (runners/_export/torchlib_once.py) hands the dynamo exporter the
process's first torchlib listing: the exported graph must be byte-for-byte the one an
export without it gives, and a listing that differs must show in the bytes."""
from __future__ import annotations

import pytest

from conformance.runners._export import torchlib_once
from conformance.runners._export.torchlib_once import torchlib_listed_once

from .mha_call import args, call, mha


def _export(opset: int | None = None) -> bytes:
    torch = pytest.importorskip("torch")  # here, not at collection (framework-free)
    pytest.importorskip("onnxscript", reason="the dynamo exporter needs onnxscript")
    program = torch.onnx.export(call(torch, mha(torch)), args(torch), dynamo=True, verbose=False,
                                input_names=["query", "attn_mask"],
                                **({"opset_version": opset} if opset else {}))
    return program.model_proto.SerializeToString()


@pytest.fixture(scope="module")
def plain() -> bytes:
    """The graph of an export without the kept listing (shared: an export costs seconds)."""
    return _export()


@pytest.fixture
def fresh(monkeypatch):
    monkeypatch.setattr(torchlib_once, "_LISTED", {})
    monkeypatch.setattr(torchlib_once, "_REGISTRIES", {})


def test_the_listed_once_graph_is_the_plain_export_byte_for_byte(plain, fresh):
    with torchlib_listed_once():
        first, again = _export(), _export()  # the second export is handed the first listing
    assert "ops" in torchlib_once._LISTED
    assert first == plain and again == plain


def test_a_listing_that_differs_shows_in_the_exported_bytes(plain, fresh):
    """The planted defect: a kept listing without torchlib's aten::linear.  The exporter
    then decomposes the projections differently or refuses; either way not the plain
    graph, so the byte comparison above can fail."""
    with torchlib_listed_once():
        _export()
        kept = torchlib_once._LISTED["ops"]
        torchlib_once._LISTED["ops"] = [m for m in kept if m.qualified_name != "aten::linear"]
        try:
            planted = _export()
        except Exception:  # the exporter found no function for an operator: also caught
            planted = None
    assert planted != plain


def test_each_opsets_kept_registry_gives_its_plain_export(plain, fresh):
    """Opset 23 (the Attention operator) and the default: one registry each, built once,
    and every export byte for byte the plain one at its opset."""
    plain23 = _export(23)
    with torchlib_listed_once():
        got = [_export(), _export(23), _export(), _export(23)]
    assert len(torchlib_once._REGISTRIES) == 2
    assert got == [plain, plain23, plain, plain23]


def test_a_kept_registry_that_differs_shows_in_the_exported_bytes(plain, fresh):
    """The planted defect: the kept registry loses aten::masked_fill (the graph's mask
    fill) after the first export; the next export (handed a copy of it) is not the plain
    graph, or is refused."""
    with torchlib_listed_once():
        _export()
        (kept,) = torchlib_once._REGISTRIES.values()
        for target in [t for t in kept.functions if "masked_fill" in str(t)]:
            del kept.functions[target]
        try:
            planted = _export()
        except Exception:  # no function for an operator: also caught
            planted = None
    assert planted != plain


def test_an_export_cannot_change_the_kept_registry(fresh):
    pytest.importorskip("torch")
    from torch.onnx._internal.exporter._registration import ONNXRegistry
    with torchlib_listed_once():
        first = ONNXRegistry.from_torchlib(23)
        first.functions.clear()  # what a custom translation table's registration may do
        again = ONNXRegistry.from_torchlib(23)
    assert again.functions and again is not first
    assert "from_torchlib" in vars(ONNXRegistry)  # the classmethod put back
