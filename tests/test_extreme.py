"""Extreme inputs: reading inputs.scale / inputs.nonfinite, the oracle on them,
and the nonfinite_input classifier rejecting every wrong label."""
from __future__ import annotations

import numpy as np
import pytest

from conformance.case.loader import BEHAVIOURS, CaseError
from conformance.compare.agreement import classify_nonfinite
from conformance.contract.runner import Observation
from conformance.oracle.reference import attention, formula_parameters
from conformance.compare.verdict import FailureKind, Outcome, judge
from conformance.oracle.canonical import case_data

from .helpers import make_case

NAN_KEY = {"batch": 2, "query_len": 3, "key_len": 4,
           "nonfinite": [{"tensor": "key", "batch": 0, "position": 1, "feature": 2,
                          "value": "nan"}]}


def _case(inputs=None, **kw):
    return make_case(inputs={**NAN_KEY, **(inputs or {})}, **kw)


def test_scale_multiplies_inputs_before_rounding():
    plain, scaled = make_case(), make_case(inputs={"scale": 1000.0})
    a, b = case_data(plain).inputs, case_data(scaled).inputs
    np.testing.assert_allclose(b.query, a.query * 1000, rtol=2e-7)  # rounded after scaling
    assert plain.fingerprint() != scaled.fingerprint()


def test_float16_overflow_rounds_to_inf():
    # 6e4 is a float16 value (a scale it cannot hold, 1e5, is refused at load: #17)
    data = case_data(make_case(inputs={"dtype": "float16", "scale": 6e4}))
    assert np.isinf(data.inputs.query).any()


def test_nonfinite_placed_and_oracle_undefined_rows():
    case = _case()
    assert np.isnan(case_data(case).inputs.key[0, 1, 2])
    exp = attention(case)
    assert exp.undefined[0].all() and not exp.undefined[1].any()  # item 0: every row


def test_masked_nan_key_leaves_the_oracle_defined():
    case = _case(mask={"key_padding": [4, 1]},
                 inputs={"nonfinite": [{"tensor": "key", "batch": 1, "position": 3,
                                        "feature": 0, "value": "inf"}]})
    assert not attention(case).undefined.any()


def test_nan_query_row_is_the_only_undefined_row():
    case = _case(inputs={"nonfinite": [{"tensor": "query", "batch": 1, "position": 2,
                                        "feature": 0, "value": "-inf"}]})
    undefined = attention(case).undefined.any(-1)
    assert undefined.tolist() == [[False] * 3, [False, False, True]]


@pytest.mark.parametrize("inputs, field", [
    ({"scale": 0}, "inputs.scale"),
    ({"scale": ".inf"}, "inputs.scale"),
    ({"nonfinite": "nan"}, "inputs.nonfinite"),
    ({"nonfinite": [{"tensor": "key"}]}, "inputs.nonfinite[0]"),
    ({"nonfinite": [{"tensor": "bias", "batch": 0, "position": 0, "feature": 0,
                     "value": "nan"}]}, "inputs.nonfinite[0].tensor"),
    ({"nonfinite": [{"tensor": "key", "batch": 2, "position": 0, "feature": 0,
                     "value": "nan"}]}, "inputs.nonfinite[0].batch"),
    ({"nonfinite": [{"tensor": "query", "batch": 0, "position": 3, "feature": 0,
                     "value": "nan"}]}, "inputs.nonfinite[0].position"),
    ({"nonfinite": [{"tensor": "value", "batch": 0, "position": 0, "feature": 8,
                     "value": "nan"}]}, "inputs.nonfinite[0].feature"),
    ({"nonfinite": [{"tensor": "key", "batch": 0, "position": 0, "feature": 0,
                     "value": 1.0}]}, "inputs.nonfinite[0].value"),
    ({"nonfinite": [{"tensor": "key", "batch": 0, "position": 0, "feature": 0,
                     "value": "nan"}] * 65}, "inputs.nonfinite"),
    ({"self_attention": True, "key_len": 3}, "inputs.nonfinite[0].tensor"),
])
def test_bad_extreme_fields_are_clean_case_errors(inputs, field):
    with pytest.raises(CaseError) as err:
        _case(inputs=inputs)
    assert err.value.field_name == field


