"""What the Flax runners share: limits, the canonical weights in Flax's
DenseGeneral layout (kernel (E_in, H, d), out kernel (H, d, E_o), in x out),
masks (True = attend, (B, 1, T, S)) and the convention probes.

JAX runs at its default (x64 off): a float64 case is computed in float32
(declared as a known mismatch in expectations/flax.*.yaml).  The `.x64` variants
(x64=True) run the same layers in a worker process with JAX_ENABLE_X64=1: JAX's
switch is process-wide, so it is a condition of its own runner, not noise.  jax and flax are
imported inside functions only.

Speed: each runner jits one function per configuration (`jitted`), built
inside the trace, so a case costs one XLA compile per shape instead of one per
eager op, and JAX's persistent compilation cache (`compilation_cache`, the
same folder as the Keras JAX rows) makes a later session reuse the compiles.

Scale: neither layer takes a scale, but both take `attention_fn` ("dot_product_
attention or compatible function"); a case's attention.scale is expressed by
the default function with the query pre-multiplied by scale * sqrt(head dim)
(the default divides it by sqrt(head dim)): Flax's own softmax, mask and
dropout path, only the factor changes.
"""
from __future__ import annotations

import math
from typing import NamedTuple

import numpy as np

from conformance.contract.runner import (
    Convention, Count, NotExpressible, Observation, Runner, Translation, to_numpy)
from conformance.contract.probing import output_with, probe_case, refusal
from conformance.contract import probe_cells as _ledger

DOCS = "https://flax.readthedocs.io/en/v0.12.8/api_reference/"


def limits(case, *, gqa: bool, kv_one_width: bool, name: str) -> str | None:
    a = case.attention
    if a.num_kv_heads != a.num_heads and not gqa:
        return (f"grouped-query (num_kv_heads={a.num_kv_heads}): {name} has one key/value head "
                "per query head (no num_kv_heads)")
    if a.qk_head_dim != a.v_head_dim:
        return (f"qk_head_dim={a.qk_head_dim} != v_head_dim={a.v_head_dim}: qkv_features is one "
                "total for queries, keys and values (head dim = qkv_features // num_heads)")
    if kv_one_width and a.key_features != a.value_features:
        return (f"key_features={a.key_features} != value_features={a.value_features}: "
                "in_kv_features is one width for keys and values")
    return None


def kwargs_for(case) -> dict:
    a = case.attention
    kw = {"num_heads": a.num_heads, "qkv_features": a.num_heads * a.qk_head_dim}
    if a.output_features != a.query_features:
        kw["out_features"] = a.output_features
    if not a.bias:
        kw["use_bias"] = False
    return kw


def with_scale(case, kw: dict, base: str) -> tuple[str, dict]:
    """(the call's arguments, the plan): the constructor keywords, and, when the case
    sets attention.scale, `query_scale` = scale * sqrt(head dim) for attention_fn."""
    args = ", ".join(f"{k}={v!r}" for k, v in kw.items())
    scale = case.attention.scale
    if scale is None:
        return args, kw
    factor = scale * case.attention.qk_head_dim ** 0.5
    return (f"{args}, attention_fn=lambda q, k, v, **kw: {base}(q * {factor!r}, k, v, **kw)",
            {**kw, "query_scale": factor})


def constructor(plan: dict, base) -> dict:
    """The plan as constructor keywords: `query_scale` becomes an attention_fn
    wrapping `base` (the layer's default dot_product_attention)."""
    kw = {k: v for k, v in plan.items() if k != "query_scale"}
    factor = plan.get("query_scale")
    if factor is not None:
        def attention_fn(query, key, value, **rest):
            return base(query * factor, key, value, **rest)
        kw["attention_fn"] = attention_fn
    return kw


def compilation_cache() -> None:
    """JAX's persistent compilation cache under the project cache (the folder the
    Keras JAX rows use, runners/keras/common.py): keyed by JAX's own cache key (HLO,
    versions, flags), so it cannot change a result.  Set once per process."""
    import jax

    from conformance.paths import cache_root

    root = str(cache_root() / f"jax-{jax.__version__}")
    if jax.config.jax_compilation_cache_dir != root:
        jax.config.update("jax_compilation_cache_dir", root)
        jax.config.update("jax_persistent_cache_min_compile_time_secs", 0.0)
        jax.config.update("jax_persistent_cache_min_entry_size_bytes", 0)


_JITTED: dict = {}


