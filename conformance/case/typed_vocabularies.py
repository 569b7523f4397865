"""The vocabularies of the systems whose layers hold more (or other) than the canonical
projections for the same words: a gate, biases on some projections only, a latent head.

typed_numbers.py appends MORE_VOCABULARIES to its own.  A runner whose system takes the
same words for the same numbers as an existing vocabulary names that one instead (e.g.
Gemma3TextConfig speaks Gemma2Config's words, Qwen2VLVisionConfig(embed_dim, num_heads)
torch.nn.MultiheadAttention's); a system gets a row here only where its words or their
meaning differ.  Where the layer holds parameters the canonical formula has no field for,
`count` gives the layer's own analytic count (conformance/case/model.py's parameter_count
with the feature that holds them) and `note` says so on the row.
"""
from __future__ import annotations

from typing import Any, Mapping

from conformance.case.vocabulary import LLAMA_WORDS, Vocabulary, word

_HF = "transformers/models"  # paths inside the installed transformers package


def _plain(c: Mapping[str, Any]) -> int:
    """The canonical formula's count of the derived attention `c` (no feature)."""
    from conformance.case.model import Attention, parameter_count

    return parameter_count(Attention(**c))


def _gated(c: Mapping[str, Any]) -> int:
    """The count with an output gate whose projection is biased as the queries' are: one
    more query-sized projection (model.feature_parameter_count's output_gate term)."""
    from conformance.case.model import Attention, parameter_count
    from conformance.case.output_gate import OutputGate

    return parameter_count(Attention(**c, output_gate=OutputGate("sigmoid")))


def _gated_unbiased(c: Mapping[str, Any]) -> int:
    """The count with an output gate whose projection never has a bias (AfmoeAttention's
    gate_proj is nn.Linear(..., bias=False) whatever attention_bias says)."""
    return _plain(c) + c["num_heads"] * c["query_features"] * c["v_head_dim"]


def _no_output_bias(c: Mapping[str, Any]) -> int:
    """The count of q, k and v biased and the output projection not."""
    return _plain(c) - (c["output_features"] if c["bias"] else 0)


_GATE = ("the same numbers build one more query-sized projection, a per-element sigmoid "
         "gate on each head's output: counted")
MORE_VOCABULARIES: tuple[Vocabulary, ...] = (
    # Qwen2VLTextConfig has no head_dim and no attention_bias; Qwen2VLAttention biases
    # q_proj, k_proj, v_proj and never o_proj (modeling_qwen2_vl.py#L504-L507); mlx-lm's
    # qwen2.ModelArgs takes the same words (mlx_lm/models/qwen2.py#L45-L48, same biases).
    Vocabulary("hf.qwen2_vl", "Qwen2VLTextConfig", LLAMA_WORDS[:2] + LLAMA_WORDS[3:4],
               fixed={"bias": True}, count=_no_output_bias,
               note="q_proj, k_proj and v_proj biased, o_proj never: counted so",
               source=f"{_HF}/qwen2_vl/modeling_qwen2_vl.py#L504"),
    # PixtralVisionConfig's head_dim is a field PixtralAttention never reads: head_dim =
    # hidden_size // num_attention_heads, four unbiased projections (modeling_pixtral.py#L167).
    Vocabulary("hf.pixtral", "PixtralVisionConfig", LLAMA_WORDS[:2], fixed={"bias": False},
               note="its head_dim field is ignored by PixtralAttention",
               source=f"{_HF}/pixtral/modeling_pixtral.py#L167"),
    # Llama's words; q_proj gives num_attention_heads * head_dim * 2, the second half a
    # sigmoid gate, biased with attention_bias (modeling_qwen3_next.py#L241); mlx-lm's
    # ModelArgs the same (mlx_lm/models/qwen3_next.py#L82-L85).
    Vocabulary("hf.qwen3_next", "Qwen3NextConfig", LLAMA_WORDS, fixed={"bias": False},
               count=_gated, note=_GATE, source=f"{_HF}/qwen3_next/modeling_qwen3_next.py#L241"),
    # Llama's words; a separate gate_proj, never biased (modeling_afmoe.py#L337).
    Vocabulary("hf.afmoe", "AfmoeConfig", LLAMA_WORDS, fixed={"bias": False},
               count=_gated_unbiased, note=_GATE + " (gate_proj never biased)",
               source=f"{_HF}/afmoe/modeling_afmoe.py#L337"),
    # keras-hub's layer: GroupQueryAttention's words without use_bias (unbiased EinsumDense),
    # the query dense giving head_dim * 2 per head, the second half the gate
    # (keras_hub/src/models/qwen3_5/qwen3_5_attention.py#L112, #L150-L156).
    Vocabulary("keras_hub.qwen3_5", "Qwen3_5Attention", (
        word("num_query_heads", "num_heads", req=True),
        word("num_key_value_heads", "num_kv_heads", req=True),
        word("head_dim", "qk_head", "v_head", req=True),
        word("features", "query_features", req=True, arg=False)),
        fixed={"bias": False}, count=_gated, note=_GATE,
        source="keras_hub/src/models/qwen3_5/qwen3_5_attention.py#L112"),
    # Qwen3_5VisionAttention(hidden_size, num_heads): qkv and proj Dense layers, biased
    # (keras_hub/src/models/qwen3_5/qwen3_5_vision_encoder.py#L191-L211).
    Vocabulary("keras_hub.qwen3_5_vision", "Qwen3_5VisionAttention", (
        word("hidden_size", "query_features", req=True), word("num_heads", "num_heads", req=True)),
        fixed={"bias": True},
        source="keras_hub/src/models/qwen3_5/qwen3_5_vision_encoder.py#L191"),
    # DeepseekV3Config / DeepseekV2Config and mlx-lm's deepseek_v3.ModelArgs: multi-head
    # latent attention (modeling_deepseek_v3.py#L365-L403).
    Vocabulary("hf.deepseek_v3", "DeepseekV3Config", (
        word("hidden_size", "query_features", req=True),
        word("num_attention_heads", "num_heads", req=True), word("q_lora_rank", "mla"),
        word("kv_lora_rank", "mla"), word("qk_nope_head_dim", "mla"),
        word("qk_rope_head_dim", "mla"), word("v_head_dim", "mla"),
        word("attention_bias", "bias")), fixed={"bias": False},
        source=f"{_HF}/deepseek_v3/modeling_deepseek_v3.py#L365",
        refusal=("multi-head latent attention: a query/key head is qk_nope_head_dim + "
                 "qk_rope_head_dim wide and a value head v_head_dim, projected up from a "
                 "kv_lora_rank latent (and a q_lora_rank one): no one typed width says the "
                 "whole head, and the count needs the ranks; state attention with "
                 "attention.mla instead")),
)
