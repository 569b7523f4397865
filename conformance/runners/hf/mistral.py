"""HuggingFace Mistral: `MistralAttention`, grouped-query, half-split rotary, sliding window.

MistralConfig's `sliding_window` is read by the model's mask builder
(MistralModel picks create_sliding_window_causal_mask when it is set,
modeling_mistral.py#L355): `kv_idx > q_idx - sliding_window`, w keys with the
query itself (masking_utils.py#L90-L98).  The module passes it on to the attention
interface (#L173), where only flash-attention reads it (window_size = (w - 1, w -
1) with causal=True, modeling_flash_attention_utils.py#L692); the eager function
the runner calls applies the mask it is given.  q/k/v/o_proj are nn.Linear(...,
bias=False) with no config field (#L134-L137); the scale is head_dim**-0.5.
Windows and decodes go through decoding.py.
"""
from __future__ import annotations

from conformance.runners.hf.common import SOURCE, SizeFacts
from conformance.runners.hf.decoding import DecodingHFRunner, refusals
from conformance.runners.hf.rope_parameters import RopeParametersScaled

MISTRAL_SOURCE = SOURCE + "mistral/modeling_mistral.py"


class HFMistral(RopeParametersScaled, DecodingHFRunner):
    name = "hf.mistral"
    typed_system = "hf.mistral"
    # the runner builds "eager"; a model built from its config gets "sdpa", which reads a
    # causal switch eager ignores: the ledger measures both (conventions/probes/choices.py)
    harness_choices = {"attn_implementation": ("eager", "sdpa")}
    system = "transformers.models.mistral.modeling_mistral.MistralAttention"
    path = "rotary from MistralRotaryEmbedding, or neutralised; window from the mask builder"
    backend = "eager"
    description = ("`MistralAttention` (grouped-query, half-split rotary, `sliding_window` "
                   "through the model's mask builder, decoding through `DynamicCache`)")
    features = DecodingHFRunner.features | {"window", "rope_scaling"}  # rope_parameters
    cos_sin_line = f"{MISTRAL_SOURCE}#L303"  # cos = emb.cos() * self.attention_scaling
    # the ledger asks the window setting by setting (conventions/probes/window_settings.py,
    # RawCall window_setting: MaskBuilt.answer)
    answers = DecodingHFRunner.answers | {"window_setting"}
    rope_source = f"{MISTRAL_SOURCE}#L51"
    partial_line = f"{MISTRAL_SOURCE}#L292"  # compute_default_rope_parameters: dim = head_dim
    module, model = "mistral", "Mistral"
    probe_attention = {"bias": False}  # no bias to load

    refusals = refusals("Mistral", "head_dim**-0.5", fixed_bias=(
        False, f"MistralAttention builds q/k/v/o_proj with bias=False and no config field "
        f"({MISTRAL_SOURCE}#L134)"))
    config_fields = {k: v for k, v in DecodingHFRunner.config_fields.items()
                     if k != "attention_bias"}
    config_keys = tuple(k for k in DecodingHFRunner.config_keys if k != "attention_bias")
    call_template = "MistralAttention(MistralConfig({args}), layer_idx=0)"

    def notes(self, case, module):
        return (self.rope_notes(case) + self.scaling_notes(case, module)
                + self.decode_notes(case, module))

    sizes = SizeFacts("per_head", f"{MISTRAL_SOURCE}#L134", "q_proj.weight",
                      "out x in (nn.Linear)", "q_proj, k_proj, v_proj, o_proj are "
                      "nn.Linear(bias=False): (out, in)", "(H + H_kv) d E x 2",
                      "probe E=8, H=2, d=4: {n}")
