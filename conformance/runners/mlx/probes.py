"""Convention probes of the MLX runners (Runner.conventions, axes.py).

Each probe runs MLX on a small seeded probe case (2 heads, 8 features, T 3, S 5
unless said) with one native argument passed raw, and names the reading of that
argument the output matches (probing.closest), every distance as the figure.  The mask
polarity, the float mask and the causal flag are the ledger's own probes
(conventions/probes/flags.py), which the runners answer (common.MlxAnswers).
mlx.sdpa is probed through the same explicit projections its rows use
(common.explicit); mlx.mha through the layer itself.  Axes the matrix rows settle
(fully masked rows, returned weights, float64, parameters, layout, refusals) are
left to the ledger.  mlx is imported inside the functions only.
"""
from __future__ import annotations

from dataclasses import replace

import numpy as np

from conformance.contract import probe_cells as _ledger
from conformance.contract.axes import IGNORED, NA, NOT_PROBED
from conformance.contract.probing import (
    closest, distances, feature_cells, nearest, output_with, probe_case,
    refusal)
from conformance.contract.runner import Convention
from conformance.oracle import positional
from conformance.oracle.canonical import case_data
from conformance.oracle.reference import attention
from conformance.runners.mlx.common import (
    MHA,
    SDPA_DOC, build, core_plan, explicit, held_dtype, import_mlx, to_f64, to_mx)

SDPA = "mx.fast.scaled_dot_product_attention"
ALIBI_FIX = "https://github.com/ml-explore/mlx/pull/3071"
DOCS_ROPE = ("https://ml-explore.github.io/mlx/build/html/python/_autosummary/"
             "mlx.core.fast.rope.html")
OWN = ("rope_style", "rope_partial", "kv_head_mapping", "alibi_slopes", "sinks")


def sdpa_fwd(case, data=None):
    """fwd(mask=None, **plan changes) -> (B, T, E_o) output of the sdpa row's ops, the
    mask passed raw as (B, 1, T, S) (or a string)."""
    mx, _ = import_mlx()
    data = data or case_data(case)

    def fwd(mask=None, **changes):
        raw = mask if mask is None or isinstance(mask, str) else mx.array(
            np.asarray(mask)[:, None])
        plan = replace(core_plan(case), **changes)
        return to_f64(mx, explicit(mx, case, data, plan, raw)[0])

    return fwd


def mha_fwd(case, data=None):
    """fwd(mask=None) -> the layer's output, the mask passed raw as (B, 1, T, S)."""
    mx, _ = import_mlx()
    data = data or case_data(case)
    layer, _ = build(case, data.weights, "float32")
    x = data.inputs

    def fwd(mask=None, swap=False):
        k, v = (x.value, x.key) if swap else (x.key, x.value)
        m = None if mask is None else (mask if isinstance(mask, str) else
                                       mx.array(np.asarray(mask)[:, None]))
        return to_f64(mx, layer(*(to_mx(mx, a, "float32") for a in (x.query, k, v)), mask=m))

    return fwd


def _swapped(case):
    data = case_data(case)
    return replace(data, inputs=replace(data.inputs, key=data.inputs.value,
                                        value=data.inputs.key))


def mask_cells(what: str) -> list[Convention]:
    """The mask polarity, the float mask and the causal flag are the ledger's own probes
    (conventions/probes/flags.py), answered by common.MlxAnswers; these are read here."""
    return [
        Convention("key_padding_polarity", NA, f"{what} takes one mask (mask=), no "
                   "key-padding argument; padding goes into it"),
        Convention("dropout", NA, f"{what}: no dropout argument in its signature"),
        Convention("weights_dropout", NA, f"{what} returns no attention weights"),
        Convention("implicit_mask", "none", f"{what}: an mx.array carries no mask (nothing "
                   "like Keras's _keras_mask); only mask= masks"),
    ]


