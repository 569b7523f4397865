"""`jax.nn.dot_product_attention` with explicit projections (#20), runner `jax.dpa`.

Why in runners/flax/: it is JAX, and this folder holds the suite's JAX helper (`common.
jitted`: one jax.jit per configuration, JAX's persistent compilation cache); the runner
reports as its own framework, "jax" (a function of JAX, not of Flax: its arithmetic is
`jax._src.nn.functions`, not Flax's `dot_product_attention`).

The function holds no parameters: the canonical projections are made in jnp (q (B, T, N,
H), k and v (B, S, K, H): JAX's BTNH layout) and the heads go through the canonical output
projection.  Each part of the case becomes the argument a JAX user passes
(https://github.com/jax-ml/jax/blob/jax-v0.10.2/jax/_src/nn/functions.py):
- causal upper left (or T == S): `is_causal=True` (`jnp.tril(ones((T, S)))`, upper left);
  lower right with T != S: folded into the boolean `mask`;
- key padding: `key_value_seq_lengths` (int32 (B,) lengths);
- an explicit mask: the boolean `mask` (B, 1, T, S), True = attend; when the case sets
  mask.fill, an additive float `bias` holding 0 / fill in the case dtype instead (the
  docstring: "For an additive mask, users should pass it to `bias`");
- mask.window {left, right}: `local_window_size=(left, right)`, inclusive, on the index
  grid (`_get_window_mask`: query i sees key j with i - left <= j <= i + right); position
  offsets shift it by P0 - K0, an open side becomes T + S;
- grouped-query: k and v keep their K heads (the function groups query heads itself);
- attention.scale: `scale=`.
Masked logits are written in as `-0.7 * finfo(dtype).max` (`_get_large_negative`, capped
at float32's), so a fully masked row is uniform.  value must have the key's head size.
float16 runs eagerly: XLA:CPU rejects the F16_F16_F32 dot_general it emits under jit
("The precision 'F16_F16_F32' is not supported by dot_general on CPU"); eagerly the
function's own try/except falls back to the default precision (keras-hub works around the same
limit: https://github.com/keras-team/keras-hub/pull/2354).
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from conformance.contract.runner import (
    Count, NotExpressible, Observation, Runner, Translation, to_numpy)
from conformance.oracle.canonical import combine_masks
from conformance.runners.flax import common as _flax
from conformance.runners.flax.common import heads_out, project

FILLS = {"-inf": -np.inf, "-1e9": -1e9, "-1e4": -1e4}  # finfo_min: the case dtype's
SOURCE = "https://github.com/jax-ml/jax/blob/jax-v0.10.2/jax/_src/nn/functions.py"
DOC = "https://docs.jax.dev/en/latest/_autosummary/jax.nn.dot_product_attention.html"


@dataclass(frozen=True)
class DpaPlan:
    """The arguments a JAX user passes for the case (read from the case alone)."""

    is_causal: bool = False
    mask: str = "none"  # "none", "bool" (mask=) or "bias" (bias= 0 / fill)
    fill: str | None = None  # the mask.fill word, for "bias"
    kv_lengths: bool = False  # key_value_seq_lengths=
    window: tuple[int, int] | None = None  # local_window_size=(left, right)
    scale: float | None = None

    def arguments(self) -> str:
        args = ["q, k, v"]
        if self.mask == "bias":
            args.append(f"bias=where(mask, 0, {self.fill}) (B, 1, T, S)")
        elif self.mask == "bool":
            args.append("mask=bool (B, 1, T, S), True = attend")
        if self.scale is not None:
            args.append(f"scale={self.scale!r}")
        if self.is_causal:
            args.append("is_causal=True")
        if self.kv_lengths:
            args.append("key_value_seq_lengths=int32 (B,)")
        if self.window is not None:
            args.append(f"local_window_size={self.window!r}")
        return ", ".join(args)


def dpa_plan(case) -> DpaPlan | NotExpressible:
    a, i, m = case.attention, case.inputs, case.mask
    if a.qk_head_dim != a.v_head_dim:
        return NotExpressible(f"qk_head_dim={a.qk_head_dim} != v_head_dim={a.v_head_dim}: "
                              "value must have the key's shape (B, S, K, H) ('value shape "
                              "should be ...')")
    causal = m.causal != "none"
    flag = causal and (m.causal == "upper_left" or i.query_len == i.key_len)
    explicit = (m.attn_mask_density is not None or m.attn_mask_matrix is not None
                or bool(m.masked_rows) or causal and not flag)
    kind = "none" if not explicit else "bias" if m.fill is not None else "bool"
    window = None
    if m.window is not None:
        shift, wide = i.position_offset - i.key_position_offset, i.query_len + i.key_len
        left = wide if m.window.left is None else m.window.left - shift
        right = wide if m.window.right is None else m.window.right + shift
        window = (int(left), int(right))
    return DpaPlan(flag, kind, m.fill if kind == "bias" else None,
                   m.key_padding is not None, window, a.scale)


def make(plan: DpaPlan, dtype: str):
    """fn(weights, q, k, v, mask_or_bias, lengths) -> (B, T, E_o), jitted but in float16."""
    import jax
    import jax.numpy as jnp

    def fn(w, xq, xk, xv, m, lengths):
        kw = {"is_causal": plan.is_causal, "scale": plan.scale}
        if plan.window is not None:
            kw["local_window_size"] = plan.window
        if lengths is not None:
            kw["key_value_seq_lengths"] = lengths
        if plan.mask == "bool":
            kw["mask"] = m
        elif plan.mask == "bias":
            kw["bias"] = m
        heads = jax.nn.dot_product_attention(
            project(jnp, xq, w["wq"], w.get("bq")), project(jnp, xk, w["wk"], w.get("bk")),
            project(jnp, xv, w["wv"], w.get("bv")), **kw)
        return heads_out(jnp, heads, w)
    return fn if dtype == "float16" else jax.jit(fn)


def mask_argument(jnp, plan: DpaPlan, case, inputs, dt):
    """The mask= (bool) or bias= (0 / fill in the case dtype) array, or None."""
    if plan.mask == "none":
        return None
    lower_right = None if plan.is_causal else inputs.causal
    shape = (case.inputs.batch, case.inputs.query_len, case.inputs.key_len)
    allowed = combine_masks((inputs.attn_mask, lower_right), shape)[:, None]
    if plan.mask == "bool":
        return jnp.asarray(allowed)
    fill = float(jnp.finfo(dt).min) if plan.fill == "finfo_min" else FILLS[plan.fill]
    return jnp.where(jnp.asarray(allowed), jnp.asarray(0, dt), jnp.asarray(fill, dt))


class JaxDPA(Runner):
    name = "jax.dpa"
    # the number _get_large_negative writes into masked logits: "dtype_max = min(dtype_max,
    # finfo(float32).max)", jnp.where(mask, logits, -0.7 * dtype_max); the ledger's fill probe
    # cannot tell it from finfo.min by the outputs, so this names the tie (masks.py)
    documented_fill = ("-0.7*finfo_max", SOURCE)
    # the ledger's raw probes (conventions/probes/flags.py) ask `answer`; the docstring
    # states the mask's polarity and that an additive mask goes to bias=, not is_causal's
    # alignment (only "causal attention will be applied")
    answers = frozenset({"attn_mask", "is_causal", "window", "unbatched", "input_dtype"})
    # what the ledger's probes ask through translate and run beyond its features: k, v
    # with fewer heads (by shape), key_value_seq_lengths; its own cells of the sizes, the
    # layout and the key padding are the readings of the API they confirm
    probe_takes = frozenset({"grouped", "key_padding"})
    framework = "jax"
    system = "jax.nn.dot_product_attention"
    backend = "xla"
    requires = ("jax",)
    extras = "flax"
    description = ("`jax.nn.dot_product_attention` with explicit projections (`is_causal`, "
                   "`local_window_size`, `key_value_seq_lengths`, GQA, `mask` / `bias`)")
    seconds = 0.1
    no_parameters_label = "jax.nn.dot_product_attention"
    sets_scale = True  # scale= (default 1/sqrt(H))
    features = Runner.features | {"window", "position_offset"}

    def translate(self, case):
        plan = dpa_plan(case)
        if isinstance(plan, NotExpressible):
            return plan
        return Translation(f"jax.nn.dot_product_attention({plan.arguments()})", plan)

    def count(self, case):
        from conformance.case.model import sizes_counts

        return Count(None, method="formula (jax.nn.dot_product_attention holds no "
                     "parameters; the projections passed in)", projection_parameters=sizes_counts(
                         case.attention, case.inputs)["weights"])

    def output(self, case, plan: DpaPlan, data):
        """The system's (B, T, E_o) output as a jax array."""
        import jax.numpy as jnp

        dt = getattr(jnp, case.inputs.dtype)
        fn = _flax.jitted(("jax.dpa", plan, case.inputs.dtype), lambda: make(
            plan, case.inputs.dtype))
        w = {n: jnp.asarray(a, dt) for n, a in data.weights.arrays().items()}
        x = data.inputs
        xq = jnp.asarray(x.query, dt)
        xk, xv = (xq, xq) if case.inputs.self_attention else (jnp.asarray(x.key, dt),
                                                              jnp.asarray(x.value, dt))
        lengths = (jnp.asarray(np.asarray(case.mask.key_padding, np.int32))
                   if plan.kv_lengths else None)
        return fn(w, xq, xk, xv, mask_argument(jnp, plan, case, x, dt), lengths)

    def run(self, case, translation, data):
        y = self.output(case, translation.plan, data)
        arrays = data.weights.arrays()
        notes = ["holds no parameters: the canonical projections are made in jnp",
                 "returns no attention weights"]
        if str(y.dtype) != case.inputs.dtype:
            notes.append(f"computed in {y.dtype}: JAX x64 is off (its default)")
        return Observation(output=to_numpy(y), parameters=None,
                           projection_parameters=sum(a.size for a in arrays.values()),
                           weight_shapes={n: tuple(a.shape) for n, a in arrays.items()},
                           notes=notes, extras={"mask_polarity": "True = attend",
                                                "output_dtype": str(y.dtype),
                                                "mask_passed": _mask_passed(translation.plan,
                                                                            case)})

    def conventions(self):
        """What the function's API shows (dpa_observations.py); the ledger asks the rest."""
        from conformance.runners.flax.dpa_observations import dpa_cells

        return dpa_cells()

    def signatures(self):
        import jax

        return ("jax.nn.dot_product_attention", (jax.nn.dot_product_attention,))

    def answer(self, case, data, raw):
        """The function on the canonical projections (jnp, BTNH) with one argument raw: a
        boolean (B, T, S) mask as mask= (B, 1, T, S); a float one as bias= (B, 1, T, S),
        JAX's additive mask argument (the docstring: "For an additive mask, users should
        pass it to `bias`"; mask= refuses a float, "mask dtype should be bool", functions.py
        line 1189, jax 0.10.2); is_causal=value; or local_window_size=value (an int or a
        pair, as given), with is_causal=True where the case is causal; input_dtype: q in
        NumPy raw.value (wide_query_call)."""
        import jax
        import jax.numpy as jnp

        dt = getattr(jnp, case.inputs.dtype)
        w = {n: jnp.asarray(a, dt) for n, a in data.weights.arrays().items()}
        q, k, v = (project(jnp, jnp.asarray(getattr(data.inputs, n), dt), w[wn], w.get(bn))
                   for n, wn, bn in (("query", "wq", "bq"), ("key", "wk", "bk"),
                                     ("value", "wv", "bv")))
        if raw.argument == "input_dtype":
            return wide_query_call(jax, jnp, case, data, w, k, v, raw.value)
        if raw.argument == "attn_mask":
            m = jnp.asarray(np.asarray(raw.value)[:, None])
            name = "mask" if m.dtype == jnp.bool_ else "bias"
            kw, said = {name: m}, f"{name}=<{m.dtype} (B, 1, T, S)>"
        elif raw.argument == "is_causal":
            kw = {"is_causal": bool(raw.value)}
            said = f"is_causal={bool(raw.value)}"
        elif raw.argument == "unbatched":  # item 0's (T, N, H) q, k, v: no batch axis
            heads = jax.nn.dot_product_attention(q[0], k[0], v[0])
            return (np.asarray(to_numpy(heads_out(jnp, heads[None], w))[0], np.float64),
                    "jax.nn.dot_product_attention(q[0], k[0], v[0]) on (T, N, H) arrays")
        elif raw.argument == "window":
            causal = case.mask.causal != "none"
            kw = {"local_window_size": raw.value, "is_causal": causal}
            said = f"local_window_size={raw.value!r}, is_causal={causal}"
        else:
            raise NotImplementedError(f"{self.name} passes no raw {raw.argument}")
        heads = jax.nn.dot_product_attention(q, k, v, **kw)
        return (np.asarray(to_numpy(heads_out(jnp, heads, w)), np.float64),
                f"jax.nn.dot_product_attention(q, k, v, {said})")


