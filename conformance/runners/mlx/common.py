"""What the MLX runners share (mlx.mha, mlx.sdpa): the import, dtypes, arrays in
and out, the canonical weights in `mlx.nn.Linear`'s (out, in) layout, and the
attention core through MLX's own ops (`mx.fast.rope`, `mx.fast.rms_norm` /
`layer_norm`, `nn.ALiBi.create_alibi_matrix`, `mx.fast.scaled_dot_product_attention`).

MLX runs on Linux CPU (`pip install "mlx[cpu]"`).  Facts the runners rest on,
from its docstrings (mlx 0.32.4):
- `scaled_dot_product_attention(q, k, v, *, scale, mask, sinks)` takes q
  (B, N_q, T, D) and k, v (B, N_kv, S, D) "not pre-tiled" for grouped-query;
  `scale` is required; `mask` is a boolean or additive array broadcast to
  (B, N, T, S) or the string "causal", "lower-right alignment where the last
  query aligns with the last key"; "the softmax operation is performed in
  float32 regardless of the input precision".
- `fast.rope(a, dims, *, traditional, base, scale, offset)`: traditional=True
  rotates consecutive dimensions (interleaved pairs), False the half-split
  pairs; dimensions past `dims` pass unchanged; positions start at `offset`; `scale`
  multiplies the positions (a linear rope scaling of factor f is scale=1/f); `freqs`
  replaces `base` with the caller's own periods (base ** (2i / dims), not inverse
  frequencies): MLX computes no other scaled table itself.
- `nn.ALiBi.create_alibi_matrix(T + offset, S, H, offset)`: query positions
  offset .. offset + T - 1, key positions 0 .. S - 1, bias -slope_h * |i - j|.
- `sinks=` (H,) logits join each row's softmax denominator (GPT-OSS attention sinks).
The core is kept in parts (`positional`: QK-norm and RoPE; `fused`: the op) so the decode
(sdpa_cache.py) rotates keys at the cache offset before caching them, as mlx-lm does.
mlx is imported inside functions only.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

import numpy as np

from conformance.contract.runner import Runner

DOCS = "https://ml-explore.github.io/mlx/build/html/python/"
MHA = "mlx.nn.MultiHeadAttention"
SDPA_DOC = DOCS + "_autosummary/mlx.core.fast.scaled_dot_product_attention.html"
FILLS = {"-inf": -np.inf, "finfo_min": float(np.finfo(np.float32).min), "-1e9": -1e9,
         "-1e4": -1e4}  # mask.fill -> the number an additive mask holds


def import_mlx():
    """(mlx.core, mlx.nn), imported on first use."""
    import mlx.core as mx
    import mlx.nn as nn

    return mx, nn


def mx_dtype(mx, dtype: str):
    return getattr(mx, dtype)


def to_mx(mx, arr: np.ndarray, dtype: str):
    """NumPy -> mx.array in `dtype` (bfloat16 through float32: the canonical values
    are already rounded to the case dtype, so the cast is exact)."""
    if dtype == "bfloat16":
        return mx.array(np.asarray(arr, np.float32)).astype(mx.bfloat16)
    # the dtype is named: mx.array reads a float64 NumPy array as float32 otherwise
    return mx.array(np.asarray(arr, dtype=dtype), dtype=mx_dtype(mx, dtype))


def to_f64(mx, x) -> np.ndarray:
    """mx.array -> float64 NumPy (bfloat16 has no NumPy dtype: through float32)."""
    if x.dtype in (mx.bfloat16, mx.float16):
        x = x.astype(mx.float32)
    return np.array(x).astype(np.float64)


def held_dtype(x) -> str:
    return str(x.dtype).rsplit(".", 1)[-1]


@dataclass(frozen=True)
class CorePlan:
    """How one case runs through MLX's attention ops (what a user would write)."""

    scale: float  # scale= (required by the fused op)
    mask: Literal["none", "causal", "bool", "additive"] = "none"
    fill: float = -np.inf  # masked entries of an additive mask (mask.fill)
    rope: tuple[int, bool, float] | None = None  # (dims, traditional, base) for fast.rope
    offsets: tuple[int, int] = (0, 0)  # rope offset= of queries and keys
    rope_scale: float = 1.0  # fast.rope scale=: positions times it (linear scaling 1/f)
    alibi_offset: int | None = None  # create_alibi_matrix offset (query - key start)
    qk_norm: tuple[str, str, float] | None = None  # (rms | layer, per_head | all_heads, eps)
    sinks: bool = False  # sinks= (H,) logits, the fused op's own argument

    def arguments(self) -> str:
        """The fused call's arguments, e.g. "q, k, v, scale=0.5, mask='causal'"."""
        words = {"none": "", "causal": ", mask='causal'",
                 "bool": ", mask=bool (B, 1, T, S), True = attend",
                 "additive": f", mask=additive (B, H, T, S) (fill {self.fill:g}"
                 + (", + nn.ALiBi.create_alibi_matrix)" if self.alibi_offset is not None
                    else ")")}
        sinks = ", sinks=(H,) logits" if self.sinks else ""
        return f"q, k, v, scale={self.scale!r}{words[self.mask]}{sinks}"

    def before(self) -> str:
        """The ops applied to q and k before the fused call, as a user writes them."""
        steps = []
        if self.qk_norm:
            kind, scope, eps = self.qk_norm
            op = "rms_norm(x, w" if kind == "rms" else "layer_norm(x, w, b"
            where = "each head" if scope == "per_head" else "(B, L, H*d) over all heads"
            steps.append(f"mx.fast.{op}, eps={eps:g}) on {where}")
        if self.rope:
            dims, trad, base = self.rope
            steps.append(f"mx.fast.rope(x, {dims}, traditional={trad}, base={base:g}, "
                         f"scale={self.rope_scale!r}, offset=...)")
        return "; ".join(steps)


