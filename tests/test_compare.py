"""Every comparator rejects a wrong answer."""
from __future__ import annotations

import numpy as np
import pytest

from conformance.case.loader import BEHAVIOURS, Tolerance
from conformance.case.expectations import Declared
from conformance.compare.agreement import agree, classify_fully_masked, classify_masked_weights
from conformance.contract.runner import Observation
from conformance.oracle.reference import attention, formula_parameters
from conformance.compare.verdict import FailureKind, Outcome, judge

from .helpers import make_case

TOL = Tolerance(rtol=1.3e-6, atol=1e-5)
E = np.linspace(-1, 1, 24).reshape(2, 3, 4)


def test_agree_accepts_within_tolerance():
    res = agree(E, E + 5e-6, TOL)
    assert res.ok and res.max_abs_error == pytest.approx(5e-6) and res.compared == 24


def test_agree_rejects_wrong_output():
    wrong = E.copy()
    wrong[1, 2, 3] += 1e-3
    res = agree(E, wrong, TOL)
    assert not res.ok and "1 of 24 values differ" in res.problem
    assert res.max_abs_error == pytest.approx(1e-3)


def test_agree_rejects_nan_against_number():
    wrong = E.copy()
    wrong[0, 0, 0] = np.nan
    res = agree(E, wrong, TOL)
    assert not res.ok and "NaN" in res.problem


def test_agree_rejects_shape_mismatch():
    res = agree(E, E[..., :3], TOL)
    assert not res.ok and "shape mismatch" in res.problem


def test_agree_rejects_inf_against_number_and_number_against_inf():
    wrong = E.copy()
    wrong[0, 1, 1] = np.inf
    assert not agree(E, wrong, TOL).ok
    expected = E.copy()
    expected[0, 1, 1] = np.inf
    res = agree(expected, E, TOL)
    assert not res.ok and "infinity" in res.problem


def test_agree_infinities_must_match_in_sign():
    expected = E.copy()
    expected[1, 0, 0], expected[1, 0, 1] = np.inf, -np.inf
    assert agree(expected, expected.copy(), TOL).ok  # +inf vs +inf, -inf vs -inf
    flipped = expected.copy()
    flipped[1, 0, 0] = -np.inf
    res = agree(expected, flipped, TOL)
    assert not res.ok and "1 of 2 values are not the infinity (same sign)" in res.problem
    nan = expected.copy()
    nan[1, 0, 1] = np.nan
    assert not agree(expected, nan, TOL).ok
    where = np.ones((2, 3, 4), bool)
    where[1, 0, 0] = False  # a position `where` leaves out is not compared
    assert agree(expected, flipped, TOL, where=where).ok


@pytest.mark.parametrize("dtype", [np.int64, np.int32, np.complex128, np.bool_])
def test_agree_rejects_non_float_output(dtype):
    res = agree(E, (E * 10).astype(dtype) if dtype is not np.bool_ else E > 0, TOL)
    assert not res.ok and "dtype mismatch" in res.problem and np.dtype(dtype).name in res.problem


def test_agree_accepts_half_precision_output():
    assert agree(E, E.astype(np.float16), Tolerance(rtol=1e-3, atol=1e-3)).ok


@pytest.mark.parametrize("shape", [(0, 3, 4), (2, 0, 4), (0,)])
def test_agree_rejects_empty_output(shape):
    res = agree(E, np.zeros(shape), TOL)
    assert not res.ok and "empty output" in res.problem and "24 elements" in res.problem


def test_agree_rejects_one_wrong_element_anywhere():
    for index in np.ndindex(E.shape):
        wrong = E.copy()
        wrong[index] += 1e-3
        res = agree(E, wrong, TOL)
        assert not res.ok and res.problem.startswith("1 of 24"), index


def test_agree_rejects_missing_output():
    assert not agree(E, None, TOL).ok


def test_agree_skips_undefined_reference_and_masked_positions():
    expected = E.copy()
    expected[0, 0] = np.nan
    where = np.ones((2, 3, 1), bool)
    where[1, 1] = False
    observed = E.copy()
    observed[1, 1] = 99.0  # excluded by `where`
    assert agree(expected, observed, TOL, where=where).ok


MASKED = make_case(inputs={"key_len": 6}, mask={"masked_rows": [1]})


@pytest.mark.parametrize("label", ["nan", "zeros", "uniform", "finite_other"])
def test_classify_each_hypothesis(label):
    exp = attention(MASKED)
    out = np.nan_to_num(exp.output)
    rows = exp.fully_masked
    fill = {"nan": np.full_like(out, np.nan), "zeros": exp.output_if_zeros,
            "uniform": exp.output_if_uniform, "finite_other": exp.output_if_zeros + 0.5}[label]
    out[rows] = fill[rows]
    assert classify_fully_masked(exp, out, TOL) == label


def test_classify_fully_masked_rejects_every_wrong_label():
    exp = attention(MASKED)
    rows = exp.fully_masked
    labels = [b for b in BEHAVIOURS["fully_masked_row"] if b != "error"]
    for label, fill in {"nan": np.full_like(exp.output, np.nan), "zeros": exp.output_if_zeros,
                        "uniform": exp.output_if_uniform,
                        "finite_other": exp.output_if_zeros + 0.5}.items():
        out = np.nan_to_num(exp.output)
        out[rows] = fill[rows]
        got = classify_fully_masked(exp, out, TOL)
        assert got == label and [b for b in labels if b != got] == [
            b for b in labels if b != label]


