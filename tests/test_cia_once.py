"""cia_ops_listed_once (runners/_export/cia_once.py) keeps torch.export's list of
preservable composite operators per registry state: a lowering and an export made with it
must be byte-for-byte the ones made without it, a kept list that differs must show in the
bytes, and a registry that grows must be walked again."""
from __future__ import annotations

import contextlib

import pytest

from conformance.runners._export import cia_once
from conformance.runners._export.cia_once import cia_ops_listed_once

from .mha_call import args, call, mha


def _module():
    torch = pytest.importorskip("torch")  # here, not at collection (framework-free)
    return torch, call(torch, mha(torch)), args(torch)


def _decomposed() -> str:
    """The graph run_decompositions gives (every converter here calls it): its code text."""
    torch, module, inputs = _module()
    program = torch.export.export(module, inputs).run_decompositions()
    return program.graph_module.code


def _lowered() -> bytes:
    pytest.importorskip("executorch", reason="the ExecuTorch lowering needs executorch")
    torch, module, inputs = _module()
    from conformance.runners.executorch.common import lower
    return lower(torch, module, inputs)


@pytest.fixture
def fresh(monkeypatch):
    monkeypatch.setattr(cia_once, "_KEPT", {})


def test_kept_list_gives_the_plain_decomposition_and_lowering(fresh, monkeypatch):
    plain = _decomposed()
    with cia_ops_listed_once():
        first, again = _decomposed(), _decomposed()
    assert len(cia_once._KEPT) == 1
    assert first == plain and again == plain
    kept_pte = _lowered()  # lower() keeps the list itself (five decompositions)
    monkeypatch.setattr(cia_once, "cia_ops_listed_once", contextlib.nullcontext)
    assert _lowered() == kept_pte  # the plain lowering: the walk on every decomposition


def test_a_kept_list_that_differs_shows_in_the_decomposition(fresh):
    """The planted defect: a kept list without aten.linear, the projections' operator.  The
    decomposition then handles linear as an operator it cannot place (torch 2.13 asserts
    "This should be a custom op"), or gives another graph: either way not the plain one."""
    torch = pytest.importorskip("torch")
    plain = _decomposed()
    with cia_ops_listed_once():
        _decomposed()
        (key, kept), = cia_once._KEPT.items()
        cia_once._KEPT[key] = frozenset(op for op in kept if op != torch.ops.aten.linear.default)
        try:
            planted = _decomposed()
        except AssertionError as exc:  # torch's own check caught the wrong list
            planted = f"refused: {exc}"
    assert planted != plain


def test_a_new_operator_changes_the_key_and_is_walked_again(fresh):
    torch = pytest.importorskip("torch")
    before = cia_once.registry_state(torch)
    with cia_ops_listed_once():
        _decomposed()
        lib = torch.library.Library("conformance_cia_probe", "DEF")  # noqa: TOR901
        lib.define("twice(Tensor x) -> Tensor")
        lib.impl("twice", lambda x: x * 2, "CompositeImplicitAutograd")
        try:
            after = cia_once.registry_state(torch)
            assert after != before
            _decomposed()
            assert list(cia_once._KEPT) == [after]
            assert any("conformance_cia_probe" in str(op) for op in cia_once._KEPT[after])
        finally:
            del lib


def test_the_patch_is_removed_after_the_block():
    pytest.importorskip("torch")
    from torch._export import utils
    from torch.export import exported_program
    with cia_ops_listed_once():
        assert exported_program._collect_all_valid_cia_ops is not utils._collect_all_valid_cia_ops
    assert exported_program._collect_all_valid_cia_ops is utils._collect_all_valid_cia_ops
