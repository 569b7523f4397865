"""The oracle on the case features (rope, QK-norm, ALiBi, softcap, sinks, windows, fills,
decode): properties each must have, and the loader's
fields (case/features.py) with their errors."""
from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest

from conformance.case.loader import CaseError, parse_case
from conformance.oracle.canonical import case_data
from conformance.case.model import parameter_count as parameters
from conformance.oracle.reference import attention


def make(attention_extra=None, inputs_extra=None, mask=None, **top):
    raw = {"id": "features", "attention": {"num_heads": 4, "query_features": 16,
                                         **(attention_extra or {})},
           "inputs": {"batch": 2, "query_len": 5, "self_attention": True,
                      "dtype": "float64", **(inputs_extra or {})}, **top}
    if mask:
        raw["mask"] = mask
    return parse_case(raw, "<test>")


def out(case, data=None):
    return attention(case, data).output


def test_an_old_case_keeps_its_fingerprint_and_numbers():
    plain = make()
    assert plain.features == frozenset()
    assert plain.fingerprint() == make().fingerprint()
    assert plain.fingerprint() != make({"rope": {"style": "half_split"}}).fingerprint()


@pytest.mark.parametrize("style", ["half_split", "interleaved"])
def test_rope_depends_on_relative_positions_only(style):
    a = make({"rope": {"style": style}})
    shifted = make({"rope": {"style": style}}, {"position_offset": 7})
    np.testing.assert_allclose(out(shifted), out(a), rtol=1e-12, atol=1e-12)
    assert np.abs(out(a) - out(make())).max() > 1e-3  # and it does rotate


def test_rope_styles_give_different_outputs_and_partial_rotary_differs_again():
    half = out(make({"rope": {"style": "half_split"}}))
    inter = out(make({"rope": {"style": "interleaved"}}))
    partial = out(make({"rope": {"style": "half_split", "rotary_dim": 2}}))
    assert np.abs(half - inter).max() > 1e-3 and np.abs(half - partial).max() > 1e-3


def test_cross_attention_key_positions_move_the_output():
    base = {"rope": {"style": "half_split"}}
    cross = {"self_attention": False, "key_len": 6}
    a = out(make(base, cross))
    b = out(make(base, {**cross, "key_position_offset": 3}))
    assert np.abs(a - b).max() > 1e-3


def test_a_huge_softcap_is_no_softcap_and_a_small_one_bites():
    plain = out(make())
    np.testing.assert_allclose(out(make({"softcap": 1e6})), plain, rtol=1e-9, atol=1e-9)
    assert np.abs(out(make({"softcap": 0.1})) - plain).max() > 1e-3


def test_sinks_at_minus_infinity_are_no_sinks():
    case = make({"sinks": True})
    data = case_data(case)
    gone = replace(data, weights=replace(data.weights, sinks=np.full(4, -np.inf)))
    np.testing.assert_allclose(out(case, gone), out(make()), rtol=1e-12, atol=1e-12)
    assert np.abs(out(case) - out(make())).max() > 1e-3
    weights = attention(case).weights
    assert (weights.sum(-1) < 1 - 1e-6).all()  # each sink takes its share


def test_alibi_changes_scores_by_head_and_shift_invariance_holds():
    a = out(make({"alibi": True}))
    np.testing.assert_allclose(out(make({"alibi": True}, {"position_offset": 9})), a,
                               rtol=1e-12, atol=1e-12)
    assert np.abs(a - out(make())).max() > 1e-3


def test_qk_norm_scopes_differ():
    per = out(make({"qk_norm": {"kind": "rms", "scope": "per_head"}}))
    every = out(make({"qk_norm": {"kind": "rms", "scope": "all_heads"}}))
    layer = out(make({"qk_norm": {"kind": "layer", "scope": "per_head"}}))
    assert np.abs(per - every).max() > 1e-4 and np.abs(per - layer).max() > 1e-4


