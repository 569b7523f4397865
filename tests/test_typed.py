"""Typed numbers in a system's own words (conformance/case/typed_numbers.py): the derivation
per system, the loader's errors, and what the MATLAB Answers numbers mean in every
system (the typed-numbers table, the report's first section)."""
from __future__ import annotations

import pytest

from conformance.case.loader import CaseError, load_file, parse_case
from conformance.runners import REGISTRY, load
from conformance.case.typed_numbers import BY_KEY, derive, meaning

MATLAB_4 = {"system": "matlab", "num_heads": 4, "num_key_channels": 784, "input_features": 3136}
MATLAB_8 = {"system": "matlab", "num_heads": 8, "num_key_channels": 392, "input_features": 3136}


@pytest.mark.parametrize("typed, heads, per_head, bias", [
    (MATLAB_4, 4, 196, True),
    ({"system": "keras", "num_heads": 4, "key_dim": 784, "features": 3136}, 4, 784, True),
    ({"system": "torch", "embed_dim": 3136, "num_heads": 4}, 4, 784, True),
    ({"system": "flax", "num_heads": 4, "qkv_features": 784, "features": 3136}, 4, 196, True),
    ({"system": "hf.t5", "d_model": 3136, "num_heads": 4, "d_kv": 64}, 4, 64, False),
    ({"system": "hf.llama", "hidden_size": 3136, "num_attention_heads": 4, "head_dim": 128,
      "num_key_value_heads": 2}, 4, 128, False),
    ({"system": "hf.bert", "hidden_size": 768, "num_attention_heads": 12}, 12, 64, True),
])
def test_each_system_derives_the_canonical_attention(typed, heads, per_head, bias):
    a = derive(typed)
    assert (a["num_heads"], a["qk_head_dim"], a["v_head_dim"], a["bias"]) == (
        heads, per_head, per_head, bias)


def test_optional_words_keras_torch_flax():
    keras = derive({"system": "keras", "num_heads": 2, "key_dim": 8, "value_dim": 4,
                    "output_shape": 6, "features": 16})
    assert (keras["v_head_dim"], keras["output_features"]) == (4, 6)
    torch = derive({"system": "torch", "embed_dim": 16, "num_heads": 2, "kdim": 3, "vdim": 5})
    assert (torch["key_features"], torch["value_features"], torch["qk_head_dim"]) == (3, 5, 8)
    flax = derive({"system": "flax", "num_heads": 2, "features": 16, "out_features": 4})
    assert (flax["qk_head_dim"], flax["output_features"]) == (8, 4)
    assert derive({"system": "hf.llama", "hidden_size": 16, "num_attention_heads": 2,
                   "num_key_value_heads": 1})["num_kv_heads"] == 1


def _case(typed, attention=None):
    raw = {"id": "t", "typed": typed, "inputs": {"self_attention": True}}
    if attention is not None:
        raw["attention"] = attention
    return parse_case(raw, "x.yaml")


def test_the_loader_derives_attention_and_keeps_stated_fields_that_agree():
    assert _case(MATLAB_4).attention.qk_head_dim == 196
    assert _case(MATLAB_4, {"num_heads": 4, "qk_head_dim": 196}).attention.v_head_dim == 196


@pytest.mark.parametrize("typed, attention, field, words", [
    (MATLAB_4, {"qk_head_dim": 784}, "attention.qk_head_dim",
     ["784", "196", "total over the 4 heads", "remove attention.qk_head_dim"]),
    ({**MATLAB_4, "key_dim": 3}, None, "typed.key_dim", ["not a word of matlab"]),
    ({"system": "matlab", "num_heads": 4, "input_features": 3136}, None,
     "typed.num_key_channels", ["required"]),
    ({**MATLAB_4, "num_key_channels": 785}, None, "typed.num_key_channels",
     ["785", "not divisible", "4 heads"]),
    ({"system": "torch", "embed_dim": 3137, "num_heads": 4}, None, "typed.embed_dim",
     ["not divisible"]),
    ({"system": "caffe", "num_heads": 4}, None, "typed.system", ["unknown system"]),
    ({**MATLAB_4, "num_heads": 0}, None, "typed.num_heads", ["positive integer"]),
])
def test_typed_errors_are_clean_case_errors(typed, attention, field, words):
    with pytest.raises(CaseError) as info:
        _case(typed, attention)
    assert info.value.field_name == field
    assert all(w in str(info.value) for w in words), str(info.value)


def test_free_typed_numbers_still_need_attention():
    case = parse_case({"id": "f", "typed": {"num_heads": 4, "key_channels": 784},
                       "attention": {"num_heads": 2, "query_features": 8}}, "x.yaml")
    assert case.attention.qk_head_dim == 4 and case.typed["key_channels"] == 784
    with pytest.raises(CaseError, match="attention.num_heads"):
        parse_case({"id": "f", "typed": {"num_heads": 4}}, "x.yaml")


def test_the_matlab_answers_cases_keep_their_configuration():
    a4, a8 = (c.attention for c in load_file("cases/matlab_answers_digits.yaml"))
    assert (a4.num_heads, a4.qk_head_dim, a4.v_head_dim, a4.query_features) == (4, 196, 196, 3136)
    assert (a8.num_heads, a8.qk_head_dim, a8.v_head_dim, a8.query_features) == (8, 49, 49, 3136)


