"""HuggingFace Llama 4 (text): `Llama4TextAttention`, with its chunked attention and its
attention temperature as Llama4TextModel drives one layer.

Llama4TextConfig(hidden_size, num_attention_heads, num_key_value_heads, head_dim,
attention_bias, ...) at the case's widths, num_hidden_layers=1 and the layer's settings:
- `no_rope_layers=[1]` rotates q and k (the case's attention.rope; Llama 4 pairs (2i, 2i+1)
  through view_as_complex: interleaved only, the whole head), `[0]` leaves the layer
  without RoPE (modeling_llama4.py#L318 `use_rope = config.no_rope_layers[layer_idx]`);
  the rotation is Llama4TextRotaryEmbedding(config)(x, position_ids), complex freqs_cis;
- `layer_types=["chunked_attention"]`, `attention_chunk_size=C` for mask.chunk: the mask
  is the one Llama4TextModel builds for such a layer (modeling_llama4.py#L543:
  transformers.masking_utils.create_chunked_causal_mask(config, inputs_embeds,
  attention_mask=None, cache=None, position_ids)), never the suite's; other cases get
  the case's causal mask as the model's create_causal_mask gives it (hf_mask);
- `attn_temperature_tuning=True`, floor_scale, attn_scale for attention.temperature, which
  the module applies only on a layer without RoPE (#L360: `if self.attn_temperature_tuning
  and not self.use_rope`): a case asking for both is not expressible;
- `use_qk_norm=False`: Llama 4's L2 norm (Llama4TextL2Norm, no weight) is no QK-norm of
  the case's kinds.
Positions go in as position_ids = position_offset + t, as the model builds them; the
module counts its temperature's positions and the mask builder its chunks from the
sequence index and the cache length (#L362 `torch.arange(hidden_states.shape[1]) +
past_seen_tokens`; masking_utils.py chunked_overlay over q_idx, kv_idx), which the ledger
reads (chunk_mask, attention_temperature).  The scale is head_dim**-0.5 (#L312).
torch and transformers are imported inside functions only.
"""
from __future__ import annotations

from conformance.runners.hf.common import SOURCE, SizeFacts
from conformance.runners.hf.declared import Refusals
from conformance.runners.hf.rotary import ConfigRotaryHFRunner, position_ids, rope_limits

LLAMA4_SOURCE = SOURCE + "llama4/modeling_llama4.py"
MASKING = ("https://github.com/huggingface/transformers/blob/v5.24.0/src/transformers/"
           "masking_utils.py")
COMPLEX = ("apply_rotary_emb views (2i, 2i+1) as one complex number (torch.view_as_complex): "
           "interleaved pairs only")


