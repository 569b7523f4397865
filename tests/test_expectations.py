"""Expectations per runner (expectations/<runner>.yaml): the files, their validation,
the `when` conditions, what a case pins over them, and fully masked rows derived from
the mask (case/masks.py) against the oracle."""
from __future__ import annotations

import itertools
import random
from dataclasses import replace

import pytest

from conformance.case.expectations import (
    CONDITIONS, Expectations, KnownMismatch, declared)
from conformance.case.loader import CaseError, load_cases, parse_case
from conformance.conventions.expectations import (
    EXPECTATIONS_DIR, ExpectationError, load_dir, load_file, set_value, update)
from conformance.oracle.canonical import case_data
from conformance.paths import CASES_DIR
from conformance.runners import runner_names

from .helpers import make_case


def test_every_runner_has_a_valid_file_and_no_case_pins_a_runner_answer():
    loaded = load_dir(EXPECTATIONS_DIR, runner_names())
    assert sorted(p.stem for p in EXPECTATIONS_DIR.glob("*.yaml")) == sorted(runner_names())
    assert all(e.conventions for e in loaded.values())  # the ledger's cells, split per runner
    for case in load_cases(CASES_DIR):
        assert not case.expect.behaviours and not case.expect.known_mismatch, case.id


# ---- validation: each planted defect is refused, naming file, field and fix ----------

@pytest.mark.parametrize("text, field, words", [
    ("behavior: {}\n", "behavior", "unknown section"),
    ("behaviours: {fully_masked_row: explode}\n", "behaviours.fully_masked_row", "one of"),
    ("behaviours: {masked: nan}\n", "behaviours.masked", "unknown behaviour"),
    ("behaviours: {nonfinite_input: {Case One: contained}}\n",
     "behaviours.nonfinite_input.Case One", "case ids"),
    ("behaviours: {nonfinite_input: {c: fine}}\n", "behaviours.nonfinite_input.c", "one of"),
    ("known_mismatches: {dtype: float64}\n", "known_mismatches", "list"),
    ("known_mismatches: [{when: {dtype: float64}}]\n", "known_mismatches[0].reason",
     "required"),
    ("known_mismatches: [{reason: 'a reason, with a link'}]\n", "known_mismatches[0].when",
     "required"),
    ("known_mismatches: [{when: {head_dim: 1}, reason: 'a reason, with a link'}]\n",
     "known_mismatches[0].when.head_dim", "unknown condition"),
    ("known_mismatches: [{when: {dtype: float8}, reason: 'a reason, with a link'}]\n",
     "known_mismatches[0].when.dtype", "one of"),
    ("known_mismatches: [{when: {bias: 'yes'}, reason: 'a reason, with a link'}]\n",
     "known_mismatches[0].when.bias", "one of"),
    ("known_mismatches: [{when: {bias: true}, reason: 'a reason, with a link', "
     "strict: 1}]\n", "known_mismatches[0].strict", "true or false"),
    ("known_mismatches: [{when: {bias: true}, reason: 'a reason, with a link', "
     "link: x}]\n", "known_mismatches[0].link", "unknown field"),
    ("conventions: {softmax_scale: bogus}\n", "conventions.softmax_scale", "vocabulary"),
    ("conventions: {scale: none}\n", "conventions.scale", "unknown axis"),
    ("conventions: [1]\n", "conventions", "mapping"),
    ("a: &a [*a]\n", "a[0]", "recursive"),
])
def test_bad_file_names_file_field_and_fix(tmp_path, text, field, words):
    path = tmp_path / "torch.mha.yaml"
    path.write_text(text)
    with pytest.raises(CaseError) as info:
        load_file(path, "torch.mha")
    assert info.value.field_name == field and words in str(info.value)
    assert str(path) in str(info.value)


def test_a_file_naming_no_runner_is_an_error(tmp_path):
    (tmp_path / "torch.mhaa.yaml").write_text("behaviours: {fully_masked_row: nan}\n")
    with pytest.raises(ExpectationError, match="torch.mhaa.yaml: field '[(]file name[)]': "
                       "names no runner"):
        load_dir(tmp_path, ["torch.mha"])
    assert load_dir(tmp_path / "absent", ["torch.mha"])["torch.mha"] == Expectations(
        "torch.mha", str(tmp_path / "absent" / "torch.mha.yaml"))


# ---- conditions -----------------------------------------------------------------------

def _shipped(case_id):
    return next(c for c in load_cases(CASES_DIR) if c.id == case_id)


