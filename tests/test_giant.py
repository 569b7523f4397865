"""Giant layers (#12): counted without materialising weights; over the numbers
budget an item is a count-only row and nothing is allocated."""
from __future__ import annotations

import pytest

from conformance import counting, matrix
from conformance.case import LOAD_LIMIT, CaseError, load_file
from conformance.paths import CASES_DIR
from conformance.reference import formula_parameters
from conformance.runners import load
from conformance.verdict import Outcome

GPT3 = CASES_DIR / "gpt3_scale.yaml"
TORCH = "conformance.runners.torch_mha:TorchMHA"


@pytest.fixture
def gpt3():
    (case,) = load_file(GPT3)
    return case


def test_gpt3_case_loads_over_the_numbers_budget(gpt3):
    assert formula_parameters(gpt3) == 4 * 12288**2 + 4 * 12288 == 603_979_776 + 49_152
    assert counting.over_budget(gpt3).startswith("numbers skipped: 604,028,928 weight")


def test_torch_meta_count_equals_the_formula(gpt3):
    pytest.importorskip("torch")
    count = load(TORCH).count(gpt3)
    assert count.method == "meta device"
    assert count.parameters == formula_parameters(gpt3)
    assert count.weight_shapes["in_proj_weight"] == (3 * 12288, 12288)


def test_over_budget_item_is_a_count_only_row_and_allocates_nothing(gpt3, monkeypatch):
    pytest.importorskip("torch")

    def refuse(*_a, **_k):
        raise AssertionError("allocated: case_data / the reference was called")

    for name in ("case_data", "attention", "expected_for"):
        monkeypatch.setattr(matrix, name, refuse)
    row = matrix.evaluate(gpt3, load(TORCH))
    assert row.outcome is Outcome.PASS and row.count_method == "meta device"
    assert "--max-elements" in row.reason and "numbers skipped" in row.reason
    assert row.parameters == formula_parameters(gpt3) and row.max_abs_error is None


def test_formula_default_is_labelled(gpt3):
    row = matrix.evaluate(gpt3, load("conformance.runners.onnx_attention_op:OnnxAttentionOp",
                                     {"engine": "reference"}))
    assert row.count_method == "formula (no allocation-free path)"
    assert row.outcome is Outcome.PASS


def test_max_elements_raises_the_budget(gpt3):
    counting.configure(10**9)
    try:
        assert counting.over_budget(gpt3) is None
    finally:
        counting.configure(None)
    with pytest.raises(ValueError, match="--max-elements"):
        counting.configure(0)


def test_loader_still_refuses_absurd_sizes(tmp_path):
    path = tmp_path / "absurd.yaml"
    path.write_text("id: absurd\nattention: {num_heads: 2, query_features: 1000000}\n")
    with pytest.raises(CaseError, match="loader's limit of 1,000,000,000,000"):
        load_file(path)
    assert LOAD_LIMIT.weights == 10**12
