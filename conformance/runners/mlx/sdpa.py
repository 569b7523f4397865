"""`mlx.core.fast.scaled_dot_product_attention` with explicit projections, and the
case features through MLX's own ops: `mx.fast.rope` (half-split, or
interleaved with `traditional=True`; `dims` partial; `offset`), QK-norm with
`mx.fast.rms_norm` / `layer_norm`, ALiBi with `nn.ALiBi.create_alibi_matrix` as an
additive mask, grouped-query heads passed untiled, attention sinks through the op's own
`sinks=` argument (one logit per head), and a sliding window (mask.window) as a boolean
mask: MLX has no window argument (common.py states the facts).

Why a row of its own: it is what MLX users (mlx-lm's model files) write, the
fused op holds no parameters and takes any head width, and its grouped-query
mapping, rotary pairing and ALiBi slopes are MLX's, not a wrapper's.  Its
"causal" mask is lower-right aligned; an upper-left diagonal with T != S goes in
as a boolean mask (True = attend).  A float64 case runs: the op computes its
softmax in float32 (its docstring), and the expectations file says so.
"""
from __future__ import annotations

from conformance.contract.runner import Count, NotExpressible, Observation, Translation
from conformance.runners.mlx.common import (
    MlxRunner, SDPAAnswers, core_plan, explicit, held_dtype, import_mlx, rope_scaling_refusal,
    to_f64)


class MlxSDPA(SDPAAnswers, MlxRunner):
    name = "mlx.sdpa"
    system = "mlx.core.fast.scaled_dot_product_attention"
    description = ("`mx.fast.scaled_dot_product_attention` with explicit projections, "
                   "`mx.fast.rope`, `nn.ALiBi`, `mx.fast.rms_norm` (GQA untiled), its "
                   "`sinks=`; windows as a boolean mask")
    no_parameters_label = "mlx sdpa"
    sets_scale = True  # scale= is a required argument
    features = MlxRunner.features | {"rope", "position_offset", "qk_norm", "alibi", "sinks",
                                     "window", "rope_scaling"}

    def translate(self, case):
        i = case.inputs
        scaled = rope_scaling_refusal(case)
        if scaled:
            return NotExpressible(scaled)
        if case.attention.alibi and i.key_position_offset > i.position_offset:
            return NotExpressible(
                f"ALiBi with key positions starting at {i.key_position_offset} after the "
                f"queries' {i.position_offset}: nn.ALiBi.create_alibi_matrix(T + offset, S, "
                "H, offset) places keys at 0 .. S - 1 and queries at offset .. offset + T - 1 "
                "(offset >= 0)")
        plan = core_plan(case)
        before = plan.before()
        call = f"mx.fast.scaled_dot_product_attention({plan.arguments()})"
        return Translation(f"{before}; {call}" if before else call, plan)

    def count(self, case):
        from conformance.case.model import sizes_counts

        return Count(None, method="formula (the fused op holds no parameters; the "
                     "projections passed in)", projection_parameters=sizes_counts(
                         case.attention, case.inputs)["weights"])

    def run(self, case, translation, data):
        mx, _ = import_mlx()
        out, w = explicit(mx, case, data, translation.plan)
        mx.eval(out)
        held = held_dtype(out)
        notes = ["holds no parameters: the canonical projections are passed as arrays",
                 "returns no attention weights"]
        if held != case.inputs.dtype:
            notes.append(f"output computed in {held}, not the requested {case.inputs.dtype}")
        if case.mask.window is not None:
            notes.append("mask.window passed as a boolean mask (True = attend): MLX's fused "
                         "op has no window argument")
        if case.grouped:
            notes.append(f"k, v passed with {case.attention.num_kv_heads} heads, not tiled")
        return Observation(
            output=to_f64(mx, out), parameters=None,
            projection_parameters=sum(a.size for a in data.weights.arrays().values()),
            weight_shapes={n: tuple(a.shape) for n, a in data.weights.arrays().items()},
            notes=notes, extras={"mask_polarity": "True = attend", "output_dtype": held,
                                 "mask_passed": "boolean mask" if translation.plan.mask !=
                                 "additive" else f"additive {case.mask.fill or '-inf'} mask "
                                 f"in {case.inputs.dtype}"})

    def conventions(self):
        """What the op's API shows (observations.py); the ledger asks the rest."""
        from conformance.runners.mlx.observations import sdpa_cells

        return sdpa_cells()