def test_window_masks_and_its_empty_rows_are_derived():
    wide = make(mask={"window": {"left": 10, "right": 10}})
    np.testing.assert_allclose(out(wide), out(make()), rtol=1e-12, atol=1e-12)
    causal3 = make(mask={"window": {"left": 2, "right": 0}})
    allowed = case_data(causal3).inputs.allowed
    assert allowed[0].sum(1).tolist() == [1, 2, 3, 3, 3]
    empty = make(mask={"window": {"left": 0, "right": 0}, "key_padding": [5, 2]},
                 inputs_extra={"self_attention": False, "key_len": 5})
    assert case_data(empty).inputs.fully_masked[1].tolist() == [False, False, True, True, True]


def test_parameters_count_norm_scales_and_sinks():
    plain = make().attention
    per = make({"qk_norm": {"kind": "rms", "scope": "per_head"}}).attention
    every = make({"qk_norm": {"kind": "layer", "scope": "all_heads"}, "num_kv_heads": 2})
    sinks = make({"sinks": True}).attention
    assert parameters(per) - parameters(plain) == 2 * 4
    assert parameters(every.attention) - parameters(replace(
        every.attention, qk_norm=None)) == 2 * (4 + 2) * 4
    assert parameters(sinks) - parameters(plain) == 4
    assert case_data(make({"sinks": True})).weights.count() == parameters(sinks)


@pytest.mark.parametrize("extra, inputs_extra, mask, top, field", [
    ({"rope": {"style": "diagonal"}}, None, None, {}, "attention.rope.style"),
    ({"rope": {"style": "half_split", "rotary_dim": 3}}, None, None, {},
     "attention.rope.rotary_dim"),
    ({"rope": {"style": "half_split", "rotary_dim": 6}}, None, None, {},
     "attention.rope.rotary_dim"),
    ({"rope": {"style": "half_split", "base": -1}}, None, None, {}, "attention.rope.base"),
    ({"rope": {"style": "half_split", "theta": 1}}, None, None, {}, "attention.rope.theta"),
    ({"qk_norm": {"kind": "rms"}}, None, None, {}, "attention.qk_norm.scope"),
    ({"softcap": 0}, None, None, {}, "attention.softcap"),
    ({"sinks": "yes"}, None, None, {}, "attention.sinks"),
    (None, {"key_position_offset": 2}, None, {}, "inputs.key_position_offset"),
    (None, None, {"window": {}}, {}, "mask.window"),
    (None, None, {"fill": "-1e5"}, {}, "mask.fill"),
    (None, None, {"causal": "upper_left"}, {"decode": {"prefill": 2, "steps": 2}}, "decode"),
    (None, None, None, {"decode": {"prefill": 2, "steps": 3}}, "decode"),
])
def test_bad_fields_name_the_field(extra, inputs_extra, mask, top, field):
    with pytest.raises(CaseError) as err:
        make(extra, inputs_extra, mask, **top)
    assert err.value.field_name == field


def test_fill_words_and_numbers_read_alike():
    assert make(mask={"fill": "-1e9"}).mask.fill == "-1e9"
    assert make(mask={"fill": -1.0e9}).mask.fill == "-1e9"
    assert make(mask={"fill": float("-inf")}).mask.fill == "-inf"
    d = make(mask={"causal": "upper_left"}, decode={"prefill": 3, "steps": 2})
    assert d.decode.prefill == 3 and d.features == {"decode"}


def test_a_runner_without_a_feature_gives_a_not_expressible_row_naming_it():
    from conformance.compare.verdict import Outcome
    from conformance.run.evaluate import evaluate
    from conformance.runners import load

    matlab = load("conformance.runners.documented.matlab:MatlabSelfAttentionModel")
    row = evaluate(make({"rope": {"style": "half_split"}, "alibi": True}), matlab)
    assert row.outcome == Outcome.NOT_EXPRESSIBLE
    assert "no an ALiBi bias" not in row.reason and "rotary embeddings" in row.reason
    assert "ALiBi" in row.reason
    filled = evaluate(make(mask={"fill": "-1e4"}), matlab)  # every runner takes a fill
    assert filled.outcome == Outcome.PASS, filled.reason