def scale_precision(case, run64, what: str) -> Convention:
    """A float64 call against the exact and the float32-rounded scale; `not_probed` where
    the float32 softmax ('performed in float32 regardless of the input precision', its
    docstring) leaves neither reading within 1e-12: a measurement limit, not MLX's word."""
    try:
        out = run64()
    except Exception as exc:
        return refusal("scale_precision", exc, f"{what} in float64")
    held = held_dtype(out)
    if held != "float64":
        return Convention("scale_precision", NOT_PROBED, f"{what} with float64 arrays answers "
                          f"{held} ('the softmax operation is performed in float32 "
                          "regardless of the input precision'): no float64 scale to round")
    mx, _ = import_mlx()
    exact = 1 / np.sqrt(case.attention.qk_head_dim)
    d = distances(to_f64(mx, out), {
        "float64": output_with(case, None, scale=exact),
        "float32_rounded": output_with(case, None, scale=float(np.float32(exact)))})
    cell = nearest("scale_precision", d, f"{what}, float64 arrays, output {held}")
    if min(d.values()) > 1e-12:  # the float32 softmax hides a scale's rounding
        return Convention("scale_precision", NOT_PROBED, f"{cell.evidence}; neither within "
                          "1e-12: the softmax runs in float32 ('regardless of the input "
                          "precision'), so "
                          "the scale's rounding is not separable (see float64_compute)")
    return cell


def grouped_cell() -> Convention:
    """kv_head_mapping: 6 query heads over 3 kv heads with distinct kv weights."""
    case = probe_case("mlx-gqa", attention={"num_heads": 6, "num_kv_heads": 3,
                                            "query_features": 12})
    data = case_data(case)
    out = sdpa_fwd(case, data)()
    return closest("kv_head_mapping", out, _ledger.kv_mapping_candidates(case, data),
                   f"{SDPA} on 6 query heads, 3 untiled k/v heads with distinct weights "
                   "(grouped: head h reads kv head h // 2; tiled: h % 3)",
                   documented_source=SDPA_DOC)


def rope_cells() -> list[Convention]:
    """fast.rope's traditional flag and dims < head dim against the two pairings."""
    case = probe_case("mlx-rope", attention={"qk_head_dim": 8, "v_head_dim": 8,
                                             "rope": {"style": "half_split"}},
                      inputs={"position_offset": 3})
    out = {trad: sdpa_fwd(case)(rope=(8, trad, 10000.0), offsets=(3, 3))
           for trad in (False, True)}
    cands = {s: attention(replace(case, attention=replace(
        case.attention, rope=replace(case.attention.rope, style=s)))).output
        for s in ("half_split", "interleaved")}
    d = {t: distances(out[t], cands) for t in out}
    pick = {t: min(d[t], key=d[t].get) for t in d}
    word = "choosable" if pick[False] != pick[True] else pick[False]
    figures = "; ".join(f"traditional={t}: " + ", ".join(f"{s} {v:.1e}" for s, v in d[t].items())
                        for t in d)
    style = Convention("rope_style", word, f"mx.fast.rope(x, 8, traditional=..., base=1e4, "
                       f"offset=3) on q and k before {SDPA}, max |output - oracle| under each "
                       f"pairing: {figures}", documented="choosable",
                       documented_source=DOCS_ROPE)
    part = probe_case("mlx-rope-partial", attention={
        "qk_head_dim": 8, "v_head_dim": 8, "rope": {"style": "half_split", "rotary_dim": 4}})
    got = sdpa_fwd(part)(rope=(4, False, 10000.0))
    full = attention(replace(part, attention=replace(part.attention, rope=replace(
        part.attention.rope, rotary_dim=8)))).output
    partial = closest("rope_partial", got, {"supported": attention(part).output,
                                            IGNORED: full},
                      "mx.fast.rope(x, dims=4) on head dim 8 (ignored: dims=4 accepted, all 8 "
                      "rotate)", documented="supported", documented_source=DOCS_ROPE)
    return [style, partial]


