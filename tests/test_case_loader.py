"""The loader rejects each kind of bad case with file, case id and field named."""
from __future__ import annotations

import textwrap
from pathlib import Path

import pytest

from conformance.case import CaseError, load_cases, load_file

GOOD = """
id: tiny
attention: {num_heads: 2, query_features: 8}
"""


def write(tmp_path: Path, text: str, name: str = "case.yaml") -> Path:
    path = tmp_path / name
    path.write_text(textwrap.dedent(text))
    return path


def rejected(tmp_path: Path, text: str) -> CaseError:
    path = write(tmp_path, text)
    with pytest.raises(CaseError) as info:
        load_file(path)
    assert str(path) in str(info.value)
    return info.value


def test_good_case_defaults(tmp_path):
    (case,) = load_file(write(tmp_path, GOOD))
    a, i = case.attention, case.inputs
    assert (a.num_kv_heads, a.key_features, a.value_features) == (2, 8, 8)
    assert (a.qk_head_dim, a.v_head_dim, a.output_features, a.bias) == (4, 4, 8, True)
    assert (i.batch, i.query_len, i.key_len, i.dtype, i.seed) == (2, 5, 5, "float32", 0)


@pytest.mark.parametrize("text, field, words", [
    (GOOD + "dropout: 0.1\n", "dropout", "unknown field"),
    ("id: tiny\nattention: {num_heads: 2, query_features: 8, head_size: 4}\n",
     "attention.head_size", "unknown field"),
    ("id: tiny\nattention: {query_features: 8}\n", "attention.num_heads", "required"),
    ("id: tiny\nattention: {num_heads: two, query_features: 8}\n", "attention.num_heads",
     "integer"),
    ("id: tiny\nattention: {num_heads: 4, num_kv_heads: 3, query_features: 8}\n",
     "attention.num_kv_heads", "multiple"),
    ("id: tiny\nattention: {num_heads: 3, query_features: 8}\n", "attention.qk_head_dim",
     "does not divide"),
    ("id: tiny\nattention: {num_heads: 2, query_features: 8, key_features: 6}\n"
     "inputs: {self_attention: true}\n", "inputs.self_attention", "must be equal"),
    (GOOD + "inputs: {query_len: 4, key_len: 6, self_attention: true}\n",
     "inputs.self_attention", "key_len == query_len"),
    (GOOD + "inputs: {dtype: float8}\n", "inputs.dtype", "one of"),
    (GOOD + "mask: {key_padding: [5]}\n", "mask.key_padding", "one valid key length"),
    (GOOD + "mask: {key_padding: [5, 0]}\n", "mask.key_padding", "1..key_len"),
    (GOOD + "mask: {causal: diagonal}\n", "mask.causal", "one of"),
    (GOOD + "mask: {attn_mask: [[1, 0], [0, 1]]}\n", "mask.attn_mask", "shape"),
    (GOOD + "mask: {attn_mask: {random: 1.5}}\n", "mask.attn_mask", "density"),
    (GOOD + "mask: {masked_rows: [9]}\n", "mask.masked_rows", "0..4"),
    (GOOD + "expect: {tolerance: {float32: {rtol: 1}}}\n", "expect.tolerance.float32", "atol"),
    (GOOD + "expect: {tolerance: {float32: {rtol: 1, atol: small}}}\n",
     "expect.tolerance.float32.atol", "number"),
    (GOOD + "mask: {masked_rows: [1]}\nexpect: {behaviours: {fully_masked_row: "
     "{torch.mha: explode}}}\n", "expect.behaviours.fully_masked_row.torch.mha", "one of"),
    (GOOD + "expect: {behaviours: {fully_masked_row: {torch.mha: nan}}}\n",
     "expect.behaviours.fully_masked_row", "masked_rows is empty"),
    (GOOD + "typed: {num_heads: [4]}\n", "typed", "plain numbers"),
    ("id: Tiny Case\nattention: {num_heads: 2, query_features: 8}\n", "id", "slug"),
])
def test_each_error_names_field(tmp_path, text, field, words):
    err = rejected(tmp_path, text)
    assert err.field_name == field
    assert f"field '{field}'" in str(err) and words in str(err)
    if err.case_id:
        assert f"case {err.case_id!r}" in str(err)


def test_missing_id_names_position(tmp_path):
    err = rejected(tmp_path, "cases:\n  - attention: {num_heads: 2, query_features: 8}\n")
    assert err.field_name == "id" and "case #0" in str(err)


def test_bad_yaml(tmp_path):
    err = rejected(tmp_path, "id: [unclosed\n")
    assert "not valid YAML" in str(err)


def test_duplicate_id_across_files(tmp_path):
    write(tmp_path, GOOD, "a.yaml")
    second = write(tmp_path, GOOD, "b.yaml")
    with pytest.raises(CaseError) as info:
        load_cases(tmp_path)
    assert info.value.path == str(second) and info.value.field_name == "id"
    assert "duplicate id" in str(info.value) and "a.yaml" in str(info.value)


def test_unknown_runner_in_expectations(tmp_path):
    write(tmp_path, GOOD + "expect: {parameters: {torch.mah: 3}}\n")
    with pytest.raises(CaseError) as info:
        load_cases(tmp_path, {"torch.mha"})
    assert info.value.field_name == "expect.parameters.torch.mah"
    assert "names no runner" in str(info.value)


def test_several_cases_per_file(tmp_path):
    path = write(tmp_path, """
        cases:
          - {id: one, attention: {num_heads: 1, query_features: 4}}
          - {id: two, attention: {num_heads: 2, query_features: 4}, inputs: {dtype: float64}}
        """)
    assert [c.id for c in load_file(path)] == ["one", "two"]


def test_shipped_cases_load():
    from conformance.plugin import ROOT
    from conformance.runners import runner_names

    cases = load_cases(ROOT / "cases", set(runner_names()))
    assert len(cases) >= 10
    assert len({c.id for c in cases}) == len(cases)


def test_known_mismatch_needs_a_reason(tmp_path):
    err = rejected(tmp_path, GOOD + "expect: {known_mismatch: {torch.mha: bug}}\n")
    assert err.field_name == "expect.known_mismatch" and "reason" in str(err)
