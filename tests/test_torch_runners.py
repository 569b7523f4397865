"""The torch runners' translations: layout and mask polarity, in isolation."""
from __future__ import annotations

import numpy as np
import pytest

from conformance.contract.runner import NotExpressible
from conformance.runners._export.torch_mha import build_mha, torch_masks
from conformance.runners.torch.mha import TorchMHA, TorchMHAFastPath
from conformance.oracle.canonical import case_data

from .helpers import make_case


def test_translation_words():
    t = TorchMHA().translate(make_case(attention={"num_heads": 2, "query_features": 8,
                                                  "key_features": 6}))
    assert t.call == ("torch.nn.MultiheadAttention(embed_dim=8, num_heads=2, kdim=6, vdim=6, "
                      "batch_first=True)")


@pytest.mark.parametrize("attention, words", [
    ({"num_heads": 4, "num_kv_heads": 2, "query_features": 8}, "grouped-query"),
    ({"num_heads": 2, "query_features": 8, "qk_head_dim": 3}, "head_dim = embed_dim // num_heads"),
    ({"num_heads": 2, "query_features": 8, "output_features": 5}, "out_proj"),
])
def test_not_expressible_reasons(attention, words):
    t = TorchMHA().translate(make_case(attention=attention))
    assert isinstance(t, NotExpressible) and words in t.reason


def test_fastpath_needs_self_attention():
    t = TorchMHAFastPath().translate(make_case())
    assert isinstance(t, NotExpressible) and "non-self attention" in t.reason


def test_masks_flip_to_blocked_polarity():
    torch = pytest.importorskip("torch", reason="torch not installed")
    case = make_case(inputs={"key_len": 4}, mask={"key_padding": [4, 2], "causal": "upper_left"})
    kpm, am = torch_masks(torch, case, case_data(case).inputs)
    assert kpm.tolist() == [[False] * 4, [False, False, True, True]]  # True = padding
    assert am.shape == (5, 4) and am[0].tolist() == [False, True, True, True]  # True = blocked


def test_weights_land_in_out_in_layout():
    torch = pytest.importorskip("torch", reason="torch not installed")
    case = make_case()
    data = case_data(case)
    mha, shapes = build_mha(torch, case, TorchMHA().translate(case), data.weights)
    assert shapes["in_proj_weight"] == (24, 8)
    w = mha.in_proj_weight.detach().double().numpy()
    # rows 4:8 of the packed (3E, E) matrix are head 1's query projection, transposed
    np.testing.assert_allclose(w[4:8], data.weights.wq[1].T, rtol=1e-7)


@pytest.mark.parametrize("sections, args", [
    ({}, "q, k, v"),
    ({"mask": {"causal": "upper_left"}, "inputs": {"key_len": 4}}, "q, k, v, is_causal=True"),
    ({"mask": {"causal": "lower_right"}, "inputs": {"key_len": 4}},
     "q, k, v, attn_mask=causal_lower_right(T, S)"),
    ({"mask": {"causal": "lower_right", "key_padding": [4, 2]}, "inputs": {"key_len": 4}},
     "q, k, v, attn_mask=bool (B, 1, T, S), True = attend"),
    ({"attention": {"num_heads": 4, "num_kv_heads": 2, "query_features": 8},
      "mask": {"key_padding": [5, 2]}},
     "q, k, v, attn_mask=bool (B, 1, T, S), True = attend, enable_gqa=True"),
])
def test_sdpa_plan_is_typed_and_the_call_reads_as_typed(sections, args):
    from conformance.runners.torch.sdpa import SdpaPlan, TorchSDPA

    t = TorchSDPA().translate(make_case(**sections))
    assert isinstance(t.plan, SdpaPlan)
    assert t.call == f"torch.nn.functional.scaled_dot_product_attention({args})"


def test_descriptors_say_what_each_torch_runner_runs():
    from conformance.runners.torch.sdpa import TorchSDPA

    got = [(r.framework, r.system, r.path) for r in (TorchMHA(), TorchMHAFastPath(), TorchSDPA())]
    assert got == [("torch", "torch.nn.MultiheadAttention", "ordinary"),
                   ("torch", "torch.nn.MultiheadAttention", "fast path"),
                   ("torch", "torch.nn.functional.scaled_dot_product_attention", "default")]