class HFLlama4(ConfigRotaryHFRunner):
    name = "hf.llama4"
    typed_system = "hf.llama"  # Llama4TextConfig takes LlamaConfig's words
    system = "transformers.models.llama4.modeling_llama4.Llama4TextAttention"
    path = "chunk mask from create_chunked_causal_mask, temperature on a layer without RoPE"
    description = ("`Llama4TextAttention` (grouped-query, interleaved rotary or none, "
                   "chunked attention through the model's mask builder, attention "
                   "temperature on its NoPE layers)")
    backend = "eager"
    module, model = "llama4", "Llama4Text"
    native_style = "interleaved"
    features = ConfigRotaryHFRunner.features | {"chunk", "temperature"}
    refusals = Refusals("Llama4TextAttention is self-attention only (hidden_states)", gqa=True,
                        scale_why="a scale other than 1/sqrt(head_dim): Llama4TextAttention."
                        f"scaling = head_dim**-0.5, not a config field ({LLAMA4_SOURCE}#L312)")
    rope_source = f"{LLAMA4_SOURCE}#L230"
    call_template = "Llama4TextAttention(Llama4TextConfig({args}), layer_idx=0)"
    # the default probes run a layer without RoPE; rope_partial is no setting of its rotary
    probe_takes = ConfigRotaryHFRunner.probe_takes - {"rotary_dim"}
    answers = ConfigRotaryHFRunner.answers - {"partial_rotary"}

    def model_limits(self, case):
        a = case.attention
        if a.temperature is not None and a.rope is not None:
            return ("attention.temperature with attention.rope: Llama4TextAttention tempers "
                    "only a layer without RoPE (`if self.attn_temperature_tuning and not "
                    f"self.use_rope`, {LLAMA4_SOURCE}#L360)")
        if case.mask.chunk is not None and case.has_non_causal_mask:
            return ("mask.chunk with another mask: create_chunked_causal_mask takes a 2-D "
                    "padding mask beside the chunks, not the case's")
        return rope_limits(case, style="interleaved", why_style=f"Llama4TextAttention: "
                           f"{COMPLEX}", partial=False, why_partial=(
                               "Llama4TextRotaryEmbedding rotates the whole head_dim"))

    def config_call(self, case):
        """The config call and plan: the layer's rope, chunk and temperature settings."""
        a, chunk = case.attention, case.mask.chunk
        call, cfg = super().config_call(case)
        t = a.temperature
        extra = {"rope_theta": 500000.0 if a.rope is None else float(a.rope.base),
                 "no_rope_layers": [0 if a.rope is None else 1], "use_qk_norm": False,
                 "layer_types": ["chunked_attention" if chunk else "full_attention"],
                 "attention_chunk_size": chunk, "attn_temperature_tuning": t is not None,
                 **({} if t is None else {"floor_scale": t.floor_scale,
                                          "attn_scale": t.attn_scale})}
        shown = {k: v for k, v in extra.items() if k != "rope_theta" and v is not None}
        words = ", ".join(f"{k}={v!r}" for k, v in shown.items())
        call = call.replace("Config(", f"Config({words}, rope_parameters={{'rope_theta': "
                            f"{extra['rope_theta']:g}}}, ", 1)
        return call, {**cfg, **extra}

    def config_kwargs(self, plan):
        keys = ("no_rope_layers", "use_qk_norm", "layer_types", "attention_chunk_size",
                "attn_temperature_tuning", "floor_scale", "attn_scale")
        return {"num_hidden_layers": 1, **{k: plan[k] for k in keys if k in plan}}

    def embeddings(self, module, x, case, start: int = 0):
        """freqs_cis from Llama4TextRotaryEmbedding at the case's position_ids (complex,
        what Llama4TextModel hands every layer), or None where the layer has no RoPE."""
        if case.attention.rope is None:
            return None
        import torch

        rot = self.rotary(torch, module.config)
        with torch.no_grad():
            return rot(x, position_ids(torch, case, x.shape[0], x.shape[-2], start))

    def call(self, torch, case, data, module, x):
        """The chunked layer's mask from the model's builder; the others' as hf.llama."""
        if case.mask.chunk is None:
            return super().call(torch, case, data, module, x)
        from transformers.masking_utils import create_chunked_causal_mask

        mask = create_chunked_causal_mask(
            config=module.config, inputs_embeds=x, attention_mask=None, cache=None,
            position_ids=position_ids(torch, case, x.shape[0], x.shape[1]))
        return self.forward(module, x, mask)

    def notes(self, case, module):
        cfg, notes = module.config, []
        if case.mask.chunk is not None:
            notes.append(f"layer_types {cfg.layer_types}, attention_chunk_size "
                         f"{cfg.attention_chunk_size}: mask from create_chunked_causal_mask "
                         f"({MASKING}#L1355)")
        if case.attention.temperature is not None:
            notes.append(f"attn_temperature_tuning on a layer without RoPE: floor_scale "
                         f"{cfg.floor_scale}, attn_scale {cfg.attn_scale}, positions "
                         f"arange(T) + cache length ({LLAMA4_SOURCE}#L360-L367)")
        rope = self.rope_notes(case) if case.attention.rope is not None else [
            "no_rope_layers=[0]: the layer applies no RoPE"]
        return rope + notes

    sizes = SizeFacts("per_head", f"{LLAMA4_SOURCE}#L308", "q_proj.weight",
                      "out x in (nn.Linear)",
                      "q_proj, k_proj, v_proj, o_proj are nn.Linear: (out, in)",
                      "(H + H_kv) d E x 2 (+ (H + 2 H_kv) d + E biases)",
                      "probe E=8, H=2, d=4, bias: {n}")