def rope_scaling_refusal(case) -> str | None:
    """Why fast.rope cannot take the case's rope scaling: only linear is its own argument."""
    rope = case.attention.rope
    s = None if rope is None else rope.scaling
    if s is None or s.kind == "linear":
        return None
    return (f"rope.scaling.type={s.kind}: mx.fast.rope(a, dims, *, traditional, base, scale, "
            "offset, freqs) scales positions by one number (scale=, linear) or takes the "
            f"caller's own freqs; it computes no {s.kind} frequencies ({ROPE_DOC})")


def core_plan(case) -> CorePlan:
    """The plan read from the case alone (no arrays)."""
    a, i, m = case.attention, case.inputs, case.mask
    scale = a.scale if a.scale is not None else 1 / float(np.sqrt(a.qk_head_dim))
    extra: dict = {}
    if a.rope is not None:
        extra["rope"] = (a.rope.rotary_dim, a.rope.style == "interleaved", a.rope.base)
        extra["offsets"] = (i.position_offset, i.key_position_offset)
        if a.rope.scaling is not None and a.rope.scaling.kind == "linear":
            extra["rope_scale"] = 1.0 / a.rope.scaling.factor
    if a.qk_norm is not None:
        extra["qk_norm"] = (a.qk_norm.kind, a.qk_norm.scope, a.qk_norm.eps)
    if m.fill is not None:
        extra["fill"] = FILLS[m.fill]
    if a.sinks:
        extra["sinks"] = True
    causal = m.causal != "none"
    if a.alibi:
        extra["alibi_offset"] = i.position_offset - i.key_position_offset
        return CorePlan(scale, "additive", **extra)
    if causal and not case.has_non_causal_mask and m.window is None and (
            m.causal == "lower_right" or i.query_len == i.key_len):
        return CorePlan(scale, "causal", **extra)
    masked = causal or case.has_non_causal_mask or m.window is not None
    return CorePlan(scale, "bool" if masked else "none", **extra)


def _norm(mx, x, kind: str, scope: str, eps: float, w, b):
    """QK-norm of (B, H, L, d) with MLX's fused norms: over d, or over H * d."""
    if scope == "per_head":
        return (mx.fast.rms_norm(x, w, eps) if kind == "rms"
                else mx.fast.layer_norm(x, w, b, eps))
    bsz, h, n, d = x.shape
    flat = x.transpose(0, 2, 1, 3).reshape(bsz, n, h * d)
    wf, bf = w.reshape(-1), None if b is None else b.reshape(-1)
    y = mx.fast.rms_norm(flat, wf, eps) if kind == "rms" else mx.fast.layer_norm(flat, wf, bf,
                                                                                  eps)
    return y.reshape(bsz, n, h, d).transpose(0, 2, 1, 3)


def mask_array(mx, plan: CorePlan, case, allowed: np.ndarray | None, dtype: str):
    """The mask argument of the fused call for `plan` (None, "causal" or an array)."""
    if plan.mask == "causal":
        return "causal"
    if plan.mask == "bool":
        return mx.array(allowed[:, None])
    if plan.mask == "additive":
        i, h = case.inputs, case.attention.num_heads
        add = np.zeros((i.batch, 1, i.query_len, i.key_len))
        if allowed is not None:
            add = np.where(allowed[:, None], 0.0, plan.fill)
        _, nn = import_mlx()
        out = to_mx(mx, add, dtype)
        if plan.alibi_offset is not None:
            off = plan.alibi_offset
            out = out + nn.ALiBi.create_alibi_matrix(i.query_len + off, i.key_len, h, off,
                                                     dtype=mx_dtype(mx, dtype))
        return out
    return None


