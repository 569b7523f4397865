"""HuggingFace Gemma 3: `Gemma3Attention` at the layer the case asks, in its model's schedule.

- Schedule (attention.layer_schedule): Gemma3TextConfig takes `layer_types` (one
  "sliding_attention" / "full_attention" per layer; configuration_gemma3.py#L107-L111
  derives them from sliding_window_pattern when not given) and `rope_parameters` keyed by
  layer type (#L132-L158: rope_theta per type, the full type's scaling); the runner passes
  the case's schedule as those, builds `Gemma3Attention(config, layer_idx=<layer>)`, which
  takes its type from `config.layer_types[layer_idx]` (modeling_gemma3.py#L285) and its
  window from `sliding_window` on a sliding layer (#L307), and computes position_embeddings
  as Gemma3TextModel does: `Gemma3RotaryEmbedding(config)(x, position_ids, layer_type)`
  (#L532-L534, one table per type), the mask from the builder the model calls for the type
  (create_sliding_window_causal_mask for sliding, create_causal_mask for full, #L525-L528).
  Gemma 3 has no NoPE layers (no no_rope_layers field): a schedule with nope_layers is not
  expressible.
- A case without a schedule runs one full layer at the case's rope base.
- QK-norm: q_norm and k_norm are Gemma3RMSNorm(head_dim), always applied, scaling by
  (1 + weight) (#L128-L133): the canonical scale s loads as weight s - 1.
- Scale: `scaling = query_pre_attn_scalar**-0.5` (#L290), a strict int field (gemma2.py).
torch and transformers are imported inside functions only.
"""
from __future__ import annotations

import numpy as np

from conformance.case.layer_schedule import HF_LAYER_TYPES as HF_TYPES
from conformance.runners.hf.common import SOURCE, SizeFacts
from conformance.runners.hf.decoding import DecodingHFRunner, refusals
from conformance.runners.hf.gemma2 import pre_attn_scalar
from conformance.runners.hf.rope_parameters import hf_rope
from conformance.runners.hf.rotary import (
    ROTATE_HALF, position_ids, qk_norm_limits, rope_limits, rope_theta)

GEMMA3_SOURCE = SOURCE + "gemma3/modeling_gemma3.py"
GEMMA3_CONFIG = SOURCE + "gemma3/configuration_gemma3.py"


def type_rope(case, kind):
    """hf_rope of one layer type's scaling (None unscaled): the case with that scaling."""
    from dataclasses import replace

    a = case.attention
    return hf_rope(replace(case, attention=replace(a, rope=replace(
        a.rope, scaling=kind.rope_scaling))))


def type_parameters(case, kind) -> dict:
    """rope_parameters of one layer type: its base and, scaled, its scaling's keys."""
    hf = type_rope(case, kind)
    return {"rope_type": "default", "rope_theta": float(kind.rope_base),
            **({} if hf is None else hf.parameters)}


def schedule_plan(case) -> dict:
    """The config's schedule keywords: layer_types, rope_parameters per type, the window."""
    s = case.attention.layer_schedule
    if s is None:
        return {"layer_types": ["full_attention"], "layer_idx": 0, "rope_parameters": {
            "full_attention": {"rope_type": "default", "rope_theta": rope_theta(case)},
            "sliding_attention": {"rope_type": "default", "rope_theta": rope_theta(case)}}}
    kinds = dict(s.kinds)
    params = {HF_TYPES[k]: type_parameters(case, v) for k, v in kinds.items()}
    lengths = [hf.max_position_embeddings for hf in (type_rope(case, v) for v in kinds.values())
               if hf is not None and hf.max_position_embeddings]
    for k in HF_TYPES.values():  # the config asks both types' parameters
        params.setdefault(k, {"rope_type": "default", "rope_theta": 10000.0})
    window = kinds["sliding"].window if "sliding" in kinds else None
    return {"layer_types": [HF_TYPES[t] for t in s.layer_types], "layer_idx": s.layer,
            "rope_parameters": params, "sliding_window": window,
            "max_position_embeddings": max(lengths) if lengths else None}


