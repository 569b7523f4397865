"""A target's facts are read from the user's code (its signature, the module it builds),
never assumed from its kind alone, and the ledger keeps them only where running the target
confirms them: a planted sdpa target that reads its arrays as (B, T, H, d) loses the
layout fact; a drop-in module's facts quote the shapes it built; a class that cannot be
built reports nothing, and the ledger then says no reading was given."""
from __future__ import annotations

from conformance.contract.api_facts import ApiFact
from conformance.conventions.probes.api_facts import own_cells
from conformance.conventions.probes.sizes import input_layout_cell, size_arguments_cell
from conformance.paths import ROOT
from conformance.runners import load
from conformance.runners.target import TargetError, TargetSpec

from .helpers import require

SEQUENCE_FIRST = '''
import numpy as np


def attention(q, k, v, *, mask=None, is_causal=False, scale=None, window=None):
    """Reads the memory of q, k, v as (B, T, H, d): the layout its kind does not call it
    in (it runs at any sizes, and answers in the shape it was given)."""
    b, h, t, d = q.shape
    q, k, v = (a.reshape(b, a.shape[2], h, a.shape[3]).swapaxes(1, 2) for a in (q, k, v))
    s = (q @ np.swapaxes(k, -1, -2)) * (scale or 1 / np.sqrt(d))
    p = np.exp(s - s.max(-1, keepdims=True))
    out = (p / p.sum(-1, keepdims=True)) @ v
    return np.ascontiguousarray(out.swapaxes(1, 2)).reshape(b, h, t, -1).astype(q.dtype)
'''


def _sdpa_target(spec: TargetSpec):
    return load(*spec.line())


def _cells(runner) -> dict:
    return {c.axis: c for c in own_cells(runner)}


def test_the_sdpa_target_s_facts_come_from_its_signature_and_are_confirmed():
    runner = _sdpa_target(TargetSpec("examples.textbook:attention", "sdpa", cwd=str(ROOT)))
    facts = runner.conventions()
    assert all(isinstance(f, ApiFact) for f in facts)
    own = _cells(runner)
    assert "(q, k, v, mask, is_causal, scale)" in own["size_arguments"].evidence
    assert size_arguments_cell(runner, own["size_arguments"]).value == "given_tensors"
    assert input_layout_cell(runner, own["input_layout"]).value == "batch_heads_first"


def test_a_target_reading_another_layout_loses_the_layout_fact(tmp_path):
    """Planted: the target reads its arrays as (B, T, H, d); its kind's layout is then not
    what it computes, so the ledger keeps no reading."""
    (tmp_path / "seq_first_attention.py").write_text(SEQUENCE_FIRST)
    runner = _sdpa_target(TargetSpec("seq_first_attention:attention", "sdpa",
                                     cwd=str(tmp_path)))
    own = _cells(runner)
    assert "its other parameters (window) are not passed" in own["size_arguments"].evidence
    cell = input_layout_cell(runner, own["input_layout"])
    assert cell.value == "not_probed" and "is not what the system computes" in cell.evidence


def test_a_drop_in_module_s_facts_quote_what_it_built(monkeypatch):
    require("torch")
    runner = load(*TargetSpec("torch.nn:MultiheadAttention", "torch-mha",
                              cwd=str(ROOT)).line())
    (fact,) = runner.conventions()
    assert fact.about == "head_size_from" and fact.value == "derived_from_width"
    assert "head_dim 4" in fact.evidence and "'in_proj_weight': (24, 8)" in fact.evidence
    assert size_arguments_cell(runner, _cells(runner)["size_arguments"]).value == \
        "derived_from_width"

    def cannot_build():
        raise TargetError("planted: the class cannot be built")

    monkeypatch.setattr(runner, "cls", cannot_build)
    assert runner.conventions() == []
    cell = size_arguments_cell(runner, _cells(runner).get("size_arguments"))
    assert cell.value == "not_probed" and "reports no reading" in cell.evidence
