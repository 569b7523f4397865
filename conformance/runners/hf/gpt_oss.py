"""HuggingFace GPT-OSS: `GptOssAttention`, attention sinks, sliding window, grouped-query,
half-split rotary.

- Sinks: the module holds `sinks`, one logit per head (nn.Parameter(num_attention_heads),
  modeling_gpt_oss.py#L285); the eager function adds the mask, appends the sink as one
  more logit column, subtracts the row maximum, softmaxes and drops that column (#L241-L251):
  the oracle's sinks.  The runner loads the canonical sink logits; a case without
  attention.sinks gets sinks = -inf (exp(-inf) = 0: no sink), and the row says so.
- Rotary: `_apply_rotary_emb` splits x into two halves (torch.chunk(x, 2)): half-split
  pairs; `rope_parameters` default to yarn, the runner passes the default rope type.
- Window: `sliding_window` on "sliding_attention" layers (`layer_types`, #L269 area), the
  mask from the model's builder (decoding.py).  `attention_bias` defaults to True.
"""
from __future__ import annotations

import numpy as np

from conformance.runners.hf.common import SOURCE, SizeFacts, linear_state
from conformance.runners.hf.decoding import DecodingHFRunner, refusals
from conformance.runners.hf.rope_parameters import RopeParametersScaled

GPT_OSS_SOURCE = SOURCE + "gpt_oss/modeling_gpt_oss.py"


class HFGptOss(RopeParametersScaled, DecodingHFRunner):
    name = "hf.gpt_oss"
    typed_system = "hf.gpt_oss"
    system = "transformers.models.gpt_oss.modeling_gpt_oss.GptOssAttention"
    path = "rotary from GptOssRotaryEmbedding, or neutralised; window from the mask builder"
    backend = "eager"
    description = ("`GptOssAttention` (a sink logit per head, sliding window through the "
                   "model's mask builder, decoding through `DynamicCache`)")
    features = DecodingHFRunner.features | {"window", "sinks", "rope_scaling"}
    cos_sin_line = f"{GPT_OSS_SOURCE}#L189"  # cos = emb.cos() * self.attention_scaling
    # the ledger asks the window setting by setting (conventions/probes/window_settings.py,
    # RawCall window_setting: MaskBuilt.answer)
    answers = DecodingHFRunner.answers | {"window_setting"}
    layer_types = True
    rope_source = f"{GPT_OSS_SOURCE}#L207"
    partial_line = f"{GPT_OSS_SOURCE}#L178"  # compute_default_rope_parameters: dim = head_dim
    rotation = ("_apply_rotary_emb splits x into halves (torch.chunk(x, 2)): pairs dimension "
                "i with i + d/2 (half-split); no argument selects the interleaved pairs")
    module, model = "gpt_oss", "GptOss"
    refusals = refusals("GptOss", "head_dim**-0.5")
    call_template = "GptOssAttention(GptOssConfig({args}), layer_idx=0)"

    def model_limits(self, case):
        """An odd head size: _apply_rotary_emb chunks q and k into halves of unequal width
        that broadcast against each other (at head size 3 the module runs and is 0.39 off
        the oracle with the rotation neutralised), so no case of an odd head size is the
        module's attention."""
        a = case.attention
        if a.qk_head_dim % 2 or a.v_head_dim % 2:
            return (f"an odd head size ({a.qk_head_dim}): GptOssAttention's "
                    "_apply_rotary_emb splits q and k in two halves (torch.chunk(x, 2)), of "
                    "unequal width at an odd head size, and broadcasts them together: the "
                    "module runs and its output is no attention (0.39 off at head size 3)")
        return super().model_limits(case)

    def config_call(self, case):
        call, cfg = super().config_call(case)
        return call, {**cfg, "sinks": case.attention.sinks}

    def build(self, torch, plan):
        module = super().build(torch, plan)
        module.conformance_sinks = plan.get("sinks", False)
        return module

    def counted(self, module):
        """The module, less its sinks where the case asks for none (held, neutralised at
        -inf: not part of the case's layer; the row notes them)."""
        if getattr(module, "conformance_sinks", True):
            return module
        import torch

        return torch.nn.ModuleDict({n: getattr(module, n) for n in self.linear_names})

    def state(self, case, weights):
        sinks = weights.sinks if weights.sinks is not None else np.full(
            case.attention.num_heads, -np.inf)
        return {**linear_state(weights, self.linear_names, case.attention.bias),
                "sinks": sinks}

    def notes(self, case, module):
        sinks = ("sinks: the canonical per-head logits" if case.attention.sinks else
                 "sinks neutralised: -inf per head (exp(-inf) = 0 in the denominator), "
                 f"counted apart ({case.attention.num_heads} parameters); the model learns them")
        return (self.rope_notes(case) + self.scaling_notes(case, module)
                + self.decode_notes(case, module) + [sinks])

    sizes = SizeFacts("per_head", f"{GPT_OSS_SOURCE}#L272", "q_proj.weight",
                      "out x in (nn.Linear)", "q_proj, k_proj, v_proj, o_proj are "
                      "nn.Linear: (out, in); sinks (H,)",
                      "(H + H_kv) d E x 2 + H sinks (+ (H + 2 H_kv) d + E biases)",
                      "probe E=8, H=2, d=4, bias: {n}")