class HFGemma3(DecodingHFRunner):
    name = "hf.gemma3"
    typed_system = "hf.gemma2"  # Gemma3TextConfig takes Gemma2Config's words
    system = "transformers.models.gemma3.modeling_gemma3.Gemma3Attention"
    path = "layer <layer_idx> of Gemma3TextConfig(layer_types), rotary per layer type"
    backend = "eager"
    description = ("`Gemma3Attention` at a layer of its schedule (`layer_types`, "
                   "`rope_parameters` per layer type, sliding window through the model's "
                   "mask builder), RMS QK-norm per head, `query_pre_attn_scalar`")
    features = DecodingHFRunner.features | {"qk_norm", "layer_schedule"}
    sets_scale = True
    layer_types = True
    probe_attention = {"qk_norm": {"kind": "rms", "scope": "per_head"}}
    rope_source = f"{GEMMA3_SOURCE}#L200"
    partial_line = f"{GEMMA3_SOURCE}#L180"  # compute_default_rope_parameters: dim = head_dim
    module, model = "gemma3", "Gemma3"
    refusals = refusals("Gemma3")
    call_template = "Gemma3Attention(Gemma3TextConfig({args}), layer_idx=0)"

    def model_limits(self, case):
        s = case.attention.layer_schedule
        if s is not None and s.nope_layers:
            return (f"nope_layers {list(s.nope_layers)}: Gemma3TextConfig has no layer without "
                    "rope (Gemma3TextModel hands every layer position_embeddings of its type, "
                    f"{GEMMA3_SOURCE}#L532-L540)")
        if s is not None and any(k.rope_scaling is not None and k.rope_scaling.magnitude ==
                                 "softmax_scale" for _, k in s.kinds):
            return ("a scaling's magnitude on the softmax scale: Gemma3RotaryEmbedding "
                    f"multiplies cos and sin by attention_scaling ({GEMMA3_SOURCE}#L194), "
                    "Gemma3Attention.scaling = query_pre_attn_scalar**-0.5 has no rope term")
        if s is not None and case.has_non_causal_mask:
            return ("a layer schedule with a mask beside the causal one: the runner takes "
                    "each layer's mask from the model's builder alone")
        return qk_norm_limits(case, "per_head", "Gemma3Attention", (
            "Gemma3Attention builds q_norm = Gemma3RMSNorm(dim=config.head_dim): each head "
            "apart")) or rope_limits(
            case, style="half_split", why_style=f"Gemma3Attention: {ROTATE_HALF}",
            partial=False, why_partial="Gemma3RotaryEmbedding's default rope rotates the "
            "whole head_dim") or (hf_rope(case) and "attention.rope.scaling without a layer "
                                  "schedule: give the schedule's full type its rope_scaling")

    def scale_limits(self, case):
        if pre_attn_scalar(case) is None:
            return (f"scale={case.attention.scale:g}: Gemma3Attention.scaling = "
                    "query_pre_attn_scalar**-0.5, an int field: 1/scale^2 = "
                    f"{case.attention.scale ** -2:g} is not an integer")
        return None

    def config_call(self, case):
        """Gemma3TextConfig with the case's sizes, QK-norm eps, scale and schedule."""
        a, n = case.attention, case.attention.qk_norm
        sched = schedule_plan(case)
        cfg = {"hidden_size": a.query_features, "num_attention_heads": a.num_heads,
               "num_key_value_heads": a.num_kv_heads, "head_dim": a.qk_head_dim,
               "attention_bias": a.bias, "rms_norm_eps": 1e-6 if n is None else n.eps,
               "query_pre_attn_scalar": pre_attn_scalar(case),
               "attn_logit_softcapping": a.softcap, **sched}
        shown = {k: v for k, v in cfg.items() if k != "layer_idx" and v is not None}
        args = ", ".join(f"{k}={v!r}" for k, v in shown.items())
        call = (f"Gemma3Attention(Gemma3TextConfig(num_hidden_layers={len(sched['layer_types'])}"
                f", {args}), layer_idx={sched['layer_idx']})")
        return call, cfg

    def build(self, torch, plan):
        from transformers import Gemma3TextConfig

        _, attention = self._classes()
        keys = ("hidden_size", "num_attention_heads", "num_key_value_heads", "head_dim",
                "attention_bias", "rms_norm_eps", "query_pre_attn_scalar",
                "attn_logit_softcapping", "attn_implementation")
        config = Gemma3TextConfig(
            **{k: plan[k] for k in keys}, attention_dropout=plan["dropout"],
            num_hidden_layers=len(plan["layer_types"]), layer_types=list(plan["layer_types"]),
            sliding_window=plan.get("sliding_window") or 4096,
            **({"max_position_embeddings": plan["max_position_embeddings"]}
               if plan.get("max_position_embeddings") else {}),
            rope_parameters={k: dict(v) for k, v in plan["rope_parameters"].items()})
        return attention(config, layer_idx=plan["layer_idx"])

    def state(self, case, weights):
        from conformance.convert.hf import to_qk_norm

        out = dict(to_qk_norm(weights))
        for name in ("q_norm.weight", "k_norm.weight"):  # Gemma3RMSNorm scales by 1 + weight
            out[name] = np.ascontiguousarray(out[name] - 1.0)
        return out

    def embeddings(self, module, x, case, start: int = 0):
        """(cos, sin) of the module's layer type from the model's rotary module, or the
        identity rotation for a case without rope."""
        import torch

        from transformers.models.gemma3.modeling_gemma3 import Gemma3RotaryEmbedding

        rot = Gemma3RotaryEmbedding(module.config)
        with torch.no_grad():
            cos, sin = rot(x, position_ids(torch, case, x.shape[0], x.shape[-2], start),
                           module.layer_type)
        if case.attention.rope is None:
            return torch.ones_like(cos), torch.zeros_like(sin)
        return cos.to(x.dtype), sin.to(x.dtype)

    def mask_builder(self, config):
        raise NotImplementedError("Gemma 3 builds a mask per layer type: built_mask")

    def built_mask(self, torch, case, module, x, cache=None):
        """The mask Gemma3TextModel builds for the module's layer type."""
        from transformers.masking_utils import (
            create_causal_mask, create_sliding_window_causal_mask)

        builder = create_sliding_window_causal_mask if module.is_sliding else create_causal_mask
        start = 0 if cache is None else cache.get_seq_length()
        return builder(config=module.config, inputs_embeds=x, attention_mask=None, cache=cache,
                       position_ids=position_ids(torch, case, x.shape[0], x.shape[1], start))

    def call(self, torch, case, data, module, x):
        if case.attention.layer_schedule is None or case.decode is not None:
            return super().call(torch, case, data, module, x)
        return self.forward(module, x, self.built_mask(torch, case, module, x))

    def notes(self, case, module):
        cfg, t = module.config, module.layer_type
        return self.rope_notes(case) + self.decode_notes(case, module) + [
            f"layer {module.layer_idx} of {cfg.num_hidden_layers}: {t}, rope_parameters "
            f"{cfg.rope_parameters[t]}, sliding_window {module.sliding_window} "
            f"({GEMMA3_CONFIG}#L107)",
            f"scaling = query_pre_attn_scalar**-0.5 = {module.scaling:.6g}; q_norm, k_norm: "
            "Gemma3RMSNorm (1 + weight) over each head"]

    sizes = SizeFacts("per_head", f"{GEMMA3_SOURCE}#L294", "q_proj.weight",
                      "out x in (nn.Linear)", "q_proj, k_proj, v_proj, o_proj are "
                      "nn.Linear: (out, in)", "(H + H_kv) d E x 2 + 2 d (+ (H + 2 H_kv) d + E "
                      "biases)", "probe E=8, H=2, d=4, bias: {n}")