KERAS_BIAS = KnownMismatch({"bias": (True,), "bias_values": ("random",),
                            "head_width_one_length_equals_heads": (True,)}, "NCHW bias")


def test_keras_head_width_one_condition_is_the_documented_one():
    """Head width 1 and a length equal to the head count (query: query_len == H; key and
    value: key_len == H_kv), with random biases: the shipped case and no other."""
    shipped = _shipped("keras-head-width-one")
    assert [c.id for c in load_cases(CASES_DIR) if KERAS_BIAS.matches(c)] == [shipped.id]
    base = dict(attention={"num_heads": 2, "query_features": 2, "qk_head_dim": 1,
                           "v_head_dim": 1}, inputs={"batch": 1, "query_len": 2, "key_len": 3})
    assert KERAS_BIAS.matches(make_case(**base))
    assert not KERAS_BIAS.matches(make_case(**{**base, "inputs": {"query_len": 3,
                                                                  "key_len": 3}}))
    assert KERAS_BIAS.matches(make_case(**{**base, "inputs": {"query_len": 3, "key_len": 2}}))
    wider = {**base["attention"], "qk_head_dim": 2}
    assert not KERAS_BIAS.matches(make_case(**{**base, "attention": wider}))  # v only: d_v 1
    assert KERAS_BIAS.matches(make_case(attention=wider, inputs={"query_len": 3, "key_len": 2}))
    assert not KERAS_BIAS.matches(make_case(**base, weights={"bias_values": "zeros"}))
    assert not KERAS_BIAS.matches(make_case(**{**base, "attention": {
        **base["attention"], "bias": False}}))


def test_scale_exact_in_float32():
    exact = CONDITIONS["scale_exact_in_float32"].read
    assert exact(make_case(attention={"num_heads": 2, "query_features": 8}))  # 1/sqrt(4)
    assert not exact(make_case(attention={"num_heads": 4, "query_features": 32}))  # 1/sqrt(8)
    assert not exact(make_case(attention={"num_heads": 2, "query_features": 8, "scale": 0.1}))


def test_alibi_key_after_query():
    after = CONDITIONS["alibi_key_after_query"].read
    alibi = {"num_heads": 2, "query_features": 8, "alibi": True}
    assert after(make_case(attention=alibi))  # no mask: later keys are seen
    assert not after(make_case(attention=alibi, mask={"causal": "upper_left"}))
    assert not after(make_case(attention=alibi, inputs={"self_attention": True},
                               mask={"causal": "lower_right"}))
    assert after(make_case(attention=alibi, inputs={"query_len": 2, "key_len": 4},
                           mask={"causal": "lower_right"}))  # query 0 sees key 2
    assert not after(make_case(attention={**alibi, "alibi": False}))


def test_case_pins_win_over_the_runner_file_and_say_where_to_remove_them():
    file = Expectations("r", "expectations/r.yaml", "nan", {"c": "contained"},
                        (KnownMismatch({"dtype": ("float64",)}, "f64 shortfall", strict=False),))
    case = make_case(mask={"masked_rows": [1]}, inputs={"dtype": "float64"})
    d = declared(replace(case, id="c"), "r", file)
    assert (d.fully_masked_row, d.nonfinite_input, d.known_mismatch, d.strict) == (
        "nan", "contained", "f64 shortfall", False)
    assert d.source == "known_mismatches[0] in expectations/r.yaml"
    pinned = make_case(mask={"masked_rows": [1]}, inputs={"dtype": "float64"}, expect={
        "behaviours": {"fully_masked_row": {"r": "zeros"}},
        "known_mismatch": {"r": "the case's own reason"}})
    d = declared(pinned, "r", file)
    assert (d.fully_masked_row, d.known_mismatch, d.strict) == (
        "zeros", "the case's own reason", True)
    assert d.source.startswith("expect.known_mismatch.r in ")
    assert declared(make_case(), "r", file).known_mismatch == ""  # float32: no match


# ---- fully masked rows, derived from the mask ------------------------------------------

