"""The float64 reference against hand computations and invariants."""
from __future__ import annotations

import numpy as np
import pytest

from conformance.oracle.reference import attention, formula_parameters
from conformance.oracle.canonical import CanonicalWeights, CaseData, CaseInputs, case_data

from .helpers import make_case


def tiny_data(query, key, value, allowed=None):
    """One head, d_k = d_v = E = 2, identity projections, no bias."""
    eye = np.eye(2)[None]
    w = CanonicalWeights(eye, eye, eye, eye, None, None, None, None)
    b, t = query.shape[0], query.shape[1]
    fully = ~allowed.any(-1) if allowed is not None else np.zeros((b, t), bool)
    return CaseData(w, CaseInputs(query, key, value, None, None, None, allowed, fully))


TINY = make_case(attention={"num_heads": 1, "query_features": 2, "bias": False},
                 inputs={"batch": 1, "query_len": 1, "key_len": 2})


def test_hand_computed_two_keys():
    q = np.array([[[1.0, 0.0]]])
    k = np.array([[[1.0, 0.0], [0.0, 1.0]]])
    v = np.array([[[2.0, 0.0], [0.0, 4.0]]])
    exp = attention(TINY, tiny_data(q, k, v))
    # scores = [1, 0] / sqrt(2); softmax -> weights a, 1 - a
    a = np.exp(1 / np.sqrt(2)) / (np.exp(1 / np.sqrt(2)) + 1)
    np.testing.assert_allclose(exp.weights[0, 0, 0], [a, 1 - a], rtol=1e-15)
    np.testing.assert_allclose(exp.output[0, 0], [2 * a, 4 * (1 - a)], rtol=1e-15)


def test_mask_removes_a_key_and_fully_masked_is_nan():
    q = np.array([[[1.0, 0.0], [0.0, 1.0]]])
    k = np.array([[[1.0, 0.0], [0.0, 1.0]]])
    v = np.array([[[2.0, 0.0], [0.0, 4.0]]])
    allowed = np.array([[[False, True], [False, False]]])
    case = make_case(attention={"num_heads": 1, "query_features": 2, "bias": False},
                     inputs={"batch": 1, "query_len": 2, "key_len": 2})
    exp = attention(case, tiny_data(q, k, v, allowed))
    np.testing.assert_array_equal(exp.output[0, 0], [0.0, 4.0])
    assert np.isnan(exp.output[0, 1]).all() and np.isnan(exp.weights[0, 0, 1]).all()
    assert exp.fully_masked.tolist() == [[False, True]]
    np.testing.assert_array_equal(exp.output_if_zeros[0, 1], [0.0, 0.0])
    np.testing.assert_array_equal(exp.output_if_uniform[0, 1], [1.0, 2.0])


CASES = {
    "plain": {},
    "gqa": {"attention": {"num_heads": 4, "num_kv_heads": 2, "query_features": 8}},
    "widths": {"attention": {"num_heads": 3, "query_features": 8, "qk_head_dim": 5,
                             "v_head_dim": 3, "output_features": 7}},
    "causal": {"inputs": {"query_len": 3, "key_len": 6}, "mask": {"causal": "lower_right"}},
    "padded": {"inputs": {"key_len": 6}, "mask": {"key_padding": [6, 2],
                                                  "attn_mask": {"random": 0.7}}},
}


@pytest.mark.parametrize("name", CASES)
def test_rows_of_weights_sum_to_one(name):
    exp = attention(make_case(**CASES[name]))
    np.testing.assert_allclose(exp.weights.sum(-1), 1.0, rtol=1e-13)


def test_single_key_gives_value_projection():
    case = make_case(attention={"num_heads": 2, "query_features": 8},
                     inputs={"key_len": 1})
    data = case_data(case)
    w, x = data.weights, data.inputs
    v = np.einsum("ble,hed->bhld", x.value, w.wv) + w.bv[None, :, None]
    expected = np.einsum("bhld,hde->ble", np.broadcast_to(v, (2, 2, 5, 4)), w.wo) + w.bo
    np.testing.assert_allclose(attention(case).output, expected, rtol=1e-12)


def test_permuting_keys_with_their_mask_leaves_output_unchanged():
    case = make_case(inputs={"key_len": 6}, mask={"attn_mask": {"random": 0.7}})
    data = case_data(case)
    perm = np.random.default_rng(1).permutation(6)
    x = data.inputs
    permuted = CaseData(data.weights, CaseInputs(
        x.query, x.key[:, perm], x.value[:, perm], None, None, None,
        x.allowed[:, :, perm], x.fully_masked))
    np.testing.assert_allclose(attention(case, permuted).output, attention(case).output,
                               rtol=1e-12)


def test_grouped_query_equals_repeated_kv_heads():
    gqa = make_case(attention={"num_heads": 4, "num_kv_heads": 2, "query_features": 8})
    full = make_case(attention={"num_heads": 4, "query_features": 8})
    d = case_data(gqa)
    w = d.weights
    rep = CanonicalWeights(w.wq, np.repeat(w.wk, 2, 0), np.repeat(w.wv, 2, 0), w.wo,
                           w.bq, np.repeat(w.bk, 2, 0), np.repeat(w.bv, 2, 0), w.bo)
    np.testing.assert_allclose(attention(full, CaseData(rep, d.inputs)).output,
                               attention(gqa).output, rtol=1e-12)


def test_causal_alignments():
    upper = case_data(make_case(inputs={"query_len": 2, "key_len": 4},
                                mask={"causal": "upper_left"})).inputs.causal
    lower = case_data(make_case(inputs={"query_len": 2, "key_len": 4},
                                mask={"causal": "lower_right"})).inputs.causal
    assert upper.astype(int).tolist() == [[1, 0, 0, 0], [1, 1, 0, 0]]
    assert lower.astype(int).tolist() == [[1, 1, 1, 0], [1, 1, 1, 1]]


@pytest.mark.parametrize("attention_spec, count", [
    ({"num_heads": 4, "query_features": 3136, "qk_head_dim": 196}, 9839984),  # MATLAB 4 x 784
    ({"num_heads": 8, "query_features": 3136, "qk_head_dim": 49}, 4921560),  # MATLAB 8 x 392
    ({"num_heads": 8, "query_features": 512}, 4 * 512 * 512 + 4 * 512),  # torch MHA
    ({"num_heads": 8, "query_features": 512, "bias": False}, 4 * 512 * 512),
])
def test_formula(attention_spec, count):
    assert formula_parameters(make_case(attention=attention_spec)) == count
