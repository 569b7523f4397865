"""mlx-lm's DeepSeek-V3 attention (`mlx_lm.models.deepseek_v3.DeepseekV3Attention`):
multi-head latent attention with the key up-projection and the value projection kept as
per-head factors (`embed_q`, `unembed_out`: MultiLinear, mlx_lm/models/mla.py).

DEEPSEEK (mlx_lm/models/deepseek_v3.py) #L52-L117 builds it from ModelArgs: q_a_proj ->
q_a_layernorm -> q_b_proj (or q_proj), kv_a_proj_with_mqa -> [latent | k_pe], kv_a_layernorm
(nn.RMSNorm eps 1e-6), embed_q (H, kv_lora_rank, qk_nope_head_dim), unembed_out (H,
v_head_dim, kv_lora_rank).  __call__ (#L118-L168) splits each query head as [nope | rope]
(#L131), rotates q_pe and the one-head k_pe with `initialize_rope(qk_rope_head_dim,
traditional=True)` (#L109-L115: interleaved pairs, no other setting) at `cache.offset`, and
adds the rope scores (q_pe * scale) @ k_pe^T, masked with finfo.min where the boolean mask
is False, as the additive mask of the fused attention over the nope dims.  With more than
one query (#L157-L159) the keys c @ embed_q and values unembed_out(c) are materialised per
head; with ONE query (#L154-L156, #L164-L165) the query is folded into the latent
(embed_q(q_nope)) and the output unfolded after (unembed_out): the absorbed form, which a
decode case's single-position steps take.  The scale is qk_head_dim**-0.5, times
yarn_get_mscale(factor, mscale_all_dim) ** 2 where rope_scaling has mscale_all_dim
(#L100-L107, any rope type); YarnRoPE multiplies the rotated dims by mscale /
mscale_all_dim's ratio (rope_utils.py#L169-L185).

Positions reach the module only through `cache.offset`: the runner hands it a real KVCache
(mlx_lm/models/cache.py#L339-L369) already holding position_offset zero latents, hidden by
the boolean mask it passes, so the case's queries and keys sit at their positions.  The
canonical factors load through convert/mla.py's absorbed layout.  mlx and mlx_lm are
imported inside functions only.
"""
from __future__ import annotations

import numpy as np

from conformance.contract.runner import Count, NotExpressible, Observation, Translation
from conformance.runners.mlx.common import MlxRunner, held_dtype, import_mlx, to_f64, to_mx

DEEPSEEK = "https://github.com/ml-explore/mlx-lm/blob/v0.32.2/mlx_lm/models/deepseek_v3.py"
ROPE_UTILS = "https://github.com/ml-explore/mlx-lm/blob/v0.32.2/mlx_lm/models/rope_utils.py"
SYSTEM = "mlx_lm.models.deepseek_v3.DeepseekV3Attention"


def limits(case) -> str | None:
    """Why mlx-lm's DeepseekV3Attention cannot compute the case, or None."""
    a, i = case.attention, case.inputs
    if a.mla is None:
        return ("no attention.mla: DeepseekV3Attention is multi-head latent attention on every "
                f"call (kv_a_proj_with_mqa, embed_q, unembed_out; {DEEPSEEK}#L70-L93)")
    if not i.self_attention:
        return "cross-attention: DeepseekV3Attention.__call__(x, mask, cache) projects one input"
    if a.rope.style != "interleaved":
        return (f"rope.style={a.rope.style}: initialize_rope(..., traditional=True) rotates "
                f"interleaved pairs, no setting ({DEEPSEEK}#L109-L115)")
    if a.output_features != a.query_features:
        return f"output_features != hidden_size: o_proj maps back to hidden_size ({DEEPSEEK}#L95)"
    if a.scale is not None and abs(a.scale - a.qk_head_dim ** -0.5) > 1e-12 * a.scale:
        return f"scale={a.scale:g}: self.scale = q_head_dim**-0.5 ({DEEPSEEK}#L66)"
    return scaling_limits(case)


def scaling_limits(case) -> str | None:
    s = case.attention.rope.scaling
    if s is None:
        return None
    if s.kind == "yarn" and s.truncate is False:
        return ("rope.scaling.truncate=false: YarnRoPE floors and ceils the ramp edges "
                f"(yarn_find_correction_range, {ROPE_UTILS}#L150-L153), no setting")
    if s.attention_factor is not None:
        return ("rope.scaling.attention_factor: mlx-lm's rope classes take no attention_factor "
                f"(initialize_rope's keys, {ROPE_UTILS}#L326-L346)")
    if s.magnitude == "softmax_scale" and s.kind != "yarn":
        return (f"{s.kind} with its magnitude on the softmax scale: only mscale_all_dim's "
                f"factor lands there ({DEEPSEEK}#L100-L107)")
    if s.kind == "yarn" and s.magnitude != "softmax_scale" and s.mscale_all_dim:
        return (f"rope.scaling.mscale_all_dim={s.mscale_all_dim:g} with the magnitude on cos and "
                "sin: the attention multiplies its scale by yarn_get_mscale(factor, "
                f"mscale_all_dim) ** 2 whenever it is set ({DEEPSEEK}#L100-L107)")
    return None


def rope_scaling(case) -> dict | None:
    """ModelArgs.rope_scaling for the case's scaling (initialize_rope's keys)."""
    s = case.attention.rope.scaling
    if s is None:
        return None
    cfg = {"type": s.kind, "factor": float(s.factor)}
    if s.original_max_positions is not None:
        cfg["original_max_position_embeddings"] = int(s.original_max_positions)
    if s.kind == "yarn":
        cfg.update(beta_fast=float(s.beta_fast), beta_slow=float(s.beta_slow))
        if s.magnitude == "softmax_scale":
            m = float(s.mscale_all_dim or s.mscale or 1.0)
            cfg.update(mscale=m, mscale_all_dim=m)
        elif s.mscale is not None:
            cfg["mscale"] = float(s.mscale)
    elif s.kind == "llama3":
        cfg.update(low_freq_factor=float(s.low_freq_factor),
                   high_freq_factor=float(s.high_freq_factor))
    elif s.kind == "longrope":
        cfg.update(short_factor=list(s.short_factor), long_factor=list(s.long_factor))
    return cfg


