"""torch.sdpa.cache: a prefill and single steps through a hand-kept cache equal the full
causal forward; a step that passes is_causal=True (upper-left: key 0 only) does not, and
the cache cell names the decode the runner runs."""
from __future__ import annotations

import numpy as np

from conformance.case.loader import parse_case
from conformance.oracle.canonical import case_data
from conformance.oracle.reference import attention
from tests.helpers import require

require("torch")

from conformance.runners.torch.sdpa_cache import TorchSDPACache  # noqa: E402

CASE = {"id": "t-decode", "attention": {"num_heads": 4, "num_kv_heads": 2,
                                        "query_features": 16},
        "inputs": {"batch": 2, "query_len": 7, "self_attention": True},
        "mask": {"causal": "upper_left"}, "decode": {"prefill": 4, "steps": 3}}


def _run(runner, case):
    return runner.run(case, runner.translate(case), case_data(case)).output


def test_decode_equals_the_full_causal_forward():
    case = parse_case(CASE, "<test>")
    d = np.max(np.abs(_run(TorchSDPACache(), case) - attention(case).output))
    assert d < 1e-5


def test_a_step_with_is_causal_is_caught(monkeypatch):
    """The planted defect: every step passes is_causal=True, as a user might."""
    import torch

    sdpa = torch.nn.functional.scaled_dot_product_attention

    def always_causal(q, k, v, **kw):
        return sdpa(q, k, v, **{**kw, "is_causal": True})

    monkeypatch.setattr(torch.nn.functional, "scaled_dot_product_attention", always_causal)
    case = parse_case(CASE, "<test>")
    d = np.max(np.abs(_run(TorchSDPACache(), case) - attention(case).output))
    assert d > 1e-2


def test_cells():
    """The cache cell is the runner's decode (no flag at the step, as SDPA's users call
    it); the step with is_causal=True is quoted beside it as the flag's reading."""
    from conformance.conventions.probes import ledger_cells

    cells = {c.axis: c for c in ledger_cells(TorchSDPACache())}
    align = cells["cache_causal_alignment"]
    assert align.value == "lower_right", align.evidence
    assert "with is_causal=True passed at the step, it attends key 0 only: that is the " \
           "flag's upper-left reading, causal_flag" in align.evidence
    assert cells["causal_flag"].value == "upper_left"
    assert cells["kv_head_mapping"].value == "grouped"
    assert cells["window_width"].value == "not_applicable"
    # its decode's fully masked step, asked through step_mask (decode_masks.py): SDPA's
    # zero weights (the single call's reading too, torch.sdpa)
    assert cells["fully_masked_row"].value == "zeros", cells["fully_masked_row"].evidence
    assert "masks all 10 keys" in cells["fully_masked_row"].evidence


def test_a_decode_that_passes_is_causal_is_named_upper_left(monkeypatch):
    """The planted defect: the decode passes is_causal=True at every step; the ledger's
    cache cell measures the decode the runner runs, so it says upper_left (the planted
    answer is rejected)."""
    import torch

    from conformance.conventions.probes.cache import cache_causal_alignment_cell

    sdpa = torch.nn.functional.scaled_dot_product_attention

    def always_causal(q, k, v, **kw):
        return sdpa(q, k, v, **{**kw, "is_causal": True})

    monkeypatch.setattr(torch.nn.functional, "scaled_dot_product_attention", always_causal)
    assert cache_causal_alignment_cell(TorchSDPACache()).value == "upper_left"


def test_plain_cases_are_not_expressible():
    case = parse_case({k: v for k, v in CASE.items() if k != "decode"}, "<test>")
    assert "decode" in TorchSDPACache().translate(case).reason