def jitted(key: tuple, make):
    """The jitted function of one configuration (`make()` builds it once): jax.jit
    then compiles once per input shape, and reuses it for every case of that shape."""
    if key not in _JITTED:
        compilation_cache()
        if len(_JITTED) >= 64:
            _JITTED.clear()
        _JITTED[key] = make()
    return _JITTED[key]


def params_for(weights) -> dict:
    """Canonical per-head arrays -> {module: {kernel, bias}} in Flax's layout."""
    p = {n: {"kernel": w.transpose(1, 0, 2)} for n, w in
         (("query", weights.wq), ("key", weights.wk), ("value", weights.wv))}
    p["out"] = {"kernel": weights.wo}
    if weights.bq is not None:
        for n, b in (("query", weights.bq), ("key", weights.bk), ("value", weights.bv),
                     ("out", weights.bo)):
            p[n]["bias"] = b
    return p


def inputs_for(case, data, jnp, dtype):
    x = data.inputs
    q = jnp.asarray(x.query, dtype=dtype)
    if case.inputs.self_attention:
        return q, q, q
    return q, jnp.asarray(x.key, dtype=dtype), jnp.asarray(x.value, dtype=dtype)


def project(jnp, x, w, b):
    """(B, L, E) x (H, E, d) -> (B, L, H, d) (+ bias (H, d)): JAX's BTNH layout."""
    y = jnp.einsum("ble,hed->blhd", x, w)
    return y if b is None else y + b


def heads_out(jnp, heads, w):
    """(B, T, N, H) heads through the canonical output projection (H, d_v, E_o)."""
    out = jnp.einsum("bthd,hde->bte", heads, w["wo"])
    return out + w["bo"] if "bo" in w else out


def mask_for(jnp, allowed):
    return None if allowed is None else jnp.asarray(allowed[:, None])


def probe(name: str, **inputs):
    return probe_case(name, inputs={"self_attention": True, "key_len": 3, "query_len": 3,
                                    **inputs})


def common_cells(runner, call, what: str) -> list[Convention]:
    """Axes probed the same way on both Flax APIs.  `call(case, mask=None, x=None,
    dropout=0.0, deterministic=True)` -> output (NumPy)."""
    case = probe("layout")
    fwd = lambda m: call(case, mask=m)  # noqa: E731
    cells = [
        Convention("input_layout", "batch_first", f"{what}: inputs (B, T, E) read batch-first, "
                   f"{_ledger.matches(case, fwd(None)):.1e} from the oracle"),
        _ledger.mask_polarity(case, fwd, f"boolean mask (B, 1, T, S) passed raw to {what}"),
        _ledger.float_mask(case, fwd, f"0/-1e9 float mask (B, 1, T, S) passed raw to {what}"),
        _ledger.softmax_scale(case, fwd, what),
        Convention("returned_weights", "none", f"{what} returns the output only (weights "
                   "only through sow_weights / intermediates)")]
    x = np.asarray(case_inputs(case))
    try:
        out = call(case, x=x[0])
        err = float(np.max(np.abs(out - output_with(case, None)[0])))
        cells.append(Convention("unbatched_input", "accepted", f"{what} on ({x.shape[1]}, "
                                f"{x.shape[2]}): batch item 0 {err:.1e} from the oracle"))
    except Exception as exc:
        cells.append(refusal("unbatched_input", exc, f"{what} on a 2-D input"))
    evald = _ledger.matches(case, call(case, dropout=0.5, deterministic=True))
    trained = _ledger.matches(case, call(case, dropout=0.5, deterministic=False))
    cells.append(Convention("dropout", "training_flag" if trained > 1e-3 > evald else (
        "always" if evald > 1e-3 else "ignored"),  # ignored: dropout_rate accepted, no effect
                            f"dropout_rate=0.5: deterministic=True {evald:.1e} from the oracle, "
                            f"deterministic=False {trained:.1e} (the call's deterministic flag)"))
    return cells


def case_inputs(case):
    from conformance.oracle.canonical import case_data
    return case_data(case).inputs.query


def numpy_out(y) -> np.ndarray:
    return to_numpy(y)


class SizeFacts(NamedTuple):
    """A Flax layer's size cells: size_arguments (total_over_heads), parameter_formula,
    weight_layout."""

    size: str  # what the probe layer's kernel shows
    page: str  # the API reference page under DOCS
    formula: str
    counted: str  # how the count is taken
    layout: str


