"""The loader rejects each kind of bad case with file, case id and field named."""
from __future__ import annotations

import textwrap
import tracemalloc
from pathlib import Path

import pytest

from conformance.case.loader import (
    Budget, CaseError, element_counts, load_cases, load_cases_report, load_file)
from conformance.case.model import MAX_MESSAGE

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
    (GOOD + "mask: {key_padding: [5, -1]}\n", "mask.key_padding", "0..key_len"),
    (GOOD + "mask: {key_padding: [5, 6]}\n", "mask.key_padding", "0..key_len"),
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
     "expect.behaviours.fully_masked_row", "leaves every query row a key"),
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
    from conformance.paths import ROOT
    from conformance.runners import runner_names

    cases = load_cases(ROOT / "cases", set(runner_names()))
    assert len(cases) >= 10
    assert len({c.id for c in cases}) == len(cases)


def test_known_mismatch_needs_a_reason(tmp_path):
    err = rejected(tmp_path, GOOD + "expect: {known_mismatch: {torch.mha: bug}}\n")
    assert err.field_name == "expect.known_mismatch" and "reason" in str(err)


# --------------------------------------------------------------------------
# Hostile case files (issue #13): every failure is a CaseError naming the file
# and the field, with a bounded message, in bounded time.
# --------------------------------------------------------------------------
def alias_bomb(levels: int = 9, width: int = 9) -> str:
    """About 400 bytes of nested aliases that expand to width**levels scalars."""
    names = "abcdefghi"
    parts = ["&a [" + ",".join(["1"] * width) + "]"]
    parts += [f"&{names[i]} [" + ",".join([f"*{names[i - 1]}"] * width) + "]"
              for i in range(1, levels)]
    return "[" + ",".join(parts) + "]"


def refused_bytes(tmp_path: Path, data: bytes, **kwargs) -> CaseError:
    path = tmp_path / "hostile.yaml"
    path.write_bytes(data)
    tracemalloc.start()  # bounded work, measured as memory, not wall time (a loaded
    try:                 # machine): an expanded alias bomb would allocate gigabytes
        with pytest.raises(CaseError) as info:
            load_file(path, **kwargs)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 64 * 2**20, f"{peak:,} bytes to refuse {len(data):,} bytes"
    message = str(info.value)
    assert message.startswith(str(path)) and len(message) <= MAX_MESSAGE
    assert f"field '{info.value.field_name}'" in message
    return info.value


HOSTILE = [
    (b"id: tiny\ntitle: caf\xe9\n", "(encoding)", "not UTF-8"),
    (GOOD + "tags: " + "[" * 500 + "]" * 500 + "\n", "tags[0]", "nested deeper"),
    (GOOD + "expect: {tolerance: [1]}\n", "expect.tolerance", "mapping"),
    (GOOD + "expect: {behaviours: [1]}\n", "expect.behaviours", "mapping"),
    (GOOD + "expect: {tolerance: {float32: {rtol: .inf, atol: 0}}}\n",
     "expect.tolerance.float32.rtol", "finite"),
    (GOOD + "expect: {tolerance: {float32: {rtol: 0, atol: .nan}}}\n",
     "expect.tolerance.float32.atol", "finite"),
    ("id: tiny\nattention: {num_heads: 2, query_features: 8, num_kv_heads: null}\n",
     "attention.num_kv_heads", "null"),
    ("id: tiny\nattention: {num_heads: null, query_features: 8}\n", "attention.num_heads",
     "null"),
    (GOOD + "inputs: {seed: null}\n", "inputs.seed", "null"),
    (GOOD + "inputs: {batch: null}\n", "inputs.batch", "null"),
    (GOOD + "typed: {2024-01-01: 3}\n", "typed", "keys must be strings"),
    (GOOD + "typed: {1: 2}\n", "typed", "keys must be strings"),
    (GOOD + "typed: {x: .nan}\n", "typed", "finite"),
    (GOOD + "mask: {null: 1}\n", "mask", "keys must be strings"),
    ('id: "tiny\\n"\nattention: {num_heads: 2, query_features: 8}\n', "id", "slug"),
    (GOOD + "inputs: {seed: " + "9" * 5000 + "}\n", "inputs.seed", "too large"),
    (GOOD + "inputs: {seed: 9223372036854775808}\n", "inputs.seed", "2**63-1"),
    (GOOD + "title: 2024-13-45\n", "title", "timestamp"),
    (GOOD + "title: !!binary aGVsbG8=\n", "title", "binary"),
    (GOOD + "title: !!python/object/apply:os.system [ls]\n", "title", "python"),
    (GOOD + "tags: &a [*a]\n", "tags[0]", "recursive alias"),
    (GOOD + "id: again\n", "id", "duplicate key"),
    (GOOD + "mask: {key_padding: [" + ",".join(["7"] * 20000) + "]}\n", "mask.key_padding",
     "more than 10,000 YAML nodes"),
    (GOOD + "description: " + "x" * 1_000_001 + "\n", "(file)", "larger than"),
    (GOOD + "mask: {key_padding: [" + ",".join(["7"] * 5000) + "]}\n", "mask.key_padding",
     "one valid key length"),
    (GOOD + "mask: {masked_rows: [" + ",".join(["99"] * 5000) + "]}\n", "mask.masked_rows",
     "0..4"),
    (GOOD + "mask: {attn_mask: " + str([[2] * 90] * 90) + "}\n", "mask.attn_mask", "shape"),
    (GOOD + "title: [" + ",".join(['"' + "x" * 500 + '"'] * 500) + "]\n", "title", "string"),
]