def model_args(case) -> dict:
    a, m, s = case.attention, case.attention.mla, case.attention.rope.scaling
    orig = None if s is None else s.original_max_positions
    length = int(round(orig * s.factor)) if orig else 163840
    return {"hidden_size": a.query_features, "num_attention_heads": a.num_heads,
            "num_key_value_heads": a.num_kv_heads, "q_lora_rank": m.q_lora_rank,
            "kv_lora_rank": m.kv_lora_rank, "qk_rope_head_dim": m.qk_rope_head_dim,
            "qk_nope_head_dim": m.qk_nope_head_dim, "v_head_dim": a.v_head_dim,
            "rope_theta": float(a.rope.base), "rope_scaling": rope_scaling(case),
            "max_position_embeddings": (s.original_max_positions if s is not None
                                        and s.kind == "dynamic" else length),
            "attention_bias": a.bias}


class MlxLmDeepseekV3(MlxRunner):
    name = "mlx_lm.deepseek_v3"
    typed_system = "hf.deepseek_v3"  # ModelArgs reads DeepseekV3Config's words
    system = SYSTEM
    path = "absorbed at single-query steps (embed_q / unembed_out), materialised otherwise"
    requires = ("mlx", "mlx_lm")
    description = ("mlx-lm's DeepSeek-V3 `DeepseekV3Attention` (MLA: `embed_q` / `unembed_out`, "
                   "absorbed at single-query steps; interleaved rope on the last "
                   "qk_rope_head_dim dims), positions from a `KVCache` offset")
    features = MlxRunner.features | {"rope", "position_offset", "mla", "rope_scaling", "decode"}
    probe_needs = {"bias": False, "rope": {"style": "interleaved", "rotary_dim": 4},
                   "mla": {"kv_lora_rank": 4}}

    def translate(self, case):
        why = limits(case)
        if why:
            return NotExpressible(why)
        kw = ", ".join(f"{k}={v!r}" for k, v in model_args(case).items())
        p0, d = case.inputs.position_offset, case.decode
        steps = "" if d is None else f"; prefill {d.prefill}, then {d.steps} single-query steps"
        return Translation(f"DeepseekV3Attention(ModelArgs({kw}))(x, mask=<boolean>, cache="
                           f"KVCache() holding {p0} hidden positions{steps})", {})

    def layer(self, case):
        from mlx_lm.models import deepseek_v3

        return deepseek_v3.DeepseekV3Attention(deepseek_v3.ModelArgs(**model_args(case)))

    def count(self, case):
        from mlx.utils import tree_flatten

        shapes = {n: tuple(v.shape) for n, v in tree_flatten(self.layer(case).parameters())}
        return Count(sum(int(np.prod(s)) for s in shapes.values()), shapes,
                     "mlx parameter tree (lazy arrays, never evaluated)")

    def run(self, case, translation, data):
        mx, _ = import_mlx()
        from mlx.utils import tree_flatten
        from mlx_lm.models.cache import KVCache

        from conformance.convert.mla import to_deepseek_v3

        dtype, i, m = case.inputs.dtype, case.inputs, case.attention.mla
        layer = self.layer(case)
        layer.set_dtype(getattr(mx, dtype))
        layer.load_weights([(n, to_mx(mx, a, dtype)) for n, a in
                            to_deepseek_v3(data.weights, "absorbed").items()], strict=True)
        cache, p0, b = KVCache(), i.position_offset, i.batch
        if p0:  # the positions before the case's, held and hidden (the offset is the position)
            cache.update_and_fetch(mx.zeros((b, 1, p0, m.kv_lora_rank), getattr(mx, dtype)),
                                   mx.zeros((b, 1, p0, m.qk_rope_head_dim), getattr(mx, dtype)))
        allowed = (np.ones((b, i.query_len, i.key_len), bool) if data.inputs.allowed is None
                   else data.inputs.allowed)
        x = to_mx(mx, data.inputs.query, dtype)
        spans = [(0, i.query_len)] if case.decode is None else [(0, case.decode.prefill)] + [
            (t, t + 1) for t in range(case.decode.prefill, i.query_len)]
        outs = []
        for a, z in spans:  # each call's keys: the hidden ones, then the case's up to z
            mask = np.zeros((b, 1, z - a, p0 + z), bool)
            mask[:, 0, :, p0:] = allowed[:, a:z, :z]
            outs.append(layer(x[:, a:z], mask=mx.array(mask), cache=cache))
        out = mx.concatenate(outs, axis=1)
        mx.eval(out)
        shapes = {n: tuple(v.shape) for n, v in tree_flatten(layer.parameters())}
        forms = "materialised" if case.decode is None else "prefill materialised, steps absorbed"
        return Observation(
            output=to_f64(mx, out), parameters=sum(int(np.prod(s)) for s in shapes.values()),
            weight_shapes=shapes,
            notes=[f"{forms} ({DEEPSEEK}#L154-L165); scale {layer.scale:.6g}; rope "
                   f"{type(layer.rope).__name__} traditional=True on the last "
                   f"{m.qk_rope_head_dim} dims; KVCache offset {p0} before the case's keys "
                   "(hidden by the mask)", "returns no attention weights"],
            extras={"output_dtype": held_dtype(out), "mask": "boolean (B, 1, T, S)"})