def positional(mx, plan: CorePlan, q, k, weights: dict, offsets: tuple[int, int]):
    """QK-norm, then RoPE at positions starting at `offsets` (queries, keys), of (B, H, T, d)
    q and (B, H_kv, S, d) k: what mlx-lm's attention modules do before the fused call."""
    if plan.qk_norm is not None:
        kind, scope, eps = plan.qk_norm
        q = _norm(mx, q, kind, scope, eps, weights["q_norm"], weights.get("q_norm_bias"))
        k = _norm(mx, k, kind, scope, eps, weights["k_norm"], weights.get("k_norm_bias"))
    if plan.rope is not None:
        dims, trad, base = plan.rope
        s = plan.rope_scale
        q = mx.fast.rope(q, dims, traditional=trad, base=base, scale=s, offset=offsets[0])
        k = mx.fast.rope(k, dims, traditional=trad, base=base, scale=s, offset=offsets[1])
    return q, k


def fused(mx, plan: CorePlan, q, k, v, weights: dict, mask):
    """mx.fast.scaled_dot_product_attention with the plan's scale, `mask` and sinks."""
    kw = {} if mask is None else {"mask": mask}
    if plan.sinks:
        kw["sinks"] = weights["sinks"]
    return mx.fast.scaled_dot_product_attention(q, k, v, scale=plan.scale, **kw)


def attend(mx, plan: CorePlan, case, q, k, v, weights: dict, mask):
    """QK-norm, RoPE, the fused attention: (B, H, T, d) q, (B, H_kv, S, d) k and v."""
    q, k = positional(mx, plan, q, k, weights, plan.offsets)
    return fused(mx, plan, q, k, v, weights, mask)


def project(mx, x, w, b):
    """(B, L, E) x canonical (H, E, d) (+ (H, d)) -> (B, H, L, d)."""
    y = mx.einsum("ble,hed->bhld", x, w)
    return y if b is None else y + b[None, :, None, :]


_PLAN_MASK = object()  # explicit(): the mask the plan derives from the case


def explicit(mx, case, data, plan: CorePlan, mask=_PLAN_MASK):
    """The sdpa row of a case: explicit projections, attend, the output projection;
    a probe passes `mask` raw (None, "causal" or an array) instead of the plan's.
    -> (output (B, T, E_o) mx.array, the weights passed as mx arrays)."""
    dtype = case.inputs.dtype
    w = {n: to_mx(mx, a, dtype) for n, a in data.weights.arrays().items()}
    x = data.inputs
    q = project(mx, to_mx(mx, x.query, dtype), w["wq"], w.get("bq"))
    k = project(mx, to_mx(mx, x.key, dtype), w["wk"], w.get("bk"))
    v = project(mx, to_mx(mx, x.value, dtype), w["wv"], w.get("bv"))
    if mask is _PLAN_MASK:
        mask = mask_array(mx, plan, case, x.allowed, dtype)
    heads = attend(mx, plan, case, q, k, v, w, mask)
    out = mx.einsum("bhtd,hde->bte", heads, w["wo"])
    return (out if "bo" not in w else out + w["bo"]), w


def mha_kwargs(case) -> dict:
    a = case.attention
    return {"dims": a.num_heads * a.qk_head_dim, "num_heads": a.num_heads,
            "query_input_dims": a.query_features, "key_input_dims": a.key_features,
            "value_input_dims": a.value_features, "value_dims": a.num_heads * a.v_head_dim,
            "value_output_dims": a.output_features, "bias": a.bias}


def build(case, weights, dtype: str):
    """The layer with the canonical weights loaded (strict: every name must match)
    and read back; -> (layer, native shapes)."""
    mx, nn = import_mlx()
    from mlx.utils import tree_flatten

    from conformance.convert.frameworks import to_mlx

    layer = nn.MultiHeadAttention(**mha_kwargs(case))
    layer.set_dtype(mx_dtype(mx, dtype))
    want = to_mlx(weights)
    layer.load_weights([(n, to_mx(mx, a, dtype)) for n, a in want.items()], strict=True)
    held = dict(tree_flatten(layer.parameters()))
    for n, a in want.items():
        back = to_f64(mx, held[n])
        if back.shape != a.shape or not np.array_equal(back, a):
            raise RuntimeError(f"readback of {n} differs from the canonical weights")
    return layer, {n: tuple(v.shape) for n, v in held.items()}


class MlxRunner(Runner):
    framework = "mlx"
    requires = ("mlx",)
    extras = "mlx"
    seconds = 0.05


