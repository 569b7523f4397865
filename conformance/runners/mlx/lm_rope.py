"""mlx-lm's own rotary classes on q and k in front of `mx.fast.scaled_dot_product_attention`:
what mlx-lm's model files run for a config's `rope_scaling`.

mlx-lm 0.32.2 builds every model's rotation with `mlx_lm.models.rope_utils.initialize_rope(
dims, base, traditional, scaling_config, max_position_embeddings)` (its llama.py Attention:
`initialize_rope(head_dim, rope_theta, rope_traditional, rope_scaling,
max_position_embeddings)`), applies it to the projected queries and keys at the cache offset
and calls the fused op with `scale = head_dim**-0.5`.  The runner does the same on the
canonical projections, with the case's scaling as the config.json `rope_scaling` a user
loads (transformers' rope_parameters words, runners/_rope_config.py), and the scale passed
through `rope_utils.apply_yarn_mscale` as bailing_moe_v3.py does (deepseek_v3.py inlines
it): a no-op without `mscale_all_dim`, so Llama's attention on every config Llama ships.
What each type computes (rope_utils.py, ROPE_UTILS below):
- linear: nn.RoPE(scale=1 / factor) (#L305-L307);
- dynamic: DynamicNTKScalingRoPE grows the base for the length offset + L of the tensor it
  rotates, at least max_position_embeddings (#L258-L271): the case's original length;
- llama3: Llama3RoPE's three bands by wavelength (#L72-L123);
- yarn: YarnRoPE, its ramp edges always floored and ceiled (#L150-L153: the config's
  `truncate` is not read), the factor get_mscale(factor, mscale) / get_mscale(factor,
  mscale_all_dim) multiplied into the rotated dims of q and k (#L169, #L183-L185);
- longrope: SuScaledRoPE divides by `long_factor` at every length (#L49-L50: `short_factor`
  is not read), multiplies the rotated dims by sqrt(1 + ln(max / original) / ln(original))
  and rotates half-split whatever `traditional` says (#L61-L69).
The ledger reads which of these the outputs match; the runner only builds and calls.
mlx and mlx_lm are imported inside functions only.
"""
from __future__ import annotations

from dataclasses import dataclass

from conformance.contract.runner import (
    NotExpressible, Observation, Translation, harness_limit)
from conformance.runners._rope_config import hf_rope
from conformance.runners.mlx.common import (
    MlxRunner, core_plan, fused, held_dtype, import_mlx, mask_array, project, to_f64, to_mx)
from conformance.runners.mlx.sdpa import MlxSDPA

ROPE_UTILS = ("https://github.com/ml-explore/mlx-lm/blob/v0.32.2/mlx_lm/models/"
              "rope_utils.py")
LLAMA = "https://github.com/ml-explore/mlx-lm/blob/v0.32.2/mlx_lm/models/llama.py#L55-L72"


@dataclass(frozen=True)
class LmRopePlan:
    """What initialize_rope and the attention are given for one case."""

    dims: int  # the rotated dims (initialize_rope's dims)
    base: float
    traditional: bool  # interleaved pairs
    scaling_config: dict | None  # the config's rope_scaling
    max_position_embeddings: int | None
    offsets: tuple[int, int]  # rope offset= of queries and keys

    def call(self) -> str:
        return (f"rope = initialize_rope({self.dims}, {self.base:g}, {self.traditional}, "
                f"{self.scaling_config!r}, {self.max_position_embeddings}); q = rope(q, "
                f"offset={self.offsets[0]}); k = rope(k, offset={self.offsets[1]})")


def lm_rope_limits(case) -> str | None:
    """What no config of mlx-lm's rope classes says: a place for the magnitude the config's
    words do not give."""
    s = case.attention.rope.scaling
    if s is None:
        return None
    if s.kind == "longrope" and case.attention.rope.style == "interleaved":
        return ("rope.style=interleaved with longrope: SuScaledRoPE calls mx.fast.rope("
                f"traditional=False) and initialize_rope passes it no traditional "
                f"({ROPE_UTILS}#L61-L69, #L347-L357): half-split pairs only")
    i = case.inputs
    if s.kind == "dynamic" and (i.query_len, i.position_offset) != (i.key_len,
                                                                   i.key_position_offset):
        return ("rope.scaling.type=dynamic with queries and keys of other lengths or offsets: "
                "DynamicNTKScalingRoPE grows the base from the tensor it rotates (seq_len = "
                f"x.shape[-2] + offset, {ROPE_UTILS}#L258-L263), so q and k would turn by two "
                "bases; mlx-lm's attention rotates the q and k of one call (one length, one "
                "offset)")
    if s.kind != "yarn":
        return None
    if s.magnitude == "softmax_scale" and not s.mscale_all_dim:
        return ("rope.scaling.magnitude=softmax_scale without mscale_all_dim: "
                "apply_yarn_mscale folds into the softmax scale only get_mscale(factor, "
                f"mscale_all_dim) squared ({ROPE_UTILS}#L274-L288); without it YarnRoPE "
                "multiplies the rotated dims instead")
    if s.magnitude != "softmax_scale" and s.mscale_all_dim:
        return (f"rope.scaling.mscale_all_dim={s.mscale_all_dim:g} with the factor on cos and "
                "sin only: apply_yarn_mscale folds get_mscale(factor, mscale_all_dim) squared "
                f"into the softmax scale whenever the config gives it ({ROPE_UTILS}#L274-L288)")
    return None


