"""KV-cache decoding through `mx.fast.scaled_dot_product_attention` the way mlx-lm decodes
(#20): a prefill of P positions, then one position per step, each through a KV cache.

The pattern is mlx-lm's `KVCache` (mlx_lm/models/cache.py): two arrays, keys and values
(B, H_kv, S, d), preallocated in blocks of `step` positions (mlx-lm: 256; here 4, so the
4 + 3 decode of the cases crosses a block and the growth by `mx.concatenate` runs), each
update written into the block by slice assignment and the filled part returned.  Its
attention modules rotate q and k at `offset=cache.offset` (mx.fast.rope) before the update,
and pass the mask of `create_attention_mask`: "causal" for a chunk of several positions
(MLX's causal is lower-right aligned, ml-explore/mlx#2835, so a chunk after the cache sees
the cache), None for a single position.  The cache is the suite's own code after that
pattern (mlx-lm is not a dependency); the attention is MLX's.  mlx is imported inside the
functions only.
"""
from __future__ import annotations

from dataclasses import replace

from conformance.contract.runner import (
    NotExpressible, Observation, Translation, harness_limit)
from conformance.runners.mlx.common import (
    MlxRunner, SDPAAnswers, core_plan, explicit, import_mlx, to_f64, to_mx)
from conformance.runners.mlx.common import fused, positional, project, rope_scaling_refusal
from conformance.runners.mlx.kv_cache import (
    LAYOUT, STEP, BlockCache, DecodePlan, decode)

TENSORS = "two arrays (keys, values)"


# the ledger's raw calls go to the fused op every step calls, on one call (SDPAAnswers, as
# mlx.sdpa): its mask= and mask="causal" are the cache's prefill mask too; its single-call
# probes likewise (probe_translate); the cache's own axes through the decode
class MlxSDPACache(SDPAAnswers, MlxRunner):
    name = "mlx.sdpa.cache"
    decodes_only = True  # translate refuses a case without a decode section
    system = "mlx.core.fast.scaled_dot_product_attention"
    path = "KV cache (mlx-lm KVCache pattern)"
    description = ("`mx.fast.scaled_dot_product_attention` decoding through a KV cache as "
                   "mlx-lm does (preallocated blocks, `mask=\"causal\"` for the prefill, "
                   "none per step; RoPE at the cache offset)")
    no_parameters_label = "mlx sdpa"
    sets_scale = True
    features = MlxRunner.features | {"decode", "rope", "position_offset", "qk_norm", "sinks",
                                     "rope_scaling"}
    answers = SDPAAnswers.answers | {"step_is_causal", "step_mask"}
    # its probe_translate answers single calls with mlx.sdpa's op (ALiBi too)
    probe_takes = SDPAAnswers.probe_takes | {"cache_tensors", "float64", "alibi"}

    def translate(self, case):
        if case.decode is None:
            return NotExpressible(harness_limit("this runner decodes: the case has no decode "
                                                "section (the plain call is mlx.sdpa)"))
        if case.has_non_causal_mask:
            return NotExpressible(harness_limit(
                "a decode is causal self-attention with no other mask"))
        if rope_scaling_refusal(case):
            return NotExpressible(rope_scaling_refusal(case))
        d, core = case.decode, core_plan(case)
        before = core.before()
        rope = "; " + before.replace("offset=...", "offset=cache.offset") if before else ""
        return Translation(
            f"cache = KVCache() (step {STEP}){rope}; keys, values = cache.update_and_fetch(k, "
            f"v); prefill {d.prefill}: mx.fast.scaled_dot_product_attention("
            f"{replace(core, mask='causal').arguments()}); {d.steps} steps: the same with no "
            "mask", DecodePlan(replace(core, mask="none"), d.prefill))

    def probe_translate(self, case):
        """A ledger probe's case: a decode through the cache, or a single call of the fused
        op every step calls (as mlx.sdpa runs it; the matrix rows take decodes only)."""
        if case.decode is not None:
            return self.translate(case)
        if rope_scaling_refusal(case):
            return NotExpressible(rope_scaling_refusal(case))
        plan, call = core_plan(case), "mx.fast.scaled_dot_product_attention({})"
        before = plan.before()
        return Translation((f"{before}; " if before else "") + call.format(plan.arguments()),
                           plan)

    def run(self, case, translation, data):
        mx, _ = import_mlx()
        if not isinstance(translation.plan, DecodePlan):  # a probe's single call
            out = explicit(mx, case, data, translation.plan)[0]
            mx.eval(out)
            return Observation(output=to_f64(mx, out), parameters=None)
        dtype = case.inputs.dtype
        w = {n: to_mx(mx, a, dtype) for n, a in data.weights.arrays().items()}
        outs, cache = decode(mx, translation.plan, w, to_mx(mx, data.inputs.query, dtype),
                             case.inputs.position_offset)
        out = mx.concatenate(outs, axis=1)
        mx.eval(out)
        arrays = data.weights.arrays()
        return Observation(
            output=to_f64(mx, out), parameters=None,
            projection_parameters=sum(a.size for a in arrays.values()),
            weight_shapes={n: tuple(a.shape) for n, a in arrays.items()},
            notes=[f"prefill {translation.plan.prefill}, then {len(outs) - 1} steps through "
                   f"the cache: {LAYOUT}; backing key array "
                   + " -> ".join(str(s) for s in cache.shapes), "returns no attention weights"],
            extras={"cache_note": LAYOUT, "mask_polarity": "True = attend",
                    "cache_shapes": [list(s) for s in cache.shapes], "cache_tensors": TENSORS,
                    "cache_preallocated": True})

    def answer(self, case, data, raw):
        """step_is_causal: the decode with mask="causal" (or None) passed at every step too
        (what a user who passes the prefill's mask to every call gets); the rest as the
        fused op's single call (SDPAAnswers)."""
        if raw.argument == "step_mask":
            return _step_masked(case, data, raw.value), (
                "mx.fast.scaled_dot_product_attention(q, keys, values, mask=<bool (B, 1, 1, "
                "t + 1), True = attend>) at each step")
        if raw.argument != "step_is_causal":
            return super().answer(case, data, raw)
        mx, _ = import_mlx()
        dtype = case.inputs.dtype
        w = {n: to_mx(mx, a, dtype) for n, a in data.weights.arrays().items()}
        plan = self.translate(case).plan
        outs, _ = decode(mx, plan, w, to_mx(mx, data.inputs.query, dtype),
                         case.inputs.position_offset,
                         step_mask="causal" if raw.value else None)
        out = mx.concatenate(outs, axis=1)
        mx.eval(out)
        return to_f64(mx, out), (f"mask={'causal' if raw.value else None!r} "
                                 "(ml-explore/mlx#2835)")

    def conventions(self):
        """The fused op's API (mlx.sdpa's observations: the function every step calls); the
        ledger asks the rest, the cache's axes and a fully masked step through the decode
        (step_mask)."""
        from conformance.runners.mlx.observations import sdpa_cells

        return sdpa_cells()


