"""HuggingFace Qwen3: `Qwen3Attention`, RMS QK-norm per head, grouped-query, rotary.

q_norm and k_norm are Qwen3RMSNorm(head_dim) applied to each head's projected
query and key ("unlike olmo, only on the head dim!", the source's comment),
before the half-split rotation (`rotate_half`); `rms_norm_eps` is their eps.
Grouped-query with `num_key_value_heads`, `head_dim` any value,
`attention_bias` on q/k/v/o_proj.  cos/sin come from Qwen3RotaryEmbedding at
position_offset + t, or are the identity rotation for a case without rope.
The window_width probe sets Qwen3Config's window as Qwen3Model reads it: sliding_window
kept only with use_sliding_window=True, layer 0 a sliding layer by layer_types (by
default only layers >= max_window_layers = 28 are), the mask from the model's builder
(conventions/probes/window_settings.py); the matrix's cases set no window.
"""
from __future__ import annotations

from conformance.runners.hf.common import SOURCE, SizeFacts
from conformance.runners.hf.declared import self_attention_refusals
from conformance.runners.hf.decoding import MaskBuilt
from conformance.runners.hf.rope_parameters import RopeParametersScaled
from conformance.runners.hf.rotary import (
    ROTATE_HALF, QKNormRotaryHFRunner, qk_norm_limits, rope_limits)

QWEN3_SOURCE = SOURCE + "qwen3/modeling_qwen3.py"


class HFQwen3(RopeParametersScaled, MaskBuilt, QKNormRotaryHFRunner):
    name = "hf.qwen3"
    system = "transformers.models.qwen3.modeling_qwen3.Qwen3Attention"
    path = "rotary from Qwen3RotaryEmbedding, or neutralised"
    backend = "eager"
    typed_system = "hf.qwen3"
    # the runner builds "eager"; a model built from its config gets "sdpa", which reads a
    # causal switch eager ignores: the ledger measures both (conventions/probes/choices.py)
    harness_choices = {"attn_implementation": ("eager", "sdpa")}
    description = "`Qwen3Attention` (RMS QK-norm per head, grouped-query, half-split rotary)"
    features = QKNormRotaryHFRunner.features | {"qk_norm", "rope_scaling"}
    cos_sin_line = f"{QWEN3_SOURCE}#L126"  # cos = emb.cos() * self.attention_scaling
    rope_source = f"{QWEN3_SOURCE}#L90"
    partial_line = f"{QWEN3_SOURCE}#L115"  # compute_default_rope_parameters: dim = head_dim
    probe_attention = {"qk_norm": {"kind": "rms", "scope": "per_head"}}

    refusals = self_attention_refusals("Qwen3Attention", gqa=True,
                                       scaling="scaling = head_dim**-0.5")

    def model_limits(self, case):
        return qk_norm_limits(case, "per_head", "Qwen3Attention", (
            "Qwen3Attention builds q_norm = Qwen3RMSNorm(self.head_dim) (\"unlike olmo, only "
            "on the head dim!\"): each head apart")) or rope_limits(
            case, style="half_split", why_style=f"Qwen3Attention: {ROTATE_HALF}", partial=False,
            why_partial="Qwen3RotaryEmbedding's default rope rotates the whole head_dim"
        ) or self.scaling_limits(case)

    call_template = "Qwen3Attention(Qwen3Config({args}), layer_idx=0)"
    module, model = "qwen3", "Qwen3"
    # Qwen3Config takes sliding_window: the ledger asks it setting by setting through the
    # mask builder (conventions/probes/window_settings.py, MaskBuilt.answer)
    answers = QKNormRotaryHFRunner.answers | {"window_setting"}
    layer_types = True  # Qwen3Model picks each layer's mask by config.layer_types

    def config_kwargs(self, plan):
        """The QK-norm eps and, where the plan has a sliding_window (the window probe; the
        matrix's cases set none), what makes layer 0 a sliding layer: Qwen3Config keeps
        sliding_window only with use_sliding_window=True (configuration_qwen3.py#L86) and
        makes layer i "sliding_attention" only for i >= max_window_layers (default 28,
        #L90-L95), so the probe names layer_types unless it measures max_window_layers."""
        kw = super().config_kwargs(plan)
        if plan.get("sliding_window") is None:
            return kw
        kw.update(use_sliding_window=True, sliding_window=plan["sliding_window"],
                  num_hidden_layers=1, **{k: plan[k] for k in ("is_causal", "max_window_layers")
                                          if k in plan})
        if "max_window_layers" not in plan:
            kw["layer_types"] = ["sliding_attention"]
        return kw

    def window_call(self, window):
        if "max_window_layers" in window:
            return f"Qwen3Config(use_sliding_window=True, {window})"
        return (f"Qwen3Config(use_sliding_window=True, {window}, "
                "layer_types=['sliding_attention'])")

    def window_conditions(self, w):
        """Layer 0 below max_window_layers (the default 28): a full_attention layer, whose
        mask the model builds with create_causal_mask (modeling_qwen3.py#L397-L409)."""
        return [(f"sliding_window={w}, max_window_layers=28",
                 {"sliding_window": w, "max_window_layers": 28}, True)]

    def notes(self, case, module):
        return self.rope_notes(case) + self.scaling_notes(case, module) + [
            "q_norm, k_norm: RMSNorm over each head's head_dim "
            f"values, eps {module.q_norm.variance_epsilon:g}"]

    sizes = SizeFacts("per_head", f"{QWEN3_SOURCE}#L230", "q_proj.weight", "out x in (nn.Linear)",
                      "q_proj, k_proj, v_proj, o_proj are nn.Linear: (out, in)",
                      "(H + H_kv) d E x 2 + 2 d (+ (H + 2 H_kv) d + E biases)",
                      "probe E=8, H=2, d=4, bias: {n}")