def lm_plan(case) -> LmRopePlan:
    r, i = case.attention.rope, case.inputs
    hf = hf_rope(case)
    return LmRopePlan(r.rotary_dim, float(r.base), r.style == "interleaved",
                      None if hf is None else dict(hf.parameters),
                      None if hf is None else hf.max_position_embeddings,
                      (i.position_offset, i.key_position_offset))


class MlxLmRope(MlxSDPA):
    name = "mlx_lm.rope"
    system = "mlx_lm.models.rope_utils.initialize_rope + mx.fast.scaled_dot_product_attention"
    path = "mlx-lm's rope classes on q and k (llama.py Attention)"
    requires = ("mlx", "mlx_lm")
    description = ("mlx-lm's `initialize_rope` classes (nn.RoPE, DynamicNTKScalingRoPE, "
                   "Llama3RoPE, YarnRoPE, SuScaledRoPE) on q and k, then "
                   "`mx.fast.scaled_dot_product_attention`; rope cases only")
    features = MlxRunner.features | {"rope", "position_offset", "rope_scaling"}
    sets_scale = False  # llama.py: scale = head_dim**-0.5

    def translate(self, case):
        if case.attention.rope is None:
            return NotExpressible(harness_limit(
                "no attention.rope: this runner is mlx-lm's rope classes in front of the fused "
                "op (the op alone is mlx.sdpa)"))
        a = case.attention
        if a.scale is not None and abs(a.scale - a.qk_head_dim ** -0.5) > 1e-12 * a.scale:
            return NotExpressible(f"scale={a.scale:g}: mlx-lm's Attention sets self.scale = "
                                  f"head_dim**-0.5 ({LLAMA})")
        why = lm_rope_limits(case)
        if why:
            return NotExpressible(why)
        plan, core = lm_plan(case), core_plan(case)
        args = core.arguments().replace(repr(core.scale), "scale", 1)
        return Translation(f"{plan.call()}; scale = apply_yarn_mscale({core.scale!r}, "
                           f"rope_scaling); mx.fast.scaled_dot_product_attention({args})", plan)

    def probe_translate(self, case):
        """A probe case with no rotation runs through the fused op underneath (mlx.sdpa's)."""
        if case.attention.rope is None:
            return MlxSDPA.translate(self, case)
        return self.translate(case)

    def run(self, case, translation, data):
        if case.attention.rope is None:  # a probe case (probe_translate): the op alone
            return MlxSDPA.run(self, case, translation, data)
        mx, _ = import_mlx()
        out, rope, scale = self.rotated(mx, case, data, translation.plan)
        mx.eval(out)
        held = held_dtype(out)
        notes = [f"q and k rotated by mlx_lm {type(rope).__name__} (initialize_rope)",
                 f"softmax scale apply_yarn_mscale(head_dim**-0.5, rope_scaling) = {scale:.6g}",
                 "holds no parameters: the canonical projections are passed as arrays"]
        if held != case.inputs.dtype:
            notes.append(f"output computed in {held}, not the requested {case.inputs.dtype}")
        return Observation(
            output=to_f64(mx, out), parameters=None,
            projection_parameters=sum(a.size for a in data.weights.arrays().values()),
            weight_shapes={n: tuple(a.shape) for n, a in data.weights.arrays().items()},
            notes=notes, extras={"mask_polarity": "True = attend", "output_dtype": held,
                                 "rope": type(rope).__name__})

    def rotated(self, mx, case, data, plan: LmRopePlan):
        """(output (B, T, E_o), the rope module, the softmax scale): the canonical
        projections, mlx-lm's rope on q and k at their offsets, the fused op."""
        from mlx_lm.models.rope_utils import apply_yarn_mscale, initialize_rope

        dtype, x = case.inputs.dtype, data.inputs
        w = {n: to_mx(mx, arr, dtype) for n, arr in data.weights.arrays().items()}
        q = project(mx, to_mx(mx, x.query, dtype), w["wq"], w.get("bq"))
        k = project(mx, to_mx(mx, x.key, dtype), w["wk"], w.get("bk"))
        v = project(mx, to_mx(mx, x.value, dtype), w["wv"], w.get("bv"))
        rope = initialize_rope(plan.dims, plan.base, plan.traditional,
                               None if plan.scaling_config is None else
                               dict(plan.scaling_config), plan.max_position_embeddings)
        q, k = rope(q, offset=plan.offsets[0]), rope(k, offset=plan.offsets[1])
        core = core_plan(case)
        scale = apply_yarn_mscale(core.scale, plan.scaling_config)
        heads = fused(mx, type(core)(scale, core.mask, core.fill), q, k, v, w,
                      mask_array(mx, core, case, x.allowed, dtype))
        out = mx.einsum("bhtd,hde->bte", heads, w["wo"])
        return (out if "bo" not in w else out + w["bo"]), rope, scale