def alibi_cell() -> Convention:
    """nn.ALiBi's slopes for 6 heads (not a power of two) against the paper's rule,
    read from create_alibi_slope and from a causal run (where -|i - j| = j - i)."""
    mx, nn = import_mlx()
    got = to_f64(mx, nn.ALiBi.create_alibi_slope(6)).ravel()
    paper = positional.alibi_slopes(6)
    err = float(np.max(np.abs(got - paper)))
    case = probe_case("mlx-alibi", attention={"num_heads": 6, "query_features": 12,
                                              "alibi": True},
                      inputs={"self_attention": True, "key_len": 3}, mask={"causal": "upper_left"})
    run = to_f64(mx, explicit(mx, case, case_data(case), core_plan(case))[0])
    d = float(np.max(np.abs(run - attention(case).output)))
    return Convention("alibi_slopes", "paper" if err < 1e-6 else "other",
                      f"nn.ALiBi.create_alibi_slope(6) = {np.round(got, 5).tolist()}, the "
                      f"paper's {np.round(paper, 5).tolist()} (max diff {err:.1e}); a causal "
                      f"6-head run with create_alibi_matrix as the additive mask is {d:.1e} "
                      "from the oracle (the paper's rule since ml-explore/mlx#3071; before it, "
                      "2 ** (-8 (h + 1) / n) for every n).  Its bias is -slope * |i - j|: "
                      "symmetric, so keys after the query differ from the paper's slope * "
                      "(j - i) without a causal mask", documented="paper",
                      documented_source=ALIBI_FIX)


def sinks_cell() -> Convention:
    mx, _ = import_mlx()
    case = probe_case("mlx-sinks", attention={"sinks": True})
    data = case_data(case)
    plan = replace(core_plan(case), mask="none")
    w = {n: to_mx(mx, a, "float32") for n, a in data.weights.arrays().items()}
    x = {n: to_mx(mx, getattr(data.inputs, n), "float32") for n in ("query", "key", "value")}
    from conformance.runners.mlx.common import project

    q, k, v = (project(mx, x[n], w[f"w{n[0]}"], w.get(f"b{n[0]}"))
               for n in ("query", "key", "value"))
    heads = mx.fast.scaled_dot_product_attention(q, k, v, scale=plan.scale, sinks=w["sinks"])
    out = to_f64(mx, mx.einsum("bhtd,hde->bte", heads, w["wo"]) + w["bo"])
    plain = replace(data, weights=replace(data.weights, sinks=None))
    return closest("sinks", out, {"applied": attention(case, data).output,
                                  "ignored": attention(case, plain).output},
                   f"{SDPA}(..., sinks=(H,) logits) on {case.id}", documented_source=SDPA_DOC)


def sdpa_cells() -> list[Convention]:
    mx, nn = import_mlx()
    case = probe_case("mlx-sdpa")
    fwd = sdpa_fwd(case)
    data64 = case_data(probe_case("mlx-sdpa-64", inputs={"dtype": "float64"}))
    c64 = probe_case("mlx-sdpa-64", inputs={"dtype": "float64"})
    cells = [
        Convention("size_arguments", "given_tensors", f"{SDPA} takes projected q, k, v "
                   "(B, N, T, D); no size argument", "given_tensors", SDPA_DOC),
        closest("argument_order", fwd(), {"query_key_value": output_with(case, None),
                                          "query_value_key": output_with(
                                              case, None, _swapped(case))},
                f"{SDPA}(q, k, v) with distinct k and v"),
        Convention("input_layout", "batch_heads_first", f"{SDPA}: q (B, N_q, T_q, D) by its "
                   f"docstring; the rows pass (B, H, T, d): {_ledger.matches(case, fwd()):.1e} "
                   "from the oracle", "batch_heads_first", SDPA_DOC),
        _unbatched_sdpa(mx),
        *mask_cells(SDPA),
        Convention("softmax_scale", "configurable", f"{SDPA}: scale= is a required "
                   "keyword (the rows pass 1/sqrt(d_k) or attention.scale)", "configurable",
                   SDPA_DOC),
        scale_precision(c64, lambda: explicit(mx, c64, data64, core_plan(c64))[0], SDPA),
        _mixed_sdpa(mx, case),
        grouped_cell(), *rope_cells(), alibi_cell(), sinks_cell(),
    ]
    return cells + feature_cells(SDPA, mx.fast.scaled_dot_product_attention, mx.fast.rope,
                                 skip=OWN)


def _unbatched_sdpa(mx) -> Convention:
    rng = np.random.default_rng(0)
    q = mx.array(rng.standard_normal((3, 4)).astype(np.float32))
    k = mx.array(rng.standard_normal((5, 4)).astype(np.float32))
    what = f"{SDPA} on 2-D (L, d) q, k, v"
    try:
        out = mx.fast.scaled_dot_product_attention(q, k, k, scale=0.5)
        mx.eval(out)
    except Exception as exc:
        return refusal("unbatched_input", exc, what)
    return Convention("unbatched_input", "accepted", f"{what}: output {tuple(out.shape)}")


