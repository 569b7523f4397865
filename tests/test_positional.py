"""The oracle's rotary embeddings, ALiBi, QK-norm, softcap and sinks against values
computed by hand."""
from __future__ import annotations

import math

import numpy as np
import pytest

from conformance.oracle import positional as pos


def test_rope_interleaved_rotates_adjacent_pairs():
    x = np.array([1.0, 0.0, 0.0, 1.0])[None, :]  # (L=1, d=4) at position 1
    got = pos.apply_rope(x, np.array([1]), "interleaved", 4, 10000.0)[0]
    # pair 0 = dims (0, 1), angle 1 rad; pair 1 = dims (2, 3), angle 10000 ** (-2/4) = 0.01
    want = [math.cos(1), math.sin(1), -math.sin(0.01), math.cos(0.01)]
    np.testing.assert_allclose(got, want, rtol=0, atol=1e-15)


def test_rope_half_split_rotates_dimension_i_with_i_plus_half():
    x = np.array([1.0, 0.0, 0.0, 1.0])[None, :]
    got = pos.apply_rope(x, np.array([1]), "half_split", 4, 10000.0)[0]
    # pair 0 = dims (0, 2), angle 1; pair 1 = dims (1, 3), angle 0.01
    want = [math.cos(1), -math.sin(0.01), math.sin(1), math.cos(0.01)]
    np.testing.assert_allclose(got, want, rtol=0, atol=1e-15)


def test_rope_styles_differ_and_agree_only_at_position_zero():
    rng = np.random.default_rng(0)
    x = rng.standard_normal((3, 8))
    p = np.arange(3)
    a = pos.apply_rope(x, p, "interleaved", 8, 10000.0)
    b = pos.apply_rope(x, p, "half_split", 8, 10000.0)
    np.testing.assert_array_equal(a[0], x[0])
    np.testing.assert_array_equal(b[0], x[0])
    assert np.abs(a[1:] - b[1:]).max() > 0.1


def test_partial_rope_leaves_the_tail_alone():
    rng = np.random.default_rng(1)
    x = rng.standard_normal((4, 6))
    got = pos.apply_rope(x, np.arange(4) + 5, "half_split", 4, 10000.0)
    np.testing.assert_array_equal(got[:, 4:], x[:, 4:])
    assert np.abs(got[:, :4] - x[:, :4]).max() > 0.1


@pytest.mark.parametrize("style", pos.ROPE_STYLES)
def test_rope_scores_depend_only_on_relative_position(style):
    rng = np.random.default_rng(2)
    q, k = rng.standard_normal((1, 8)), rng.standard_normal((1, 8))

    def score(m, n):
        return float(pos.apply_rope(q, np.array([m]), style, 8, 100.0)[0]
                     @ pos.apply_rope(k, np.array([n]), style, 8, 100.0)[0])

    assert score(7, 3) == pytest.approx(score(4, 0), abs=1e-12)
    assert score(7, 3) != pytest.approx(score(7, 4), abs=1e-6)


def test_rope_refuses_an_odd_or_too_wide_rotary_dim():
    with pytest.raises(ValueError, match="even"):
        pos.apply_rope(np.zeros((1, 4)), np.array([0]), "half_split", 3, 1e4)
    with pytest.raises(ValueError, match="even"):
        pos.apply_rope(np.zeros((1, 4)), np.array([0]), "half_split", 6, 1e4)


def test_alibi_slopes_power_of_two_heads():
    np.testing.assert_allclose(pos.alibi_slopes(8), [2.0 ** -(i + 1) for i in range(8)])


def test_alibi_slopes_six_heads_take_every_other_slope_of_eight():
    # the 4 slopes of 4 heads (2**-2, 2**-4, 2**-6, 2**-8), then 2**-1, 2**-3 from 8 heads
    np.testing.assert_allclose(pos.alibi_slopes(6), [2 ** -2, 2 ** -4, 2 ** -6, 2 ** -8,
                                                     2 ** -1, 2 ** -3])


def test_alibi_bias_is_slope_times_key_minus_query_position():
    bias = pos.alibi_bias(2, np.array([0, 1, 2]), np.array([0, 1, 2]))
    assert bias.shape == (2, 3, 3)
    assert bias[0, 2, 0] == -2 * 0.0625 and bias[1, 2, 0] == -2 * 0.00390625
    assert bias[0, 1, 2] == 0.0625 and np.all(np.diagonal(bias, axis1=1, axis2=2) == 0)


