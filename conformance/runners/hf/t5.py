"""HuggingFace T5: `T5Attention`, with its relative position bias where the case asks.

T5Config's `d_kv` is the per-head size, independent of d_model / num_heads
(q, k, v: nn.Linear(d_model, num_heads * d_kv, bias=False); o: nn.Linear(
num_heads * d_kv, d_model, bias=False)).  No biases, and NO 1/sqrt(d) scaling
(`self.scaling = 1.0`: T5 folds it into the initialisation of W_q), so a case
runs here only with bias false and `attention.scale: 1.0`.  A case without
attention.relative_bias builds has_relative_attention_bias=False (the module adds a zero
position_bias); one with it builds has_relative_attention_bias=True from T5Config's
relative_attention_num_buckets, relative_attention_max_distance and is_decoder (T5's
decoder buckets are unidirectional: compute_bias passes bidirectional=(not
self.is_decoder), modeling_t5.py#L274), the canonical table loaded as
relative_attention_bias.weight (nn.Embedding(num_buckets, n_heads)).  The module computes
the bias itself from positions 0..T-1 against 0..S-1 (compute_bias, modeling_t5.py#L265):
the case's positions differ from those by one offset (T5Attention takes self-attention
only here, and self-attention's keys sit at its queries' positions), and the bias depends
on their differences alone.
Masks: T5's eager path adds the 4-D mask to the scores.
"""
from __future__ import annotations

from conformance.runners.hf.common import SOURCE, SizeFacts
from conformance.runners.hf.declared import MASK_FILL, Refusals
from conformance.runners.hf.probed import ProbedHFRunner

T5_SOURCE = SOURCE + "t5/modeling_t5.py"
T5_SDPA_SOURCE = ("https://github.com/huggingface/transformers/blob/v5.24.0/src/transformers/"
                  "integrations/sdpa_attention.py#L69")


class HFT5(ProbedHFRunner):
    name = "hf.t5"
    system = "transformers.models.t5.modeling_t5.T5Attention"
    path = "has_relative_attention_bias=False"
    backend = "eager"
    typed_system = "hf.t5"
    # the runner builds "eager"; a model built from its config gets "sdpa", which reads a
    # causal switch eager ignores: the ledger measures both (conventions/probes/choices.py)
    harness_choices = {"attn_implementation": ("eager", "sdpa")}
    # under sdpa too the masked scores get finfo(dtype).min: create_position_bias_mask makes
    # the position bias the mask, torch.where(mask, position_bias, min_dtype)
    documented_fill = property(lambda self: MASK_FILL if self.attn_implementation == "eager"
                               else ("finfo_min", T5_SDPA_SOURCE))
    description = "`T5Attention` (`d_kv` per head, no scale)"
    probe_attention = {"bias": False, "scale": 1.0}  # the probes' oracle: T5's own scale
    alibi_na = ("T5Attention.forward takes position_bias, T5's learned relative bias, not "
                "ALiBi: compute_bias looks it up in relative_attention_bias = "
                "nn.Embedding(relative_attention_num_buckets, n_heads) by bucketed distance "
                "(modeling_t5.py, T5Attention.compute_bias); there are no slopes")
    sets_scale = True  # by having none: expressible exactly when the case asks for 1.0

    refusals = Refusals("T5Attention takes one key_value_states", fixed_bias=(
        False, "T5Attention's q, k, v and o are nn.Linear(..., bias=False); T5 has no "
        "projection biases"))
    linear_names = ("q", "k", "v", "o")
    features = ProbedHFRunner.features | {"relative_bias", "position_offset"}

    def model_limits(self, case):
        rb = case.attention.relative_bias
        if rb is not None and rb.relative_position != "key_minus_query":
            return (f"relative_bias.relative_position={rb.relative_position}: T5Attention."
                    "compute_bias buckets memory_position - context_position (key - query, "
                    f"{T5_SOURCE}#L271) and has no setting for the other sign")
        return None

    def scale_limits(self, case):
        scale = case.attention.scale
        return (None if scale == 1.0 else
                f"scale {'1/sqrt(d_k) (the default)' if scale is None else scale}: "
                "T5Attention does not scale the scores (self.scaling = 1.0; T5 folds "
                "1/sqrt(d) into W_q's initialisation), and no config field sets it")

    config_fields = {"d_model": "query_features", "num_heads": "num_heads", "d_kv": "qk_head_dim"}
    call_template = "T5Attention(T5Config({args}), has_relative_attention_bias=False)"

    def config_call(self, case):
        call, plan = super().config_call(case)
        rb = case.attention.relative_bias
        if rb is None:
            return call, plan
        bucketed = {"relative_attention_num_buckets": rb.num_buckets,
                    "relative_attention_max_distance": rb.max_distance,
                    "is_decoder": not rb.bidirectional}
        args = ", ".join(f"{k}={v}" for k, v in {**plan, **bucketed}.items())
        return (f"T5Attention(T5Config({args}), has_relative_attention_bias=True)",
                {**plan, **bucketed})

    def build(self, torch, plan):
        from transformers import T5Config
        from transformers.models.t5.modeling_t5 import T5Attention

        bucketed = {k: plan[k] for k in ("relative_attention_num_buckets",
                                         "relative_attention_max_distance", "is_decoder")
                    if k in plan}
        config = T5Config(d_model=plan["d_model"], num_heads=plan["num_heads"],
                          d_kv=plan["d_kv"], dropout_rate=plan["dropout"],
                          attn_implementation=plan["attn_implementation"], **bucketed)
        return T5Attention(config, has_relative_attention_bias=bool(bucketed))

    def state(self, case, weights):
        state = super().state(case, weights)
        if case.attention.relative_bias is not None:  # nn.Embedding: (num_buckets, n_heads)
            state["relative_attention_bias.weight"] = weights.relative_bias
        return state


    def forward(self, module, x, mask, **kw):
        out, _, weights = module(x, mask=mask, **kw)
        return out, weights

    def notes(self, case, module):
        if case.attention.relative_bias is None:
            return ["has_relative_attention_bias=False: no relative position bias (a zero "
                    "position_bias is added); scores are not scaled (scaling = 1.0)"]
        return ["has_relative_attention_bias=True: the canonical (num_buckets, H) table as "
                "relative_attention_bias.weight, position_bias computed by the module; "
                "scores are not scaled (scaling = 1.0)"]

    sizes = SizeFacts("per_head", f"{T5_SOURCE}#L193", "q.weight",
                      "out x in (nn.Linear, bias=False)",
                      "q, k, v, o are nn.Linear without bias: (out, in)", "4 H d_kv E (no biases)",
                      "probe E=8, H=2, d_kv=4: {n}")
    def size_evidence(self, case, module, shape):
        return (f"T5Config(d_model=8, num_heads=2, d_kv={case.attention.qk_head_dim}): "
                f"q.weight {shape}: d_kv is per head, any value")
