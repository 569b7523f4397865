"""attention.mla: its reading and validation, the analytic parameter count, and the float64
oracle's two forms (materialised and absorbed), with the defects a port makes planted."""
from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest

from conformance.case.loader import parse_case
from conformance.case.model import CaseError, parameter_count
from conformance.oracle import latent_attention, reference
from conformance.oracle.canonical import case_data


def mla_case(mla=None, rope=None, **attention):
    raw = {"id": "mla-test", "attention": {
        "num_heads": 2, "query_features": 16, "qk_head_dim": 8, "v_head_dim": 6, "bias": False,
        "rope": rope or {"style": "interleaved", "rotary_dim": 4},
        "mla": {"q_lora_rank": 6, "kv_lora_rank": 4, "qk_rope_head_dim": 4,
                "qk_nope_head_dim": 4} if mla is None else mla, **attention},
        "inputs": {"batch": 2, "query_len": 5, "self_attention": True, "position_offset": 300},
        "mask": {"causal": "upper_left"}}
    return parse_case(raw, "<test>")


def test_fields_read_with_their_defaults():
    m = mla_case({"kv_lora_rank": 4}).attention.mla
    assert (m.q_lora_rank, m.kv_lora_rank, m.qk_rope_head_dim, m.qk_nope_head_dim,
            m.rope_interleave) == (None, 4, 4, 4, True)
    half = mla_case({"kv_lora_rank": 4}, rope={"style": "half_split", "rotary_dim": 4})
    assert half.attention.mla.rope_interleave is False
    assert "mla" in mla_case().features


@pytest.mark.parametrize("change, field, words", [
    ({"mla": {"kv_lora_rank": 4, "qk_rope_head_dim": 4, "qk_nope_head_dim": 2}},
     "attention.mla.qk_nope_head_dim", "must equal attention.qk_head_dim (8)"),
    ({"mla": {"kv_lora_rank": 4, "qk_rope_head_dim": 2}}, "attention.rope.rotary_dim",
     "must equal attention.mla.qk_rope_head_dim (2)"),
    ({"mla": {"kv_lora_rank": 4, "rope_interleave": False}}, "attention.mla.rope_interleave",
     "disagrees with attention.rope.style interleaved"),
    ({"mla": {"kv_lora_rank": 4, "q_lora": 3}}, "attention.mla.q_lora", "unknown field"),
    ({"mla": {"qk_rope_head_dim": 4}}, "attention.mla.kv_lora_rank", "is required"),
    ({"num_kv_heads": 1}, "attention.num_kv_heads", "kv_b_proj gives every query head"),
    ({"bias": True}, "attention.bias", "take bias: false"),
    ({"rope": None}, "attention.rope", "give attention.rope"),
])
def test_invalid_fields_are_named_with_their_fix(change, field, words):
    change = dict(change)
    mla = change.pop("mla", None)
    if "rope" in change and change["rope"] is None:
        raw = {"id": "x", "attention": {"num_heads": 2, "query_features": 16, "bias": False,
                                        "mla": {"kv_lora_rank": 4}},
               "inputs": {"self_attention": True}}
        with pytest.raises(CaseError) as err:
            parse_case(raw, "<test>")
    else:
        with pytest.raises(CaseError) as err:
            mla_case(mla, **change)
    assert err.value.field_name == field and words in err.value.problem


@pytest.mark.parametrize("q_rank", [6, None])
def test_parameter_count_is_the_drawn_weights(q_rank):
    """MLA replaces the q, k, v projections: the analytic count is what the canonical
    weights hold (wk and wv not drawn), counted by hand here."""
    case = mla_case({"q_lora_rank": q_rank, "kv_lora_rank": 4, "qk_rope_head_dim": 4})
    h, e, dqk, dv, r_kv, d_r, d_n = 2, 16, 8, 6, 4, 4, 4
    q = h * e * dqk if q_rank is None else e * q_rank + q_rank + q_rank * h * dqk
    by_hand = q + e * (r_kv + d_r) + r_kv + r_kv * h * (d_n + dv) + h * dv * e
    weights = case_data(case).weights
    assert parameter_count(case.attention) == by_hand == weights.count()
    assert weights.wk is None and weights.wv is None
    assert (weights.wq is None) == (q_rank is not None)