def _step_masked(case, data, nan=None):
    """The decode as `decode` runs it (kv_cache.py), each step t given the case's mask row t
    over the cache's keys as mask= (True = attend); `nan` ({'nan': 'key' or 'value',
    'item', 'slot'}): NaN written into that cached array after the prefill."""
    import numpy as np

    mx, _ = import_mlx()
    dtype, rows, p = case.inputs.dtype, data.inputs.allowed, case.decode.prefill
    w = {n: to_mx(mx, a, dtype) for n, a in data.weights.arrays().items()}
    plan = DecodePlan(replace(core_plan(case), mask="none"), p)
    x = to_mx(mx, data.inputs.query, dtype)
    cache, outs = BlockCache(mx, plan.step), []
    for t in [0] + list(range(p, x.shape[1])):
        xt = x[:, t:t + (p if t == 0 else 1)]
        q, k, v = (project(mx, xt, w[f"w{n}"], w.get(f"b{n}")) for n in "qkv")
        q, k = positional(mx, plan.core, q, k, w, (cache.offset,) * 2)
        k, v = cache.update_and_fetch(k, v)
        mask = "causal" if t == 0 else mx.array(np.ascontiguousarray(rows[:, None, t:t + 1,
                                                                          :t + 1]))
        heads = fused(mx, plan.core, q, k, v, w, mask)
        out = mx.einsum("bhtd,hde->bte", heads, w["wo"])
        outs.append(out + w["bo"] if "bo" in w else out)
        if t == 0 and nan:
            held = cache.keys if nan["nan"] == "key" else cache.values
            held[nan["item"], :, nan["slot"]] = float("nan")
    out = mx.concatenate(outs, axis=1)
    mx.eval(out)
    return to_f64(mx, out)