def test_yaml_nan_and_behaviour_needs_extreme_inputs():
    entry = {"tensor": "key", "batch": 0, "position": 0, "feature": 0, "value": float("nan")}
    assert _case(inputs={"nonfinite": [entry]}).inputs.nonfinite[0].value == "nan"
    with pytest.raises(CaseError, match="neither inputs.scale nor inputs.nonfinite"):
        make_case(expect={"behaviours": {"nonfinite_input": {"torch.mha": "contained"}}})


def _outputs(exp):
    """An output showing each label of BEHAVIOURS['nonfinite_input'] (but 'error')."""
    clean = np.nan_to_num(exp.output)
    spread = exp.output.copy()
    spread[1, 0, 0] = np.nan
    overflow = exp.output.copy()
    overflow[1, 0, 0] = np.inf
    partial = exp.output.copy()
    partial[0, 0] = 0.0
    return {"contained": clean, "nan_propagates": exp.output, "partial": partial,
            "nan_spreads": spread, "overflow_inf": overflow}


def test_classify_nonfinite_names_each_label_and_rejects_the_others():
    exp = attention(_case())
    outputs = _outputs(exp)
    assert set(outputs) | {"error"} == set(BEHAVIOURS["nonfinite_input"])
    for label, out in outputs.items():
        got = classify_nonfinite(exp, out)
        assert got == label
        assert all(got != wrong for wrong in BEHAVIOURS["nonfinite_input"] if wrong != label)


def _judge(case, out):
    exp = attention(case)
    obs = Observation(output=out, parameters=formula_parameters(case))
    return judge(case, "torch.mha", obs, exp, formula_parameters(case), None, None)


@pytest.mark.parametrize("label", ["contained", "nan_propagates", "partial", "nan_spreads",
                                   "overflow_inf"])
def test_judge_holds_the_declared_label_and_fails_every_other(label):
    out = _outputs(attention(_case()))[label]
    for declared in BEHAVIOURS["nonfinite_input"]:
        case = _case(expect={"behaviours": {"nonfinite_input": {"torch.mha": declared}}})
        v = _judge(case, out)
        if declared == label:
            assert v.outcome is Outcome.BEHAVIOUR and v.nonfinite_input == label, v.reason
        else:
            assert v.outcome is Outcome.MISMATCH and f"declared '{declared}'" in v.reason
            assert [f.kind for f in v.failures] == [FailureKind.BEHAVIOUR]


def test_judge_undeclared_prints_the_line_and_checks_defined_values():
    exp = attention(_case())
    v = _judge(_case(), exp.output)
    assert v.outcome is Outcome.MISMATCH
    assert v.reason.endswith("under 'behaviours:' (or run with --update-expectations):\n"
                             f"  nonfinite_input:\n    {_case().id}: nan_propagates")
    wrong = exp.output.copy()
    wrong[1] += 1e-2  # item 1 is defined: its numbers still count
    case = _case(expect={"behaviours": {"nonfinite_input": {"torch.mha": "nan_propagates"}}})
    v = _judge(case, wrong)
    assert [f.kind for f in v.failures] == [FailureKind.VALUES]


def test_saturated_softmax_without_behaviour_is_judged_by_numbers():
    case = make_case(inputs={"scale": 1000.0})
    exp = attention(case)
    assert np.isfinite(exp.output).all() and np.sort(exp.weights, -1)[..., -1].min() > 0.99
    out = exp.output.copy()
    out[0, 0, 0] = np.nan
    v = _judge(case, out)
    assert v.outcome is Outcome.MISMATCH and "NaN/inf where the reference" in v.reason