def wide_query_call(jax, jnp, case, data, w, k, v, wide: str):
    """The function given q projected in NumPy `wide` (the function holds no weights: the
    query is its input) beside k, v in the case's dtype, as a user passes a NumPy array, at
    the process's x64 switch (JAX's default: off, where JAX stores a float64 array as float32
    before the function sees it; on, its own check "query dtype should be ..." refuses it,
    jax/_src/nn/functions.py); the output's own dtype comes back."""
    arrays = data.weights.arrays()
    b = arrays.get("bq")
    q = np.einsum("ble,hed->blhd", np.asarray(data.inputs.query, wide),
                  np.asarray(arrays["wq"], wide)) + (0 if b is None else np.asarray(b, wide))
    heads = jax.nn.dot_product_attention(q, k, v)
    return Observation(output=np.asarray(to_numpy(heads_out(jnp, heads, w)), np.float64),
                       native_dtype=str(heads.dtype)), (
        f"jax.nn.dot_product_attention(q <NumPy {q.dtype}>, k <{k.dtype}>, v <{v.dtype}>) "
        f"(jax_enable_x64={jax.config.jax_enable_x64})")


def _mask_passed(plan: DpaPlan, case) -> str:
    """The mask as given to the function: an additive float `bias` of the case's fill, or a
    boolean `mask`."""
    if plan.fill is not None:
        return f"additive {plan.fill} mask in {case.inputs.dtype}"
    return "boolean mask"
