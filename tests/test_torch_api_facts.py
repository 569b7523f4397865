"""The torch runners report facts of torch's API (ApiFact), never ledger cells: each fact's
word is read from torch (a constructor's default, a weight's shape, the weights a call
returns), the documented word beside it comes from the expectations file, and what the
runner cannot read from torch (the hand-kept cache's layout, a fully masked decode step)
is the ledger's: the signature names no cache argument, the step is measured through the
runner's decode (RawCall step_mask).  Planted torch behaviour moves the cells."""
from __future__ import annotations

import types

from tests.helpers import require

require("torch")

from conformance.contract.api_facts import ApiFact  # noqa: E402
from conformance.conventions.probes.api_facts import own_cells  # noqa: E402
from conformance.runners.torch.mha import TorchMHA, TorchMHAFastPath  # noqa: E402
from conformance.runners.torch.sdpa import TorchSDPA  # noqa: E402
from conformance.runners.torch.sdpa_cache import TorchSDPACache  # noqa: E402

RUNNERS = (TorchSDPA(), TorchSDPA(gqa=True), TorchSDPACache(), TorchMHA(),
           TorchMHA(need_weights=False), TorchMHAFastPath())


def test_every_torch_runner_reports_api_facts_only():
    for runner in RUNNERS:
        facts = runner.conventions()
        assert facts and all(isinstance(f, ApiFact) for f in facts), runner.name
    # the cache is the runner's own tensors: no fact of it is torch's
    abouts = {f.about for f in TorchSDPACache().conventions()}
    assert not abouts & {"cache_tensor_layout", "no_key_row"}, abouts


def _shim(torch, mha_class):
    """`torch` with nn.MultiheadAttention replaced by `mha_class` (mha_cells takes torch
    as an argument)."""
    nn = types.SimpleNamespace(MultiheadAttention=mha_class, functional=torch.nn.functional)
    return types.SimpleNamespace(nn=nn, from_numpy=torch.from_numpy,
                                 manual_seed=torch.manual_seed, no_grad=torch.no_grad)


def test_mha_facts_are_read_from_torch_and_documented_words_from_data():
    """Planted: a MultiheadAttention whose default layout is batch-first and whose default
    call returns per-head weights.  The facts follow the module, the documented words stay
    the documentation's (expectations/torch.mha.yaml)."""
    import torch

    from conformance.runners.torch.mha_observations import mha_cells

    class Planted(torch.nn.MultiheadAttention):
        def __init__(self, embed_dim, num_heads, batch_first=True, **kw):
            super().__init__(embed_dim, num_heads, batch_first=batch_first, **kw)

        def forward(self, *args, **kw):
            kw.setdefault("average_attn_weights", False)
            return super().forward(*args, **kw)

    real = {c.axis: c for c in own_cells(TorchMHA(), mha_cells(torch, "ordinary"))}
    planted = {c.axis: c for c in own_cells(TorchMHA(), mha_cells(_shim(torch, Planted),
                                                                  "ordinary"))}
    assert (real["input_layout"].value, real["returned_weights"].value) == (
        "sequence_first", "head_averaged")
    assert (planted["input_layout"].value, planted["returned_weights"].value) == (
        "batch_first", "per_head")
    for cells in (real, planted):
        assert cells["input_layout"].documented == "sequence_first"
        assert cells["returned_weights"].documented == "head_averaged"
        assert "MultiheadAttention.html" in cells["size_arguments"].documented_source


def test_no_weights_and_fast_path_read_their_own_returns():
    import torch

    from conformance.runners.torch.mha_observations import mha_cells

    plain = {f.about: f for f in mha_cells(torch, "ordinary", need_weights=False)}
    assert plain["weights_returned"].value == "none"
    fast = {f.about: f for f in mha_cells(torch, "fast")}
    assert fast["weights_returned"].value == "head_averaged"  # (2, 5, 5), the fast path ran
    assert "fast path ran: True" in fast["weights_returned"].evidence
    docs = {c.axis: c.documented for c in own_cells(TorchMHA(need_weights=False))}
    assert docs["returned_weights"] == "none"


def test_the_cache_s_layout_and_masked_step_are_the_ledger_s(monkeypatch):
    """cache_layout: SDPA's signature names no cache argument (not the runner's tensors);
    fully_masked_row: the decode's fully masked step as SDPA answers it.  Planted: an SDPA
    whose boolean mask blocks with -1e9 added (a fully masked row is then the mean of v)."""
    import torch

    from conformance.conventions.probes.decode_masks import decode_mask_cells
    from conformance.conventions.probes.features import signature_cells

    runner = TorchSDPACache()
    layout = next(c for c in signature_cells(runner, set()) if c.axis == "cache_layout")
    assert layout.value == "not_applicable", layout.evidence
    row = next(c for c in decode_mask_cells(runner, []) if c.axis == "fully_masked_row")
    assert row.value == "zeros" and "position 9" in row.evidence, row.evidence

    sdpa = torch.nn.functional.scaled_dot_product_attention

    def finite_fill(q, k, v, attn_mask=None, **kw):
        if attn_mask is not None and attn_mask.dtype == torch.bool:
            attn_mask = torch.where(attn_mask, 0.0, -1e9).to(q.dtype)
        return sdpa(q, k, v, attn_mask=attn_mask, **kw)

    monkeypatch.setattr(torch.nn.functional, "scaled_dot_product_attention", finite_fill)
    row = next(c for c in decode_mask_cells(runner, []) if c.axis == "fully_masked_row")
    assert row.value == "uniform", row.evidence