def test_classify_masked_weights():
    exp = attention(MASKED)
    w = np.nan_to_num(exp.weights)
    assert classify_masked_weights(w, exp.fully_masked) == "zeros"
    w[:, :, 1] = 1 / 6
    assert classify_masked_weights(w, exp.fully_masked) == "uniform"
    w[:, :, 1] = np.nan
    assert classify_masked_weights(w, exp.fully_masked) == "nan"


def _judge(case, obs, exp, declared=None):
    """Judged with `declared` as the runner's fully-masked-row answer (None: undeclared)."""
    return judge(case, "torch.mha", obs, exp, formula_parameters(case), None,
                 Declared(fully_masked_row=declared, file="expectations/torch.mha.yaml"))


def _obs(exp, **kw):
    return Observation(output=np.nan_to_num(exp.output), attention_weights=None, **kw)


def test_judge_passes_exact_answer():
    case = make_case()
    exp = attention(case)
    v = _judge(case, _obs(exp, parameters=formula_parameters(case)), exp)
    assert v.outcome is Outcome.PASS and not v.failures, v.reason


def test_judge_rejects_wrong_parameter_count():
    case = make_case()
    exp = attention(case)
    v = _judge(case, _obs(exp, parameters=formula_parameters(case) - 1), exp)
    assert v.outcome is Outcome.MISMATCH
    assert [f.kind for f in v.failures] == [FailureKind.PARAMETERS]


def test_judge_rejects_case_whose_formula_disagrees():
    case = make_case(expect={"parameters": 1})
    exp = attention(case)
    v = _judge(case, _obs(exp, parameters=formula_parameters(case)), exp)
    assert v.outcome is Outcome.MISMATCH and "formula" in v.reason
    assert [f.kind for f in v.failures] == [FailureKind.FORMULA]


def test_judge_rejects_wrong_output_values_and_shape():
    case = make_case()
    exp = attention(case)
    v = _judge(case, Observation(output=exp.output + 1e-2, parameters=None), exp)
    assert [f.kind for f in v.failures] == [FailureKind.VALUES]
    v = _judge(case, Observation(output=exp.output[..., :3], parameters=None), exp)
    assert [f.kind for f in v.failures] == [FailureKind.SHAPE] and v.max_abs_error is None


def test_judge_rejects_wrong_per_head_weights():
    case = make_case()
    exp = attention(case)
    obs = _obs(exp, parameters=formula_parameters(case))
    obs.attention_weights, obs.weights_returned = exp.weights.mean(1, keepdims=True), "per_head"
    v = _judge(case, obs, exp)
    assert v.outcome is Outcome.MISMATCH and "attention weights: shape mismatch" in v.reason
    assert [f.kind for f in v.failures] == [FailureKind.WEIGHTS]


def test_judge_behaviour_declared_undeclared_and_wrong():
    exp = attention(MASKED)
    out = np.nan_to_num(exp.output)
    out[exp.fully_masked] = exp.output_if_zeros[exp.fully_masked]
    obs = Observation(output=out, parameters=formula_parameters(MASKED))
    v = _judge(MASKED, obs, exp, declared="zeros")
    assert v.outcome is Outcome.BEHAVIOUR and v.fully_masked_row == "zeros"
    v = _judge(MASKED, obs, exp)  # undeclared: fails and says which line to add where
    assert v.outcome is Outcome.MISMATCH
    assert "add to expectations/torch.mha.yaml under 'behaviours:'" in v.reason
    assert v.reason.endswith("\n  fully_masked_row: zeros")
    v = _judge(MASKED, obs, exp, declared="nan")
    assert v.outcome is Outcome.MISMATCH and "declared 'nan'" in v.reason
    assert [f.kind for f in v.failures] == [FailureKind.BEHAVIOUR]


def test_outcome_words_and_pytest_meaning():
    assert [o.cell for o in Outcome] == ["pass", "behaviour", "mismatch", "n/e", "skip", "error"]
    assert {o for o in Outcome if o.failed} == {Outcome.MISMATCH, Outcome.ERROR}
    assert {o for o in Outcome if o.skips} == {Outcome.SKIPPED, Outcome.NOT_EXPRESSIBLE}
    assert str(Outcome.NOT_EXPRESSIBLE) == "not_expressible"


def test_missing_framework_is_a_skip_with_reason():
    from conformance.contract.runner import Runner
    from conformance.run.evaluate import evaluate

    class Absent(Runner):
        name, framework, requires = "absent.mha", "absent", ("no_such_framework_xyz",)

    row = evaluate(make_case(), Absent())
    assert row.outcome == "skipped"
    assert "no_such_framework_xyz not installed" in row.reason and "[absent]" in row.reason


def test_runner_crash_is_an_error_row_not_a_crash():
    from conformance.contract.runner import Runner, Translation
    from conformance.run.evaluate import evaluate

    class Broken(Runner):
        name, framework = "broken.mha", "broken"

        def translate(self, case):
            return Translation("broken()")

        def run(self, case, translation, data):
            raise ZeroDivisionError("on purpose")

    row = evaluate(make_case(), Broken())
    assert row.outcome == "error" and row.reason == "ZeroDivisionError: on purpose"
