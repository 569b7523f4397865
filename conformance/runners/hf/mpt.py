"""HuggingFace MPT: `MptAttention`, ALiBi.

MptModel builds `build_mpt_alibi_tensor(n_heads, max_seq_len)`:
slope_h * (j - (S - 1)) with MPT's own slope rule (2 ** -(8 (h + 1) / n') for
n' the next power of two, then the odd-indexed slopes before the even-indexed
ones when n is not a power of two), and the attention module adds its last S
columns to the scaled scores.  `Wqkv` nn.Linear(E, 3E, bias=False) = [W_q; W_k;
W_v] and `out_proj` have no biases; `attn_config.softmax_scale` sets the
scale (None: 1/sqrt(head_dim)).  The mask is MptModel's causal mask cast to
bool: True = MASKED (masked_fill with finfo.min).
"""
from __future__ import annotations

from conformance.contract.runner import harness_limit
from conformance.convert.hf import to_mpt
from conformance.runners.hf.common import SOURCE, SizeFacts
from conformance.runners.hf.declared import ConfigBuild, self_attention_refusals
from conformance.runners.hf.probed import ProbedHFRunner

MPT_SOURCE = SOURCE + "mpt/modeling_mpt.py"


def slopes(num_heads: int):
    """MPT's own slopes, read back from build_mpt_alibi_tensor (sequence length 2)."""
    from transformers.models.mpt.modeling_mpt import build_mpt_alibi_tensor

    return -build_mpt_alibi_tensor(num_heads, 2)[:, 0, 0].double().numpy()


class HFMpt(ProbedHFRunner):
    name = "hf.mpt"
    system = "transformers.models.mpt.modeling_mpt.MptAttention"
    path = "alibi from build_mpt_alibi_tensor"
    backend = "eager"
    typed_system = "hf.mpt"
    description = "`MptAttention` (ALiBi, fused `Wqkv`, boolean mask True = masked)"
    features = ProbedHFRunner.features | {"alibi"}
    probe_attention = {"alibi": True, "bias": False}
    sets_scale = True

    refusals = self_attention_refusals(
        "MptAttention", head_dim="hidden_size // n_heads", fixed_bias=(
            False, "Wqkv and out_proj are nn.Linear(bias=False); MptConfig's no_bias reaches "
            "only the blocks' norms"))

    def model_limits(self, case):
        if not case.attention.alibi:
            return harness_limit(  # MptAttention takes position_bias=None
                "no attention.alibi: MptAttention adds position_bias on every call "
                "(MptModel always passes its alibi tensor)")
        return None

    def scale_limits(self, case):
        return None

    config_fields = {"d_model": "query_features", "n_heads": "num_heads"}
    call_template = "MptAttention(MptConfig({args}), layer_idx=0)"
    config_build = ConfigBuild("mpt", "MptConfig", "MptAttention", dropout=None)

    def config_call(self, case):
        call, cfg = super().config_call(case)
        s = case.attention.scale
        if s is None:
            return call, {**cfg, "softmax_scale": None}
        return (call.replace(")", f", attn_config={{'softmax_scale': {s!r}}})", 1),
                {**cfg, "softmax_scale": s})

    def build(self, torch, plan):
        module = self.config_build.build(plan, self.config_fields,
                                         attn_config={"softmax_scale": plan.get("softmax_scale")})
        # MptAttentionConfig types attn_pdrop as int (0.5 is rejected: "Field 'attn_pdrop'
        # expected int"); the module reads the attribute, so the probes set it there
        module.attn_dropout_p = plan["dropout"]
        return module

    def state(self, case, weights):
        return to_mpt(weights)

    native_slopes = staticmethod(slopes)

    def forward(self, module, x, mask, **kw):
        from transformers.models.mpt.modeling_mpt import build_mpt_alibi_tensor

        bias = build_mpt_alibi_tensor(module.n_heads, x.shape[-2]).to(x.dtype)
        if mask is not None and mask.is_floating_point():
            mask = mask.bool()  # as MptModel: create_causal_mask(...).to(torch.bool)
        return module(x, position_bias=bias, attention_mask=mask, **kw)[:2]

    # RawCall attention_function (attention_function.hooked): MPT computes attention inside
    # forward (masked_fill(attention_mask, finfo.min), softmax in float32; modeling_mpt.py)
    fused_projection, output_projection = "Wqkv", "out_proj"
    scale_attribute = "softmax_scale"
    neutral_words = "position_bias=None, the mask as bool (True = masked)"

    @staticmethod
    def fused_qkv(torch, q, k, v):
        """(B, H, T, d) each -> (B, T, 3 * H * d): forward's mixed_qkv.chunk(3, dim=2)."""
        b, _, t, _ = q.shape
        return torch.cat([a.transpose(1, 2).reshape(b, t, -1) for a in (q, k, v)], -1)

    @staticmethod
    def width(module) -> int:
        return module.hidden_size

    @staticmethod
    def neutral_forward(torch, module, x, mask):
        mask = mask.bool() if mask.is_floating_point() else ~mask  # True = masked
        return module(x, position_bias=None, attention_mask=mask)

    def notes(self, case, module):
        return ["position_bias = build_mpt_alibi_tensor(n_heads, S); the additive mask cast to "
                "bool as MptModel does (True = masked)"]

    sizes = SizeFacts("derived_from_width", f"{MPT_SOURCE}#L80", "Wqkv.weight",
                      "out x in (nn.Linear), [W_q; W_k; W_v]",
                      "one nn.Linear(E, 3E, bias=False) chunked in three", "4E^2")