def _mixed_sdpa(mx, case) -> Convention:
    data = case_data(case)
    w = {n: to_mx(mx, a, "float32") for n, a in data.weights.arrays().items()}
    what = f"{SDPA}: float64 q into float32 k, v"
    from conformance.runners.mlx.common import project

    x = data.inputs
    q = project(mx, to_mx(mx, x.query, "float64"), w["wq"].astype(mx.float64),
                w["bq"].astype(mx.float64))
    k, v = project(mx, to_mx(mx, x.key, "float32"), w["wk"], w["bk"]), project(
        mx, to_mx(mx, x.value, "float32"), w["wv"], w["bv"])
    try:
        out = mx.fast.scaled_dot_product_attention(q, k, v, scale=0.5)
        mx.eval(out)
    except Exception as exc:
        return refusal("mixed_dtype", exc, what)
    held = held_dtype(out)
    return Convention("mixed_dtype", "promoted" if held == "float64" else "cast_to_layer",
                      f"{what}: output {held}")


def mha_cells() -> list[Convention]:
    mx, nn = import_mlx()
    case = probe_case("mlx-mha", attention={"qk_head_dim": 3, "v_head_dim": 3})
    fwd = mha_fwd(case)
    out = fwd()
    shape = tuple(nn.MultiHeadAttention(6, 2, query_input_dims=8).query_proj.weight.shape)
    cells = [
        Convention("size_arguments", "total_over_heads", f"{MHA}(dims=6, num_heads=2, "
                   f"query_input_dims=8): query_proj.weight {shape}, head dim 6 / 2 = 3; "
                   f"output {_ledger.matches(case, out):.1e} from the oracle with d_k = 3"),
        closest("argument_order", out, {"query_key_value": output_with(case, None),
                                        "query_value_key": output_with(case, None,
                                                                       _swapped(case))},
                f"{MHA}(queries, keys, values) positionally with distinct keys and values"),
        Convention("input_layout", "batch_first", f"{MHA}: (B=2, T=3, E=8) and (B, S=5, E) "
                   f"read batch-first: {_ledger.matches(case, out):.1e} from the oracle"),
        _unbatched_mha(mx, case),
        *mask_cells(MHA),
        closest("softmax_scale", out, {"inv_sqrt_head_dim": output_with(case, None),
                                       "none": output_with(case, None, scale=1.0)},
                f"{MHA}, d_k = 3, no scale argument (scale = sqrt(1 / queries.shape[-1]))"),
        _mha_float64(mx), _mixed_mha(mx, case),
    ]
    return cells + feature_cells(MHA, nn.MultiHeadAttention.__init__,
                                 nn.MultiHeadAttention.__call__)


def _unbatched_mha(mx, case) -> Convention:
    layer, _ = build(case, case_data(case).weights, "float32")
    x = case_data(case).inputs
    what = f"{MHA} on 2-D (T=3, E=8) inputs"
    try:
        out = layer(*(to_mx(mx, a[0], "float32") for a in (x.query, x.key, x.value)))
        mx.eval(out)
    except Exception as exc:
        return refusal("unbatched_input", exc, what)
    return Convention("unbatched_input", "accepted", f"{what}: output {tuple(out.shape)}")


def _mha_float64(mx) -> Convention:
    case = probe_case("mlx-mha-64", inputs={"dtype": "float64"})
    data = case_data(case)

    def run():
        layer, _ = build(case, data.weights, "float64")
        x = data.inputs
        return layer(*(to_mx(mx, a, "float64") for a in (x.query, x.key, x.value)))

    return scale_precision(case, run, MHA)


def _mixed_mha(mx, case) -> Convention:
    layer, _ = build(case, case_data(case).weights, "float32")
    x = case_data(case).inputs
    what = f"float64 inputs into a float32 {MHA}"
    try:
        out = layer(*(to_mx(mx, a, "float64") for a in (x.query, x.key, x.value)))
        mx.eval(out)
    except Exception as exc:
        return refusal("mixed_dtype", exc, what)
    held = held_dtype(out)
    return Convention("mixed_dtype", "promoted" if held == "float64" else "cast_to_layer",
                      f"{what}: output {held}, {_ledger.matches(case, to_f64(mx, out)):.1e} "
                      "from the float64 oracle")