def test_qk_norm_rms_per_head_and_over_all_heads():
    x = np.array([3.0, 4.0]).reshape(1, 1, 1, 2)  # (B, H=1, L, d=2)
    got = pos.qk_norm(x, "rms", "per_head", np.array([1.0, 2.0]), None, 0.0)
    np.testing.assert_allclose(got.ravel(), [3 / math.sqrt(12.5), 8 / math.sqrt(12.5)])
    y = np.array([3.0, 4.0]).reshape(1, 2, 1, 1)  # (B, H=2, L, d=1): over both heads
    got = pos.qk_norm(y, "rms", "all_heads", np.array([[1.0], [1.0]]), None, 0.0)
    np.testing.assert_allclose(got.ravel(), [3 / math.sqrt(12.5), 4 / math.sqrt(12.5)])
    per_head = pos.qk_norm(y, "rms", "per_head", np.array([1.0]), None, 0.0)
    np.testing.assert_allclose(per_head.ravel(), [1.0, 1.0])  # each head alone: x / |x|


def test_qk_norm_layer_centres_and_adds_its_bias():
    x = np.array([1.0, 3.0]).reshape(1, 1, 1, 2)
    got = pos.qk_norm(x, "layer", "per_head", np.array([1.0, 1.0]), np.array([0.5, 0.5]), 0.0)
    np.testing.assert_allclose(got.ravel(), [-0.5, 1.5])


def test_softcap_and_sinks():
    assert pos.softcap(np.array([30.0]), 30.0)[0] == pytest.approx(30 * math.tanh(1))
    w = pos.softmax_with_sinks(np.zeros((1, 1, 1, 2)), None, np.array([0.0]))
    np.testing.assert_allclose(w.ravel(), [1 / 3, 1 / 3])
    masked = pos.softmax_with_sinks(np.zeros((1, 1, 1, 2)), np.zeros((1, 1, 2), bool),
                                    np.array([0.0]))
    np.testing.assert_array_equal(masked.ravel(), [0.0, 0.0])  # the sink takes it all
    bare = pos.softmax_with_sinks(np.zeros((1, 1, 1, 2)), np.zeros((1, 1, 2), bool), None)
    assert np.isnan(bare).all()


def test_window_counts_left_and_right_inclusive():
    ok = pos.window_allowed(np.arange(5), np.arange(5), 2, 0)
    assert ok.sum(1).tolist() == [1, 2, 3, 3, 3]  # w = 2 left: 3 keys, causal
    sym = pos.window_allowed(np.arange(5), np.arange(5), 1, 1)
    assert sym.sum(1).tolist() == [2, 3, 3, 3, 2]  # 2w + 1 keys in the middle
    assert pos.window_allowed(np.arange(3), np.arange(3), None, None).all()


# ---- the Meta <-> HF row permutation (conformance.convert.rope) ---------------------------

def _rotated_heads(x, w, heads, style, rotary_dim, positions):
    """(L, E) inputs through an (heads*d, E) projection, split into heads, rotated."""
    y = (x @ w.T).reshape(x.shape[0], heads, -1).transpose(1, 0, 2)  # (heads, L, d)
    return pos.apply_rope(y, positions, style, rotary_dim, 10000.0)


@pytest.mark.parametrize("heads, kv_heads, d, rotary_dim", [(4, 2, 8, 8), (4, 4, 8, 4),
                                                             (6, 3, 8, 8)])
def test_permuted_weights_make_half_split_equal_interleaved(heads, kv_heads, d, rotary_dim):
    from conformance.convert.rope import half_split_to_interleaved, interleaved_to_half_split

    rng = np.random.default_rng(3)
    x, p = rng.standard_normal((5, 12)), np.arange(5) + 3
    wq, wk = rng.standard_normal((heads * d, 12)), rng.standard_normal((kv_heads * d, 12))
    group = heads // kv_heads

    def scores(style, wq_, wk_):
        q = _rotated_heads(x, wq_, heads, style, rotary_dim, p)
        k = np.repeat(_rotated_heads(x, wk_, kv_heads, style, rotary_dim, p), group, axis=0)
        return q @ k.transpose(0, 2, 1)

    meta = scores("interleaved", wq, wk)
    hf_q = interleaved_to_half_split(wq, heads, rotary_dim)
    hf_k = interleaved_to_half_split(wk, kv_heads, rotary_dim)
    np.testing.assert_allclose(scores("half_split", hf_q, hf_k), meta, rtol=1e-12, atol=1e-12)
    np.testing.assert_array_equal(half_split_to_interleaved(hf_q, heads, rotary_dim), wq)
    assert np.abs(scores("half_split", wq, wk) - meta).max() > 1e-3  # unpermuted: wrong
    if kv_heads != heads:  # the converter bug: key rows permuted with the query head count
        from conformance.convert._core import ConversionError

        with pytest.raises(ConversionError, match="rotary_dim"):  # a stated width refuses it
            interleaved_to_half_split(wk, heads, rotary_dim)
        wrong_k = interleaved_to_half_split(wk, heads)  # as the buggy converters did
        assert np.abs(scores("half_split", hf_q, wrong_k) - meta).max() > 1e-3
