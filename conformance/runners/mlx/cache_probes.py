"""cache_causal_alignment and cache_layout of mlx.sdpa.cache (#20), through the decode the
runner runs (sdpa_cache.decode: mlx-lm's KVCache pattern): a prefill of P = 3 with
mask="causal", then one step at position 3.  The step is run as mlx-lm runs it (mask None)
and with mask="causal" (what a user who passes the prefill's mask to every call gets:
MLX's "causal" is lower-right aligned, so it sees the whole cache, where torch's
is_causal=True sees key 0 only; quoted as a causal_flag fact, contract/cache_probes.py).
The layout is read from the backing key array after the prefill and after the step.  mlx
is imported inside the functions only.
"""
from __future__ import annotations

from dataclasses import replace

from conformance.contract import cache_probes as cp
from conformance.contract.runner import Convention
from conformance.oracle.canonical import case_data
from conformance.runners.mlx.common import SDPA_DOC, core_plan, import_mlx, to_f64, to_mx
from conformance.runners.mlx.kv_cache import LAYOUT, MLX_LM, DecodePlan, decode

WHAT = ("mx.fast.scaled_dot_product_attention over an mlx-lm-style KVCache (block "
        "{step}, update_and_fetch)")


def _run(case, step_mask, dtype: str = "float32"):
    mx, _ = import_mlx()
    data = case_data(case)
    w = {n: to_mx(mx, a, dtype) for n, a in data.weights.arrays().items()}
    plan = DecodePlan(replace(core_plan(case), mask="none"), case.inputs.query_len - 1)
    outs, cache = decode(mx, plan, w, to_mx(mx, data.inputs.query, dtype),
                         step_mask=step_mask)
    return [to_f64(mx, o) for o in outs], cache, plan


def float64_cell() -> Convention:
    """A float64 decode (prefill 3, one step) against the float64 oracle: the runner's only
    kind of case, run in float64, settles its float64 arithmetic."""
    import numpy as np

    from conformance.contract.probing import probe_case
    from conformance.oracle.reference import attention

    case = probe_case("cache-float64", mask={"causal": "upper_left"}, inputs={
        "self_attention": True, "query_len": 4, "key_len": 4, "dtype": "float64"})
    outs = _run(case, None, "float64")[0]
    d = float(np.max(np.abs(np.concatenate(outs, 1) - attention(case).output)))
    return Convention("float64_compute", "float64" if d <= 1e-12 else "below_float64",
                      f"probe_case {case.id}: a float64 prefill of 3 and one step, max |output "
                      f"- float64 oracle| {d:.1e} (float64 means <= 1e-12; 'the softmax "
                      "operation is performed in float32 regardless of the input precision')",
                      documented="below_float64", documented_source=SDPA_DOC)


def cache_cells() -> list[Convention]:
    case = cp.decode_case()
    outs, cache, plan = _run(case, None)
    what = WHAT.format(step=plan.step)
    align = cp.cache_alignment(case, outs[-1], f"{what}, step mask None (mlx-lm's "
                               "create_attention_mask for one position)", outs[0],
                               documented="lower_right", documented_source=SDPA_DOC)
    align = cp.with_fact(align, cp.flag_fact(case, _run(case, "causal")[0][-1],
                                             "mask='causal'") + " (ml-explore/mlx#2835)")
    layout = Convention("cache_layout", cp.layout_words(
        case, cache.shapes, "two arrays (keys, values)", preallocated=True),
        f"{what}: backing key array {' -> '.join(str(s) for s in cache.shapes)} after the "
        f"prefill and the step; {LAYOUT}", documented_source=MLX_LM)
    return [align, layout, float64_cell()]
