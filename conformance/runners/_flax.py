"""What the Flax runners share: limits, the canonical weights in Flax's
DenseGeneral layout (kernel (E_in, H, d), out kernel (H, d, E_o), in x out),
masks (True = attend, (B, 1, T, S)) and the convention probes.

JAX runs at its default (x64 off): a float64 case is computed in float32
(declared as a known mismatch in cases/dtypes.yaml).  jax and flax are
imported inside functions only.
"""
from __future__ import annotations

import numpy as np

from ..contract import Convention, to_numpy
from ..probes import output_with, probe_case, refusal
from . import _ledger

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
    scale = getattr(a, "scale", None)
    if scale is not None and abs(scale - a.qk_head_dim ** -0.5) > 1e-15:
        return (f"scale {scale}: dot_product_attention divides the query by sqrt(head dim); "
                "only a custom attention_fn changes it")
    return None


def kwargs_for(case) -> dict:
    a = case.attention
    kw = {"num_heads": a.num_heads, "qkv_features": a.num_heads * a.qk_head_dim}
    if a.output_features != a.query_features:
        kw["out_features"] = a.output_features
    if not a.bias:
        kw["use_bias"] = False
    return kw


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
    cells.append(Convention("dropout", "training_flag" if trained > 1e-3 > evald else "never",
                            f"dropout_rate=0.5: deterministic=True {evald:.1e} from the oracle, "
                            f"deterministic=False {trained:.1e} (the call's deterministic flag)"))
    return cells


def case_inputs(case):
    from ..weights import case_data
    return case_data(case).inputs.query


def numpy_out(y) -> np.ndarray:
    return to_numpy(y)