@pytest.mark.parametrize("text, field, words", HOSTILE, ids=[h[1] + "-" + h[2] for h in HOSTILE])
def test_hostile_file_is_a_clean_error(tmp_path, text, field, words):
    data = text if isinstance(text, bytes) else text.encode()
    err = refused_bytes(tmp_path, data)
    assert err.field_name.startswith(field), err
    assert words in str(err)


@pytest.mark.parametrize("field", ["key_padding", "attn_mask", "masked_rows"])
def test_alias_bomb_is_refused_quickly(tmp_path, field):
    bomb = alias_bomb()
    assert len(bomb) < 450  # 9**9 = 387 million scalars once expanded
    err = refused_bytes(tmp_path, (GOOD + f"mask: {{{field}: {bomb}}}\n").encode())
    assert err.field_name.startswith(f"mask.{field}") and err.case_id == "tiny"
    assert "aliases expand" in str(err)


def test_small_aliases_still_work(tmp_path):
    (case,) = load_file(write(tmp_path, GOOD + "inputs: {batch: &n 2, query_len: *n}\n"
                              "mask: {key_padding: [*n, 1]}\n"))
    assert case.inputs.query_len == 2 and case.mask.key_padding == (2, 1)


def test_null_section_still_means_empty(tmp_path):
    (case,) = load_file(write(tmp_path, GOOD + "mask: null\nexpect: null\n"))
    assert case.mask.causal == "none" and case.expect.tolerance == {}


# --------------------------------------------------------------------------
# Element budget
# --------------------------------------------------------------------------
HUGE = "id: huge\nattention: {num_heads: 2, query_features: 1000000}\n"
GPT3 = "id: gpt3\nattention: {num_heads: 96, query_features: 12288}\ninputs: {batch: 1}\n"


def test_over_the_loader_limit_is_refused(tmp_path):
    err = refused_bytes(tmp_path, HUGE.encode())
    assert err.field_name == "attention" and err.case_id == "huge"
    assert "loader's limit of 1,000,000,000,000" in str(err) and "--max-elements" in str(err)
    err = refused_bytes(tmp_path, (GOOD + "inputs: {batch: 100000, query_len: 10000}\n").encode())
    assert err.field_name == "inputs" and "CONFORMANCE_MAX_ACTIVATION_ELEMENTS" in str(err)


def test_over_the_numbers_budget_still_loads(tmp_path, monkeypatch):
    """The env budgets bound the numerical comparison (counting.py), not loading."""
    path = write(tmp_path, GPT3)
    (case,) = load_file(path)
    monkeypatch.setenv("CONFORMANCE_MAX_WEIGHT_ELEMENTS", "1_000")
    assert load_file(path) == [case]
    with pytest.raises(CaseError):
        load_file(path, budget=Budget(weights=10**6))


def test_element_counts_are_arithmetic(tmp_path):
    """A GPT-3 sized layer (96 heads, d_model 12288) is counted without allocating it."""
    tracemalloc.start()
    try:
        (case,) = load_file(write(tmp_path, GPT3), budget=Budget(10**12, 10**12))
        counts = element_counts(case)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert counts["weights"] == 4 * 12288**2 + 4 * 12288 == 604_028_928
    assert counts["scores"] == 1 * 96 * 5 * 5
    assert peak < 5 * 2**20


def test_element_counts_match_the_formula():
    from conformance.paths import ROOT
    from conformance.oracle.reference import formula_parameters

    for case in load_cases(ROOT / "cases"):
        assert element_counts(case)["weights"] == formula_parameters(case), case.id
        assert element_counts(case)["activations"] > 0


# --------------------------------------------------------------------------
# A directory with bad files
# --------------------------------------------------------------------------
def test_bad_files_hide_no_good_case(tmp_path):
    write(tmp_path, GOOD, "a.yaml")
    (tmp_path / "b.yaml").write_bytes(b"id: tiny\ntitle: \xff\n")
    write(tmp_path, "id: other\nattention: {num_heads: 1, query_features: 4}\n", "c.yaml")
    write(tmp_path, "cases:\n  - {id: three, attention: {num_heads: 1, query_features: 4}}\n"
                    "  - {id: bad, attention: {num_heads: 1, query_features: 4}, "
                    "inputs: {seed: null}}\n", "d.yaml")
    write(tmp_path, "tags: " + "[" * 400 + "]" * 400 + "\n", "e.yaml")
    write(tmp_path, GOOD, "f.yaml")  # a duplicate id
    cases, errors = load_cases_report(tmp_path)
    assert [c.id for c in cases] == ["tiny", "other", "three"]
    assert [(Path(e.path).name, e.field_name[:7]) for e in errors] == [
        ("b.yaml", "(encodi"), ("d.yaml", "inputs."), ("e.yaml", "tags[0]"), ("f.yaml", "id")]
    assert errors[1].case_id == "bad" and "duplicate id" in str(errors[3])
    assert all(len(str(e)) <= MAX_MESSAGE for e in errors)
    with pytest.raises(CaseError) as info:
        load_cases(tmp_path)
    assert info.value.path.endswith("b.yaml")


def test_public_names_are_re_exported():
    import subprocess
    import sys

    from conformance.case import loader as case
    from conformance.case import model as case_types

    for name in ("Case", "Attention", "Inputs", "Mask", "Expect", "Tolerance", "Weights",
                 "CaseError", "DTYPES", "CAUSAL", "BEHAVIOURS", "BIAS_VALUES",
                 "DEFAULT_TOLERANCE", "tolerance_for", "Budget", "element_counts"):
        assert getattr(case, name) is getattr(case_types, name)
    code = "import sys, conformance.case.model; print('conformance.case.loader' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         cwd=Path(__file__).resolve().parent.parent, check=True)
    assert out.stdout.strip() == "False"
