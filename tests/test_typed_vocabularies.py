"""The vocabularies of conformance/case/typed_vocabularies.py: each row's parameter count
is the analytic formula of what the words mean in that system (checked by hand and
against the real transformers modules at tiny widths), and MLA's words are refused
rather than given a wrong head width."""
from __future__ import annotations

import pytest

from conformance.case.loader import CaseError, parse_case
from conformance.case.typed_numbers import BY_KEY, derive, meaning

MATLAB_4 = {"system": "matlab", "num_heads": 4, "num_key_channels": 784, "input_features": 3136}
E, H, D = 3136, 4, 784  # MATLAB's 4 x 784 on 3136 features, read in each system's words
PLAIN = H * E * D * 4  # q, k, v and output weights, no biases: 39,337,984


def test_the_new_rows_count_what_their_words_build():
    rows = {m.system: m for m in meaning(MATLAB_4)}
    # Qwen2-VL: hidden_size / heads = 784 per head; q, k, v biased (3 x 3136), o_proj not
    assert (rows["hf.qwen2_vl"].per_head, rows["hf.qwen2_vl"].parameters) == (
        784, PLAIN + 3 * E)
    assert rows["hf.qwen2_vl"].parameters == 39_347_392
    # a gate: one more 3136 x (4 x 784) projection, unbiased here (attention_bias false)
    for key in ("hf.qwen3_next", "hf.afmoe", "keras_hub.qwen3_5"):
        assert (rows[key].per_head, rows[key].parameters) == (784, PLAIN + E * H * D), key
        assert "gate" in rows[key].note
    assert rows["keras_hub.qwen3_5"].call == (
        "Qwen3_5Attention(num_query_heads=4, num_key_value_heads=4, head_dim=784) on 3136 "
        "features")
    assert rows["keras_hub.qwen3_5_vision"].parameters == PLAIN + 4 * E  # all four biased
    assert rows["hf.pixtral"].parameters == PLAIN and "ignored" in rows["hf.pixtral"].note


def test_mla_words_are_refused_not_miscounted():
    row = {m.system: m for m in meaning(MATLAB_4)}["hf.deepseek_v3"]
    assert (row.per_head, row.total, row.parameters) == (None, None, None)
    assert "qk_nope_head_dim + qk_rope_head_dim" in row.note
    assert row.same_layer.startswith("none")
    with pytest.raises(CaseError) as info:
        parse_case({"id": "d", "typed": {"system": "hf.deepseek_v3", "hidden_size": 16,
                                         "num_attention_heads": 2, "kv_lora_rank": 4},
                    "inputs": {"self_attention": True}}, "x.yaml")
    assert info.value.field_name == "typed.system" and "attention.mla" in str(info.value)


def _module_count(module) -> int:
    """sum(p.numel()) less the QK-norm scales (no typed row counts those)."""
    return sum(p.numel() for n, p in module.named_parameters() if "norm" not in n)


def _hf_modules(bias: bool):
    transformers = pytest.importorskip("transformers")
    from transformers.models.afmoe.modeling_afmoe import AfmoeAttention
    from transformers.models.qwen2_vl.configuration_qwen2_vl import Qwen2VLTextConfig
    from transformers.models.qwen2_vl.modeling_qwen2_vl import Qwen2VLAttention
    from transformers.models.qwen3_next.modeling_qwen3_next import Qwen3NextAttention

    words = dict(hidden_size=16, num_attention_heads=4, num_key_value_heads=2)
    llama = dict(words, head_dim=8, attention_bias=bias)
    return {
        "hf.qwen2_vl": (words, Qwen2VLAttention(Qwen2VLTextConfig(**words), 0)),
        "hf.qwen3_next": (llama, Qwen3NextAttention(transformers.Qwen3NextConfig(**llama), 0)),
        "hf.afmoe": (llama, AfmoeAttention(transformers.AfmoeConfig(
            **llama, num_hidden_layers=1, layer_types=["full_attention"]), 0)),
    }


@pytest.mark.parametrize("bias", [False, True])
def test_counts_match_the_transformers_modules(bias):
    for key, (words, module) in _hf_modules(bias).items():
        if key == "hf.qwen2_vl" and bias:
            continue  # no attention_bias word: its biases are fixed
        c = derive({"system": key, **words})
        assert BY_KEY[key].count(c) == _module_count(module), key


def test_a_planted_wrong_gate_bias_is_caught():
    """Qwen3-Next's gate takes attention_bias, Afmoe's never: the other's count differs
    from the real module, so the comparison above would catch a swapped count."""
    modules = _hf_modules(True)
    c = derive({"system": "hf.afmoe", **modules["hf.afmoe"][0]})
    assert BY_KEY["hf.qwen3_next"].count(c) != _module_count(modules["hf.afmoe"][1])
    assert BY_KEY["hf.afmoe"].count(c) != _module_count(modules["hf.qwen3_next"][1])
    plain = {**derive({"system": "hf.qwen2_vl", **modules["hf.qwen2_vl"][0]})}
    from conformance.case.typed_vocabularies import _plain

    assert _plain(plain) != _module_count(modules["hf.qwen2_vl"][1])  # o_proj's bias counted
