"""HuggingFace BLOOM: `BloomAttention`, ALiBi.

BloomModel computes the ALiBi tensor once per forward and hands it to every
attention module: without padding `_get_alibi_slopes(n_head) * arange(S)`,
repeated over the batch, (B * H, 1, S); the module adds it to the scaled scores
with `baddbmm` (slope * key position: the paper's slope * (key - query) plus a
constant per row, which the softmax ignores).  The fused `query_key_value`
nn.Linear(E, 3E) (rows per head [q_h; k_h; v_h], the GPT-NeoX layout) and
`dense` always hold biases; head_dim = hidden_size // n_head; scale
1/sqrt(head_dim).  The module adds `residual` to its output (dropout_add): the
runner passes zeros.  The causal mask is BloomModel's; the module adds the
additive (B, 1, T, S) mask it is given.
"""
from __future__ import annotations

import numpy as np

from conformance.contract.runner import harness_limit
from conformance.convert.hf import to_gpt_neox
from conformance.runners.hf.common import SOURCE, SizeFacts
from conformance.runners.hf.declared import ConfigBuild, self_attention_refusals
from conformance.runners.hf.probed import ProbedHFRunner

BLOOM_SOURCE = SOURCE + "bloom/modeling_bloom.py"


def slopes(num_heads: int) -> np.ndarray:
    """BLOOM's own slopes (`_get_alibi_slopes`), for the ledger's evidence."""
    import torch  # noqa: F401  (transformers' BLOOM module needs it)
    from transformers.models.bloom.modeling_bloom import _get_alibi_slopes

    return _get_alibi_slopes(num_heads, "cpu").double().numpy()


class HFBloom(ProbedHFRunner):
    name = "hf.bloom"
    system = "transformers.models.bloom.modeling_bloom.BloomAttention"
    path = "alibi from _get_alibi_slopes (BloomModel's no-padding path)"
    backend = "eager"
    typed_system = "hf.bloom"
    description = "`BloomAttention` (ALiBi, fused per-head qkv)"
    features = ProbedHFRunner.features | {"alibi"}
    probe_attention = {"alibi": True}

    refusals = self_attention_refusals(
        "BloomAttention", head_dim="hidden_size // num_heads",
        scaling="inv_norm_factor = 1 / sqrt(head_dim)", fixed_bias=(
            True, "query_key_value and dense are nn.Linear(bias=True); BloomConfig has no switch"))

    def model_limits(self, case):
        if not case.attention.alibi:
            return harness_limit(  # BloomAttention adds the alibi tensor it is passed
                "no attention.alibi: BloomAttention adds the alibi tensor on every call "
                "(BloomModel always builds one; it is BLOOM's only position signal)")
        return None

    config_fields = {"hidden_size": "query_features", "n_head": "num_heads"}
    call_template = "BloomAttention(BloomConfig({args}), layer_idx=0)"
    config_build = ConfigBuild("bloom", "BloomConfig", "BloomAttention",
                               dropout="attention_dropout", residual_dropout="hidden_dropout")

    def state(self, case, weights):
        return to_gpt_neox(weights)

    native_slopes = staticmethod(slopes)

    def forward(self, module, x, mask, **kw):
        import torch
        from transformers.models.bloom.modeling_bloom import _get_alibi_slopes

        cache = kw.pop("cache", None)  # BloomAttention.forward takes layer_past
        past = 0 if cache is None else cache.get_seq_length()
        b, s = x.shape[0], past + x.shape[-2]
        alibi = _get_alibi_slopes(module.num_heads, x.device)[:, None, None] * torch.arange(s)
        alibi = alibi.repeat(b, 1, 1).to(x.dtype)
        if cache is not None:
            kw.update(layer_past=cache, use_cache=True)
        return module(x, residual=torch.zeros_like(x), alibi=alibi, attention_mask=mask,
                      output_attentions=True, **kw)[:2]

    # RawCall attention_function (attention_function.hooked): BLOOM computes attention
    # inside forward (alibi.baddbmm, + attention_mask, softmax in float32; modeling_bloom.py)
    fused_projection, output_projection = "query_key_value", "dense"
    scale_attribute = "inv_norm_factor"
    neutral_words = "alibi = zeros (B * H, 1, S), residual = zeros"

    @staticmethod
    def fused_qkv(torch, q, k, v):
        """(B, H, T, d) each -> (B, T, H * 3 * d): _reshape's view (B, T, H, 3, d)."""
        b, _, t, _ = q.shape
        return torch.stack([a.transpose(1, 2) for a in (q, k, v)], 3).reshape(b, t, -1)

    @staticmethod
    def width(module) -> int:
        return module.hidden_size

    @staticmethod
    def neutral_forward(torch, module, x, mask):
        b, s = x.shape[0], mask.shape[-1]
        alibi = torch.zeros((b * module.num_heads, 1, s), dtype=x.dtype)
        return module(x, residual=torch.zeros_like(x), alibi=alibi, attention_mask=mask)

    def notes(self, case, module):
        return ["alibi = _get_alibi_slopes(n_head) * arange(S), as BloomModel builds it "
                "without padding; residual = zeros (the module adds it to its output)"]

    sizes = SizeFacts("derived_from_width", f"{BLOOM_SOURCE}#L150", "query_key_value.weight",
                      "out x in (nn.Linear), rows per head [q_h; k_h; v_h]",
                      "one nn.Linear(E, 3E) viewed as (B, T, H, 3, head_dim)",
                      "4E^2 + 4E")