def test_what_4_x_784_means_in_every_system():
    rows = {m.system: m for m in meaning(MATLAB_4)}
    assert (rows["matlab"].per_head, rows["matlab"].total, rows["matlab"].parameters) == (
        196, 784, 9_839_984)
    assert rows["matlab"].call == "selfAttentionLayer(4,784) on 3136 input features"
    assert rows["keras"].parameters == 39_350_528 and rows["keras"].per_head == 784
    assert "MultiHeadAttention(num_heads=4, key_dim=196)" in rows["keras"].same_layer
    assert rows["flax"].parameters == 9_839_984 and "qkv_features=784" in rows["flax"].call
    torch = rows["torch"]
    assert torch.call == "torch.nn.MultiheadAttention(embed_dim=3136, num_heads=4)"
    assert "no head-size argument" in torch.note and torch.same_layer.startswith("none")
    assert rows["hf.t5"].parameters == 39_337_984  # no biases
    assert "bias" in rows["hf.llama"].same_layer and "attention_bias" not in rows["hf.llama"].call
    assert rows["hf.bert"].parameters == 39_350_528 and "head-size" in rows["hf.bert"].note
    assert {m.system: m.parameters for m in meaning(MATLAB_8)}["matlab"] == 4_921_560


def typed_declaration_problems(runners) -> list[str]:
    """What is wrong with the runners' typed-number declarations: a `typed_system` that
    names no vocabulary, a runner with neither it nor a `no_parameters_label`, and a
    vocabulary no runner speaks."""
    problems = [f"{r.name}: typed_system {r.typed_system!r} is not a vocabulary "
                f"({sorted(BY_KEY)})" for r in runners
                if r.typed_system and r.typed_system not in BY_KEY]
    problems += [f"{r.name}: declares neither typed_system nor no_parameters_label"
                 for r in runners if not (r.typed_system or r.no_parameters_label)]
    spoken = {r.typed_system for r in runners}
    problems += [f"vocabulary {k!r}: no runner declares it" for k in BY_KEY if k not in spoken]
    return problems


def test_every_registry_runner_has_a_typed_numbers_row():
    """Each shipped runner class declares the vocabulary its users type in (or its
    label, holding no parameters); every vocabulary is spoken by a runner."""
    assert typed_declaration_problems([load(t, p) for t, p in REGISTRY]) == []


def test_typed_declaration_check_rejects_planted_defects():
    from .report_rows import stand_in

    runners = [load(t, p) for t, p in REGISTRY]
    runners.append(stand_in("bad.one", "bad", typed_system="klingon"))
    runners.append(stand_in("bad.two", "bad"))
    runners = [r for r in runners if r.typed_system != "hf.t5"]
    assert typed_declaration_problems(runners) == [
        "bad.one: typed_system 'klingon' is not a vocabulary (" + str(sorted(BY_KEY)) + ")",
        "bad.two: declares neither typed_system nor no_parameters_label",
        "vocabulary 'hf.t5': no runner declares it"]


def test_the_schema_names_every_typed_system():
    """case.schema.json's `typed` description lists the vocabularies, in their order."""
    import json

    from conformance.paths import ROOT

    schema = json.loads((ROOT / "conformance" / "case" / "case.schema.json").read_text())
    text = schema["$defs"]["case"]["properties"]["typed"]["description"]
    assert f"With 'system' ({', '.join(BY_KEY)}) in" in text


def test_no_parameter_rows_come_from_the_registry():
    from conformance.report.typed import no_parameters_labels

    labels = ("torch SDPA", "ONNX Attention op", "ORT contrib MultiHeadAttention",
              "ORT contrib GroupQueryAttention", "jax.nn.dot_product_attention", "mlx sdpa")
    assert no_parameters_labels() == labels
    rows = [m.system for m in meaning(MATLAB_4, no_parameters_labels())]
    assert rows == [*BY_KEY, *labels]


def test_the_report_opens_with_the_typed_numbers_table(tmp_path):
    from conformance.report import write_reports

    from .report_rows import FakeCase, make_row, stand_in

    runners = [stand_in("torch.mha", "torch", "torch.nn.MultiheadAttention", "ordinary",
                        typed_system="torch"),
               stand_in("matlab.selfAttentionLayer", "matlab", "matlab selfAttentionLayer",
                        typed_system="matlab")]
    rows = [make_row("m4", r, typed=MATLAB_4) for r in runners]
    rows += [make_row("free", r, typed={"num_heads": 4}) for r in runners]
    write_reports(rows, [FakeCase("m4"), FakeCase("free")], runners, tmp_path, "test")
    md = (tmp_path / "index.md").read_text()
    titles = [line[3:] for line in md.splitlines() if line.startswith("## ")]
    assert titles[:2] == ["Headline findings", "Typed numbers"]  # no ledger: no differences
    assert "9,839,984 parameters" in section_text(md, "Headline findings")
    assert ("| matlab | selfAttentionLayer(4,784) on 3136 input features | 196 | 784 | "
            "9,839,984 |") in md
    assert "| torch | torch.nn.MultiheadAttention(embed_dim=3136, num_heads=4) | 784 |" in md
    assert "**m4: the whole digit network**" in md and "| 9,890,362 |" in md
    details = (tmp_path / "details.md").read_text()  # MATLAB's answer first, the rest after
    assert "| free | num_heads=4 |" in details and "| free | num_heads=4 |" not in md


def section_text(md: str, title: str) -> str:
    return md.split(f"## {title}\n")[1].split("\n## ")[0]