class FlaxRunner(Runner):
    """A Flax attention layer: subclasses give its limits, constructor keywords, the
    jitted function of one configuration and the parameter shapes."""

    framework = "flax"
    seconds = 0.8
    backend = "jax"
    requires = ("jax", "flax")
    sets_scale = True  # through attention_fn (module docstring)

    x64: bool = False  # run in a worker with JAX_ENABLE_X64=1 (a process-wide switch)
    api = ""  # the layer's name as typed, e.g. "flax.linen.MultiHeadDotProductAttention"
    short = ""  # its name in the limits' reasons
    gqa = False
    kv_one_width = False
    base_fn = ""  # the default attention_fn as typed
    call_suffix = ""  # the call's arguments after the constructor keywords
    sizes: SizeFacts

    def __init__(self, **params):
        """x64=True: the same layer in its own worker process started with JAX_ENABLE_X64=1,
        so the ledger shows the cells that JAX's process-wide x64 switch changes (float64
        computation, float64 input into a float32 layer) beside the default ones."""
        super().__init__(**params)
        if self.x64:
            from conformance.contract.runner import WorkerSpec

            self.name = self.name if "name" in params else f"{type(self).name}.x64"
            self.path = "JAX x64 on (JAX_ENABLE_X64=1)"
            self.worker = WorkerSpec(key="jax-x64", env={"JAX_ENABLE_X64": "1"})

    def kwargs(self, case) -> dict:
        return kwargs_for(case)

    def translate(self, case):
        reason = limits(case, gqa=self.gqa, kv_one_width=self.kv_one_width, name=self.short)
        if reason:
            return NotExpressible(reason)
        args, plan = with_scale(case, self.kwargs(case), self.base_fn)
        return Translation(f"{self.api}({args}{self.call_suffix})", plan)

    def make(self, plan: dict, dt, dropout: float, deterministic: bool):
        """The function (params, q, k, v, mask) -> output of one configuration."""
        raise NotImplementedError

    def shapes(self, plan: dict, dt, params: dict) -> dict[str, tuple]:
        """Each parameter's name and shape, from the framework's own accounting."""
        raise NotImplementedError

    def abstract_shapes(self, case, plan: dict, dt) -> dict[str, tuple]:
        """`shapes` with no array made: the layer's parameters under jax.eval_shape."""
        raise NotImplementedError

    def count(self, case):
        """The parameter shapes by jax.eval_shape (abstract: nothing allocated)."""
        import jax.numpy as jnp

        shapes = self.abstract_shapes(case, self.translate(case).plan,
                                      getattr(jnp, case.inputs.dtype))
        return Count(sum(math.prod(s) for s in shapes.values()), shapes, "jax.eval_shape")

    def apply(self, case, plan, data, mask=None, x=None, dropout=0.0, deterministic=True):
        """-> (output, the params it ran with)."""
        import jax
        import jax.numpy as jnp

        dt = getattr(jnp, case.inputs.dtype)
        fn = jitted((self.name, repr(sorted(plan.items())), case.inputs.dtype, dropout,
                     deterministic), lambda: self.make(plan, dt, dropout, deterministic))
        params = jax.tree.map(lambda a: jnp.asarray(a, dtype=dt), params_for(data.weights))
        q, k, v = inputs_for(case, data, jnp, dt) if x is None else (jnp.asarray(x),) * 3
        m = None if mask is None else jnp.asarray(np.asarray(mask)[:, None])
        return fn(params, q, k, v, m), params

    def run(self, case, translation, data):
        import jax.numpy as jnp

        y, params = self.apply(case, translation.plan, data, mask=data.inputs.allowed)
        dt = getattr(jnp, case.inputs.dtype)
        shapes = self.shapes(translation.plan, dt, params)
        notes = []
        if y.dtype != dt:
            notes.append(f"computed in {y.dtype}: JAX x64 is off (its default)")
        return Observation(output=to_numpy(y),
                           parameters=int(sum(int(np.prod(s)) for s in shapes.values())),
                           weight_shapes=shapes, notes=notes,
                           extras={"mask_polarity": "True = attend", "output_dtype": str(y.dtype)})

    def conventions(self):
        from conformance.oracle.canonical import case_data

        def call(case, **kw):
            return to_numpy(self.apply(case, self.translate(case).plan, case_data(case), **kw)[0])
        f = self.sizes
        return common_cells(self, call, self.api) + self.probe_cells() + [
            Convention("size_arguments", "total_over_heads", f.size, "total_over_heads",
                       DOCS + f.page),
            Convention("parameter_formula", f.formula, f.counted),
            Convention("weight_layout", f.layout,
                       "canonical Wq (H, E, d) loaded as transpose(1, 0, 2)"),
            Convention("argument_order", "query_key_value",
                       "__call__(inputs_q, inputs_k=None, inputs_v=None, *, mask=None, ...)")]
