"""What the MLX runners report of their API for the ledger, with no oracle and no reading
of an output: the arguments the calls lack (key padding, dropout, weights), an mx.array's
lack of an implicit mask, what a 2-D input and a float64 input into float32 give (the
error text, the output's dtype), and the readings of the API the ledger confirms by asking
(sizes.confirmed: the size arguments from a weight's shape, the layout from the
docstring).  The ledger asks the rest (conventions/probes/, the runners' `ledger_axes`).
mlx is imported inside the functions only.
"""
from __future__ import annotations

import numpy as np

from conformance.contract.runner import Convention
from conformance.runners.mlx.common import (
    MHA, SDPA_DOC, build, held_dtype, import_mlx, project, to_mx)

SDPA = "mx.fast.scaled_dot_product_attention"


def error_text(exc: BaseException) -> str:
    return " ".join(f"{type(exc).__name__}: {exc}".split())[:300]


def api_cells(what: str) -> list[Convention]:
    """Arguments the call lacks, read from its signature and its return."""
    return [
        Convention("key_padding_polarity", "not_applicable", f"{what} takes one mask (mask=), "
                   "no key-padding argument; padding goes into it"),
        Convention("dropout", "not_applicable", f"{what}: no dropout argument in its "
                   "signature"),
        Convention("weights_dropout", "not_applicable", f"{what} returns no attention "
                   "weights"),
        Convention("implicit_mask", "none", f"{what}: an mx.array carries no mask (nothing "
                   "like Keras's _keras_mask); only mask= masks"),
    ]


def _dtype_cell(run, what: str) -> Convention:
    """mixed_dtype from the output's dtype (or the system's error, quoted)."""
    mx, _ = import_mlx()
    try:
        out = run()
        mx.eval(out)
    except Exception as exc:  # the system's refusal is the observation
        return Convention("mixed_dtype", "refused", f"{what}: {error_text(exc)}")
    held = held_dtype(out)
    return Convention("mixed_dtype", "promoted" if held == "float64" else "cast_to_layer",
                      f"{what}: output {held}")


def _unbatched_cell(run, what: str) -> Convention:
    mx, _ = import_mlx()
    try:
        out = run()
        mx.eval(out)
    except Exception as exc:  # the system's refusal is the observation
        return Convention("unbatched_input", "refused", f"{what}: {error_text(exc)}")
    return Convention("unbatched_input", "accepted", f"{what}: output {tuple(out.shape)}")


def sdpa_cells() -> list[Convention]:
    """The fused op: no size argument, (B, N, T, D) by its docstring, a 2-D call, a float64
    q into float32 k, v."""
    mx, _ = import_mlx()
    rng = np.random.default_rng(0)
    a = {n: rng.standard_normal(s).astype(np.float32)
         for n, s in (("q", (3, 4)), ("k", (5, 4)), ("x", (2, 3, 8)), ("w", (2, 8, 4)))}
    q2, k2 = mx.array(a["q"]), mx.array(a["k"])
    x32, w32 = to_mx(mx, a["x"], "float32"), to_mx(mx, a["w"], "float32")
    q64 = project(mx, to_mx(mx, a["x"], "float64"), to_mx(mx, a["w"], "float64"), None)
    kv = project(mx, x32, w32, None)
    return [
        Convention("size_arguments", "given_tensors", f"{SDPA} takes projected q, k, v "
                   "(B, N, T, D); no size argument", "given_tensors", SDPA_DOC),
        Convention("input_layout", "batch_heads_first", f"{SDPA}: q (B, N_q, T_q, D) by its "
                   "docstring; the runner passes (B, H, T, d)", "batch_heads_first",
                   SDPA_DOC),
        _unbatched_cell(lambda: mx.fast.scaled_dot_product_attention(q2, k2, k2, scale=0.5),
                        f"{SDPA} on 2-D (L, d) q, k, v"),
        _dtype_cell(lambda: mx.fast.scaled_dot_product_attention(q64, kv, kv, scale=0.5),
                    f"{SDPA}: float64 q into float32 k, v"),
        *api_cells(SDPA),
    ]


def mha_cells(case, data) -> list[Convention]:
    """The layer: `dims` read from a weight's shape, batch-first inputs, a 2-D call and
    float64 inputs into the float32 layer (`case`: 2 heads of 3 over 8 features)."""
    mx, nn = import_mlx()
    shape = tuple(nn.MultiHeadAttention(6, 2, query_input_dims=8).query_proj.weight.shape)
    layer, _ = build(case, data.weights, "float32")
    x = data.inputs
    return [
        Convention("size_arguments", "total_over_heads", f"{MHA}(dims=6, num_heads=2, "
                   f"query_input_dims=8): query_proj.weight {shape}, head dim 6 / 2 = 3"),
        Convention("input_layout", "batch_first", f"{MHA}: queries (B, T, E), keys and "
                   "values (B, S, E), batch first"),
        _unbatched_cell(lambda: layer(*(to_mx(mx, a[0], "float32")
                                        for a in (x.query, x.key, x.value))),
                        f"{MHA} on 2-D (T=3, E=8) inputs"),
        _dtype_cell(lambda: layer(*(to_mx(mx, a, "float64") for a in (x.query, x.key,
                                                                        x.value))),
                    f"float64 inputs into a float32 {MHA}"),
        *api_cells(MHA),
    ]
