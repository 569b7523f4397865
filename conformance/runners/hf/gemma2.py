"""HuggingFace Gemma 2: `Gemma2Attention`, score softcapping, `query_pre_attn_scalar`,
sliding window, grouped-query, half-split rotary.

- Softcap: `attn_logit_softcapping` (default 50.0; None turns it off) caps the scaled
  scores, then the mask is added (eager_attention_forward, modeling_gemma2.py#L195-L200):
  softcap before the mask.
- Scale: `Gemma2Attention.scaling = query_pre_attn_scalar**-0.5` (#L221).  The config
  field is typed int and the strict config validator refuses a float
  (StrictDataclassFieldValidationError, measured), so a scale s is expressible only when
  1/s^2 is an integer (1/sqrt(head_dim): head_dim).
- Window: `sliding_window` applies on layers whose `layer_types` entry is
  "sliding_attention" (#L238; the config alternates them); the runner builds one layer
  of the kind the case needs and the mask with the model's builder (decoding.py).
- Gemma2Config validates hidden_size % num_attention_heads == 0 even with a head_dim.
"""
from __future__ import annotations

from conformance.runners.hf.common import SOURCE, SizeFacts
from conformance.runners.hf.decoding import DecodingHFRunner, refusals
from conformance.runners.hf.rope_parameters import RopeParametersScaled

GEMMA2_SOURCE = SOURCE + "gemma2/modeling_gemma2.py"


def pre_attn_scalar(case) -> int | None:
    """query_pre_attn_scalar giving the case's scale, or None when 1/scale^2 is not an
    integer (the field is a strict int)."""
    a = case.attention
    s = a.scale if a.scale is not None else a.qk_head_dim ** -0.5
    q = 1.0 / (s * s)
    return round(q) if round(q) >= 1 and abs(q - round(q)) <= 1e-9 * q else None


class HFGemma2(RopeParametersScaled, DecodingHFRunner):
    name = "hf.gemma2"
    typed_system = "hf.gemma2"
    system = "transformers.models.gemma2.modeling_gemma2.Gemma2Attention"
    path = "rotary from Gemma2RotaryEmbedding, or neutralised; window from the mask builder"
    backend = "eager"
    description = ("`Gemma2Attention` (`attn_logit_softcapping`, `query_pre_attn_scalar`, "
                   "sliding window through the model's mask builder, decoding through "
                   "`DynamicCache`)")
    features = DecodingHFRunner.features | {"window", "softcap", "rope_scaling"}
    cos_sin_line = f"{GEMMA2_SOURCE}#L125"  # cos = emb.cos() * self.attention_scaling
    scaling_text = "query_pre_attn_scalar**-0.5"  # #L221
    # the ledger asks window_width setting by setting (conventions/probes/window_settings.py,
    # RawCall window_setting: MaskBuilt.answer)
    # and softcap (capped.py, through translate/run), softcap_order (softcap.py: a float
    # attention_mask passed raw, so attn_mask_polarity and float_mask are flags.py's)
    answers = DecodingHFRunner.answers | {"window_setting", "attn_mask"}
    sets_scale = True
    layer_types = True
    rope_source = f"{GEMMA2_SOURCE}#L131"
    partial_line = f"{GEMMA2_SOURCE}#L114"  # compute_default_rope_parameters: dim = head_dim
    module, model = "gemma2", "Gemma2"
    refusals = refusals("Gemma2")
    call_template = "Gemma2Attention(Gemma2Config({args}), layer_idx=0)"

    def scale_limits(self, case):
        if pre_attn_scalar(case) is None:
            return (f"scale={case.attention.scale:g}: Gemma2Attention.scaling = "
                    "query_pre_attn_scalar**-0.5, and Gemma2Config types that field int "
                    f"(a float is refused by its strict validator): 1/scale^2 = "
                    f"{case.attention.scale ** -2:g} is not an integer")
        return None

    def config_call(self, case):
        call, cfg = super().config_call(case)
        cap, q = case.attention.softcap, pre_attn_scalar(case)
        cfg = {**cfg, "query_pre_attn_scalar": q, "attn_logit_softcapping": cap}
        return call.replace("Config(", f"Config(query_pre_attn_scalar={q}, "
                            f"attn_logit_softcapping={cap}, ", 1), cfg

    def config_kwargs(self, plan):
        return {**super().config_kwargs(plan), "attn_logit_softcapping":
                plan.get("attn_logit_softcapping"),
                "query_pre_attn_scalar": plan.get("query_pre_attn_scalar") or 256}

    def notes(self, case, module):
        return self.rope_notes(case) + self.scaling_notes(case, module) + self.decode_notes(
            case, module) + [
            f"scaling = query_pre_attn_scalar**-0.5 = {module.scaling:.6g}; "
            f"attn_logit_softcapping = {module.attn_logit_softcapping} (before the mask)"]

    sizes = SizeFacts("per_head", f"{GEMMA2_SOURCE}#L225", "q_proj.weight",
                      "out x in (nn.Linear)", "q_proj, k_proj, v_proj, o_proj are "
                      "nn.Linear: (out, in)", "(H + H_kv) d E x 2 (+ (H + 2 H_kv) d + E biases)",
                      "probe E=8, H=2, d=4, bias: {n}")