def test_derived_rows_need_no_masked_rows_and_a_case_may_pin_them():
    cases = {
        "lower right, T > S": {"mask": {"causal": "lower_right"},
                               "inputs": {"query_len": 5, "key_len": 3}},
        "zero row": {"mask": {"attn_mask": [[1, 1, 0], [0, 0, 0]]},
                     "inputs": {"query_len": 2, "key_len": 3}},
        "keras query padding": {"mask": {"attn_mask": [[[1, 1], [1, 1]], [[1, 0], [0, 0]]]},
                                "inputs": {"batch": 2, "query_len": 2, "key_len": 2}},
        "fully padded item": {"mask": {"key_padding": [3, 0]},
                              "inputs": {"batch": 2, "key_len": 3}},
    }
    for name, fields in cases.items():
        case = make_case(**fields, expect={"behaviours": {"fully_masked_row": {
            "torch.mha": "nan"}}})  # a pin the loader refused before: masked_rows was empty
        assert case.has_fully_masked_rows, name
        assert case_data(case).inputs.fully_masked.any(), name
    with pytest.raises(CaseError, match="leaves every query row a key"):
        make_case(mask={"causal": "lower_right"}, inputs={"query_len": 3, "key_len": 5},
                  expect={"behaviours": {"fully_masked_row": {"torch.mha": "nan"}}})


def _random_mask(rng: random.Random, b: int, t: int, s: int) -> dict:
    mask = {"causal": rng.choice(["none", "upper_left", "lower_right"])}
    if rng.random() < 0.5:
        mask["key_padding"] = [rng.randint(0, s) for _ in range(b)]
    if rng.random() < 0.5:
        shape = (b, t, s) if rng.random() < 0.5 else (t, s)
        cells = [int(rng.random() < 0.6) for _ in range(t * s * (b if len(shape) == 3 else 1))]
        rows = [cells[i:i + s] for i in range(0, len(cells), s)]
        mask["attn_mask"] = [rows[i:i + t] for i in range(0, len(rows), t)] if \
            len(shape) == 3 else rows
    if rng.random() < 0.2:
        mask["masked_rows"] = [rng.randrange(t)]
    return mask


def test_derived_rows_agree_with_the_oracle_on_300_random_masks():
    rng = random.Random(16)
    for n, (b, t, s) in enumerate(itertools.islice(iter(lambda: (
            rng.randint(1, 3), rng.randint(1, 5), rng.randint(1, 5)), None), 300)):
        raw = {"id": f"m{n}", "attention": {"num_heads": 1, "query_features": 2},
               "inputs": {"batch": b, "query_len": t, "key_len": s},
               "mask": _random_mask(rng, b, t, s)}
        case = parse_case(raw, "<random>")
        assert case.has_fully_masked_rows == bool(case_data(case).inputs.fully_masked.any()), raw


# ---- writing (--update-expectations) ----------------------------------------------------

def test_set_value_replaces_in_place_and_adds_where_the_entry_belongs():
    text = ("# notes\nbehaviours:\n  fully_masked_row: nan  # old\n\nconventions:\n"
            "  dropout: never\n")
    text = set_value(text, ("behaviours", "fully_masked_row"), "zeros")
    text = set_value(text, ("behaviours", "nonfinite_input", "c-1"), "contained")
    text = set_value(text, ("conventions", "softcap"), "applied")
    assert text == ("# notes\nbehaviours:\n  fully_masked_row: zeros\n  nonfinite_input:\n"
                    "    c-1: contained\n\nconventions:\n  dropout: never\n  softcap: applied\n")
    fresh = set_value("# header\nconventions:\n  dropout: never\n",
                      ("behaviours", "fully_masked_row"), "nan")
    assert fresh == ("# header\nbehaviours:\n  fully_masked_row: nan\nconventions:\n"
                     "  dropout: never\n")


def test_update_refuses_what_it_cannot_write_line_by_line(tmp_path):
    path = tmp_path / "torch.mha.yaml"
    path.write_text("behaviours: {fully_masked_row: nan}\n")  # flow style: no line to edit
    with pytest.raises(ExpectationError, match="block style"):
        update(path, "torch.mha", {("behaviours", "fully_masked_row"): "zeros"})
    assert path.read_text() == "behaviours: {fully_masked_row: nan}\n"  # left as it was
    update(tmp_path / "torch.sdpa.yaml", "torch.sdpa", {("conventions", "dropout"): "never"})
    assert load_file(tmp_path / "torch.sdpa.yaml", "torch.sdpa").conventions == {
        "dropout": "never"}


def test_nonfinite_key_condition_reads_the_key_tensor_only():
    from conformance.case.expectations import CONDITIONS
    from conformance.case.loader import parse_case

    def case(tensor):
        return parse_case({"id": "x", "attention": {"num_heads": 2, "query_features": 4},
                           "inputs": {"nonfinite": [{"tensor": tensor, "batch": 0,
                                                     "position": 0, "feature": 0,
                                                     "value": "nan"}]}}, "<test>")

    read = CONDITIONS["nonfinite_key"].read
    assert read(case("key")) is True and read(case("value")) is False
