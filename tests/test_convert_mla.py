"""convert/mla.py: canonical MLA weights to DeepseekV3Attention's packed state dicts
(transformers' kv_b_proj, mlx-lm's embed_q / unembed_out) and back, bit for bit, with the
packings a port gets wrong planted."""
from __future__ import annotations

import numpy as np
import pytest

from conformance.case.loader import parse_case
from conformance.convert._core import ConversionError
from conformance.convert.mla import LatentDims, from_deepseek_v3, to_deepseek_v3
from conformance.oracle import reference
from conformance.oracle.canonical import case_data
from conformance.oracle.latent_attention import NAMES

DIMS = LatentDims(num_heads=2, qk_nope_head_dim=4, qk_rope_head_dim=4, v_head_dim=6)


def mla_case(q_rank):
    return parse_case({"id": "mla-convert", "attention": {
        "num_heads": 2, "query_features": 16, "qk_head_dim": 8, "v_head_dim": 6, "bias": False,
        "rope": {"style": "interleaved", "rotary_dim": 4},
        "mla": {"q_lora_rank": q_rank, "kv_lora_rank": 3}},
        "inputs": {"batch": 1, "query_len": 4, "self_attention": True}}, "<test>")


@pytest.mark.parametrize("form", ["materialised", "absorbed"])
@pytest.mark.parametrize("q_rank", [5, None])
def test_round_trip_is_exact(form, q_rank):
    w = case_data(mla_case(q_rank)).weights
    state = to_deepseek_v3(w, form)
    back = from_deepseek_v3(state, DIMS)
    for name in NAMES + ("wq", "wo"):
        a, b = getattr(w, name), getattr(back, name)
        assert (a is None) == (b is None), name
        if a is not None:
            assert a.shape == b.shape and np.array_equal(a, b), name
    assert state["kv_a_proj_with_mqa.weight"].shape == (3 + 4, 16)  # [latent | ONE rope head]
    if form == "materialised":
        assert state["kv_b_proj.weight"].shape == (2 * (4 + 6), 3)


def test_packing_is_per_head_nope_then_value():
    """kv_b_proj's rows: head 0's k_nope rows, head 0's v rows, then head 1's."""
    w = case_data(mla_case(5)).weights
    rows = to_deepseek_v3(w)["kv_b_proj.weight"]
    assert np.array_equal(rows[:4], w.mla_k_up[0].T) and np.array_equal(rows[4:10], w.mla_v_up[0].T)
    assert np.array_equal(rows[10:14], w.mla_k_up[1].T)
    absorbed = to_deepseek_v3(w, "absorbed")
    assert np.array_equal(absorbed["embed_q.weight"], w.mla_k_up)


def test_kv_b_split_in_halves_is_caught():
    """Planted: kv_b_proj read as [every head's k_nope | every head's v] (the halves a port
    gets by splitting the whole projection) gives other weights and another output."""
    case = mla_case(5)
    data = case_data(case)
    state = to_deepseek_v3(data.weights)
    kv_b = state["kv_b_proj.weight"]
    halves = np.concatenate([kv_b.reshape(2, 10, 3)[:, :4].reshape(8, 3),
                             kv_b.reshape(2, 10, 3)[:, 4:].reshape(12, 3)])
    wrong = from_deepseek_v3({**state, "kv_b_proj.weight": halves}, DIMS)
    assert not np.array_equal(wrong.mla_k_up, data.weights.mla_k_up)
    from dataclasses import replace
    out = reference.attention(case, replace(data, weights=wrong)).output
    assert np.abs(out - reference.attention(case, data).output).max() > 1e-2


def test_rope_key_per_head_is_refused():
    """Planted: a rope key per head (kv_a_proj_with_mqa with H x d_r rope rows) does not
    fit DeepSeek's one shared rope head: the latent it leaves has the wrong width."""
    w = case_data(mla_case(5)).weights
    state = to_deepseek_v3(w)
    per_head = np.concatenate([w.mla_kv_down.T, w.mla_k_rope.T, w.mla_k_rope.T])
    with pytest.raises(ConversionError, match="kv_b_proj.weight"):
        from_deepseek_v3({**state, "kv_a_proj_with_mqa.weight": per_head}, DIMS)


def test_not_an_mla_weight_set_is_refused():
    plain = parse_case({"id": "plain", "attention": {"num_heads": 2, "query_features": 8}},
                       "<test>")
    with pytest.raises(ConversionError, match="not an MLA weight set"):
        to_deepseek_v3(case_data(plain).weights)