class MlxAnswers:
    """A runner whose attention is MLX's mask= answers the ledger's raw calls (Runner.answer,
    conventions/probes/flags.py): a (B, T, S) mask given as mx.array (B, 1, T, S) to mask=
    (a boolean one True = attend, a float one additive: the docstring), and the causal
    switch as MLX spells it, mask="causal" (lower right, the docstring), None when off.
    The subclass runs its system with that mask (`answer_with`); it only calls."""

    answers = frozenset({"attn_mask", "is_causal", "input_dtype", "unbatched"})

    def answer(self, case, data, raw):
        mx, _ = import_mlx()
        if raw.argument in ("input_dtype", "unbatched"):  # the output's own dtype with it
            from conformance.contract.runner import Observation

            out, call = self.native_inputs(mx, case, data, raw)
            mx.eval(out)
            return Observation(output=to_f64(mx, out), native_dtype=held_dtype(out)), call
        if raw.argument == "attn_mask":
            mask = mx.array(np.asarray(raw.value)[:, None])
            said = f"mask=<{held_dtype(mask)} (B, 1, T, S)>"
        elif raw.argument == "is_causal":
            mask = "causal" if raw.value else None
            said = f"mask={mask!r}"
        else:
            raise NotImplementedError(f"{self.name} passes no raw {raw.argument}")
        out, call = self.answer_with(mx, case, data, mask)
        mx.eval(out)
        return to_f64(mx, out), call.format(mask=said)

    def answer_with(self, mx, case, data, mask):
        """(output (B, T, E_o) mx.array, the call with a {mask} slot) for `mask` raw."""
        raise NotImplementedError(f"{self.name} passes no raw mask")

    def native_inputs(self, mx, case, data, raw):
        """(the system's output as it gave it, the call) for the inputs cast to raw.value
        ("input_dtype") or item 0 without its batch axis ("unbatched"), no mask."""
        raise NotImplementedError(f"{self.name} passes no raw {raw.argument}")


ROPE_DOC = DOCS + "_autosummary/mlx.core.fast.rope.html"
ALIBI_FIX = "https://github.com/ml-explore/mlx/pull/3071"  # the paper's slopes since


class SDPAAnswers(MlxAnswers):
    """mx.fast.scaled_dot_product_attention on the canonical projections (common.explicit,
    the sdpa row's ops) with the mask raw; the ledger asks it the fused op's axes too
    (`probe_takes`) and reads the feature axes from the op's and fast.rope's signatures."""

    probe_takes = frozenset({"grouped", "rotary_dim"})  # k, v heads by shape; rope's dims
    harness_features = frozenset({"qk_norm"})  # the norm is the suite's ops (common.explicit)

    def signatures(self):
        mx, _ = import_mlx()
        return ("mx.fast.scaled_dot_product_attention",
                (mx.fast.scaled_dot_product_attention, mx.fast.rope))

    def answer_with(self, mx, case, data, mask):
        plan = core_plan(case)
        return (explicit(mx, case, data, plan, mask)[0],
                f"mx.fast.scaled_dot_product_attention(q, k, v, scale={plan.scale!r}, {{mask}})")

    def native_inputs(self, mx, case, data, raw):
        """The fused op on the canonical projections: q projected in raw.value (the op holds
        no weights: the query is its input) beside k, v in the case's dtype, or item 0's
        (H, T, d) q, k, v; the op's own output (its dtype), projected back in float64."""
        plan, dtype, x = core_plan(case), case.inputs.dtype, data.inputs
        arrays = data.weights.arrays()
        wide = raw.value if raw.argument == "input_dtype" else dtype

        def proj(t, n, in_dtype):
            b = arrays.get("b" + n)
            return project(mx, to_mx(mx, getattr(x, t), in_dtype),
                           to_mx(mx, arrays["w" + n], in_dtype),
                           None if b is None else to_mx(mx, b, in_dtype))

        q, k, v = proj("query", "q", wide), proj("key", "k", dtype), proj("value", "v", dtype)
        said = f"q as {wide}" if raw.argument == "input_dtype" else "q[0], k[0], v[0]"
        if raw.argument == "unbatched":
            q, k, v = q[0], k[0], v[0]
        heads = mx.fast.scaled_dot_product_attention(q, k, v, scale=plan.scale)
        wo = to_mx(mx, arrays["wo"], held_dtype(heads))
        out = mx.einsum("...htd,hde->...te", heads, wo)
        out = out if "bo" not in arrays else out + to_mx(mx, arrays["bo"], held_dtype(heads))
        return out, f"mx.fast.scaled_dot_product_attention({said}, scale={plan.scale!r})"