def test_absorbed_form_agrees_with_the_materialised_form():
    for case in (mla_case(), mla_case({"q_lora_rank": None, "kv_lora_rank": 3},
                                      rope={"style": "half_split", "rotary_dim": 2})):
        data = case_data(case)
        ref = reference.attention(case, data).output
        assert np.abs(latent_attention.absorbed(case, data) - ref).max() < 1e-13
        assert np.abs(ref).max() > 0.5  # not a vanishing output


def test_absorbed_form_with_a_wrong_fold_is_caught():
    """Planted: W_uk folded into the query transposed per head the wrong way (head 1's
    W_uk for head 0) moves the output far beyond rounding."""
    case = mla_case()
    data = case_data(case)
    w = data.weights
    swapped = replace(w, mla_k_up=w.mla_k_up[::-1].copy())
    wrong = latent_attention.absorbed(case, replace(data, weights=swapped))
    assert np.abs(wrong - reference.attention(case, data).output).max() > 1e-2


def test_rope_slice_first_is_caught():
    """Planted: a port rotating the FIRST qk_rope_head_dim dims parts from the oracle."""
    case = mla_case()
    data = case_data(case)
    q, k, v = latent_attention.materialised(case, data, rope_first=True)
    scores = np.einsum("bhtd,bhsd->bhts", q, k) * latent_attention.scale_of(case)
    right, _ = latent_attention.scaled(case, data)
    assert np.abs(scores - right).max() > 1e-2


def test_shared_rope_key_is_one_head_broadcast():
    """Every head's key ends in the same rope slice; a per-head key (each head its own
    slice) would differ between heads."""
    case = mla_case()
    _, k, _ = latent_attention.materialised(case, case_data(case))
    assert np.array_equal(k[:, 0, :, 4:], k[:, 1, :, 4:])
    assert not np.allclose(k[:, 0, :, :4], k[:, 1, :, :4])


def test_yarn_softmax_scale_carries_mscale_squared():
    """DeepSeek-V3's YaRN: the softmax scale times (0.1 ln 40 + 1)^2 = 1.8739; planted: a
    port leaving mscale^2 out is caught."""
    scaling = {"type": "yarn", "factor": 40, "original_max_positions": 4096, "mscale": 1,
               "mscale_all_dim": 1, "magnitude": "softmax_scale"}
    case = mla_case(rope={"style": "interleaved", "rotary_dim": 4, "scaling": scaling})
    m = 0.1 * np.log(40) + 1
    assert latent_attention.scale_of(case) == pytest.approx(8 ** -0.5 * m * m, rel=1e-15)
    data = case_data(case)
    ref = reference.attention(case, data).output
    missing = reference.attention(case, data, scale=8 ** -0.5 / (m * m)).output
    assert np.abs(missing - ref).max() > 1e-2


def test_a_rope_key_per_head_is_flagged_by_its_parameter_count():
    """Planted: a port giving each head its own rope key (W_kr (H, E, d_r) in place of one
    shared (E, d_r)) holds E d_r (H - 1) more parameters: the matrix's count check names it.
    Loaded with DeepSeek's weights every head's copy is the same, so no output parts it."""
    from conformance.compare.verdict import FailureKind, parameter_failures
    from conformance.contract.runner import Observation

    case = mla_case()
    formula = parameter_count(case.attention)
    shared = Observation(output=np.zeros((2, 5, 16)), parameters=formula)
    assert parameter_failures(case, shared, formula, None, "port.shared") == []
    per_head = Observation(output=np.zeros((2, 5, 16)), parameters=formula + 16 * 4 * (2 - 1))
    (fail,) = parameter_failures(case, per_head, formula, None, "port.per_head")
    assert fail.kind == FailureKind.PARAMETERS and f"counts {formula + 64}" in fail.message
