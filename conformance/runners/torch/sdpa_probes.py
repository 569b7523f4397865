"""Convention probes of F.scaled_dot_product_attention (torch.sdpa): the canonical
projections computed in NumPy-seeded torch tensors, SDPA called with one argument
passed raw, the output projected back and compared with the oracle under each
reading.  Parameter formula, weight layout, fully masked rows, float64 and
refusals are left to the matrix rows (ledger.py); the mask polarity, the float mask and
the causal flag are the ledger's own probes (conventions/probes/flags.py), which the
runners answer through torch/common.py's SDPAAnswers.  torch arrives as an argument.
"""
from __future__ import annotations

import inspect

import numpy as np

from conformance.contract.axes import NA
from conformance.contract.runner import Convention, to_numpy
from conformance.contract.probing import (
    closest, output_with, probe_case, refusal)
from conformance.oracle.canonical import case_data
from conformance.contract import probe_cells as _ledger
from conformance.runners.torch.common import SDPA_DOC
from conformance.runners._export.torch_mha import (
    scale_precision_cell, scale_probe_case)

DOC = {"documented_source": SDPA_DOC}


def _sdpa(torch, case, swap_kv: bool = False, layout: str = "bhtd"):
    """fwd(mask=None, **kw) -> (B, T, E_o) output: projections, SDPA, output projection."""
    d = case_data(case)
    w = {n: torch.tensor(a) for n, a in d.weights.arrays().items()}
    x = {n: torch.tensor(getattr(d.inputs, n)) for n in ("query", "key", "value")}
    if swap_kv:
        x["key"], x["value"] = x["value"], x["key"]

    def project(t, wn, bn):
        return torch.einsum("ble,hed->bhld", t, w[wn]) + w[bn][None, :, None, :]

    q, k, v = (project(x["query"], "wq", "bq"), project(x["key"], "wk", "bk"),
               project(x["value"], "wv", "bv"))
    dt = torch.float64 if case.inputs.dtype == "float64" else torch.float32
    q, k, v = (t.to(dt) for t in (q, k, v))

    def fwd(mask=None, **kw):
        if mask is not None:  # a float mask in the dtype of q, as SDPA requires
            m = mask if mask.dtype == bool else mask.astype(str(dt).split(".")[-1])
            kw["attn_mask"] = torch.from_numpy(np.ascontiguousarray(m[:, None]))
        a, b, c = (t.transpose(1, 2) for t in (q, k, v)) if layout == "bthd" else (q, k, v)
        with torch.no_grad():
            h = torch.nn.functional.scaled_dot_product_attention(a, b, c, **kw)
        h = h.transpose(1, 2) if layout == "bthd" else h
        return to_numpy(torch.einsum("bhtd,hde->bte", h.double(), w["wo"].double()) + w["bo"])

    return fwd, (q, k, v)


def _layout_cells(torch, case) -> list[Convention]:
    expected = output_with(case, None)
    what = f"probe_case {case.id}"
    swapped = case_data(case)
    sq = probe_case("sdpa-layout", inputs={"self_attention": True, "key_len": 3})
    layout = closest("input_layout", output_with(sq, None),
                     {"batch_heads_first": _sdpa(torch, sq)[0](),
                      "batch_first": _sdpa(torch, sq, layout="bthd")[0]()},
                     f"probe_case {sq.id}: q, k, v as (B, H, L, d) and as (B, L, H, d)",
                     documented="batch_heads_first", **DOC)
    order = closest("argument_order", _sdpa(torch, case)[0](),
                    {"query_key_value": expected, "query_value_key": _swapped(case, swapped)},
                    f"{what}: sdpa(q, k, v) with k and v distinct")
    _, (q, k, v) = _sdpa(torch, case)
    with torch.no_grad():
        one = torch.nn.functional.scaled_dot_product_attention(q[0, 0], k[0, 0], v[0, 0])
        ref = torch.nn.functional.scaled_dot_product_attention(q, k, v)[0, 0]
    unb = Convention("unbatched_input", "accepted", f"{what}: 2-D (L, d) q, k, v: output "
                     f"{tuple(one.shape)}, max |2-D - 4-D item 0 head 0| "
                     f"{float((one - ref).abs().max()):.1e}", documented="accepted", **DOC)
    return [layout, order, unb]


def _swapped(case, data):
    from dataclasses import replace

    return output_with(case, None, replace(data, inputs=replace(
        data.inputs, key=data.inputs.value, value=data.inputs.key)))


def _flag_cells(torch, case) -> list[Convention]:
    fwd, _ = _sdpa(torch, case)
    what = f"probe_case {case.id}"
    scale = _ledger.softmax_scale(case, lambda m: fwd(), what, configurable=(
        "scale= keyword (default None: 1/sqrt(E)); scale=1.0 gives "
        f"{_ledger.matches(case, fwd(scale=1.0)):.1e} from the default-scale oracle"))
    torch.manual_seed(0)
    dropped = _ledger.matches(case, fwd(dropout_p=0.5))
    drop = Convention("dropout", "always", f"{what}: dropout_p=0.5 in a plain call (no module, "
                      f"no training flag): output {dropped:.1e} from the oracle; dropout_p=0 "
                      f"{_ledger.matches(case, fwd()):.1e}", documented="always", **DOC)
    c64 = scale_probe_case()
    prec = scale_precision_cell(c64, _sdpa(torch, c64)[0](), f"probe_case {c64.id}: float64 "
                                "q, k, v, d_k=3")
    return [scale, drop, prec]


def sdpa_conventions(torch) -> list[Convention]:
    case = probe_case("sdpa")
    fwd, (q, k, v) = _sdpa(torch, case)
    what = f"probe_case {case.id}"
    params = list(inspect.signature(torch.nn.functional.scaled_dot_product_attention)
                  .parameters) if _has_signature(torch) else []
    sig = ", ".join(params) or "query, key, value, attn_mask, dropout_p, is_causal, scale, "\
        "enable_gqa"
    cells = [Convention("size_arguments", "given_tensors", f"{what}: the signature ({sig}) "
                        f"takes projected tensors, e.g. q {tuple(q.shape)}; any head size",
                        documented="given_tensors", **DOC)]
    cells += _layout_cells(torch, case)
    cells.append(Convention("key_padding_polarity", NA, f"no key-padding argument: the "
                            f"signature is ({sig}); padding goes into attn_mask"))
    one = torch.nn.functional.scaled_dot_product_attention(q, k, v)
    cells.append(Convention("returned_weights", "none", f"{what}: returns one tensor "
                            f"{tuple(one.shape)}, no weights", documented="none", **DOC))
    cells.append(Convention("weights_dropout", NA, "returns no attention weights"))
    cells += _flag_cells(torch, case)
    try:
        torch.nn.functional.scaled_dot_product_attention(q.double(), k, v)
        mixed = Convention("mixed_dtype", "promoted", f"{what}: float64 q with float32 k, v ran")
    except Exception as exc:
        mixed = refusal("mixed_dtype", exc, f"{what}: float64 q, float32 k and v")
    cells.append(mixed)
    cells.append(Convention("implicit_mask", "none", "a torch.Tensor carries no mask; SDPA "
                            "reads only attn_mask and is_causal"))
    return cells


def _has_signature(torch) -> bool:
    try:
        inspect.signature(torch.nn.functional.scaled_dot_product_attention)
        return True
    except (TypeError, ValueError):
        return False


def gqa_cell(torch) -> Convention:
    """enable_gqa=True with 4 query heads and 2 kv heads of distinct weights; the call
    without it is quoted beside (SDPA then needs equal head counts)."""
    from conformance.contract.position_head_probes import gqa_case, kv_head_mapping

    case = gqa_case()
    d = case_data(case)
    w = {n: torch.tensor(a) for n, a in d.weights.arrays().items()}
    x = torch.tensor(d.inputs.query)

    def project(wn, bn):
        return torch.einsum("ble,hed->bhld", x, w[wn]) + w[bn][None, :, None, :]

    def fwd(**kw):
        q, k, v = project("wq", "bq"), project("wk", "bk"), project("wv", "bv")
        with torch.no_grad():
            h = torch.nn.functional.scaled_dot_product_attention(q.float(), k.float(),
                                                                 v.float(), **kw)
        return to_numpy(torch.einsum("bhtd,hde->bte", h.double(), w["wo"]) + w["bo"])

    try:
        fwd()
        without = "without enable_gqa it runs"
    except Exception as exc:
        without = f"without enable_gqa: {' '.join(f'{type(exc).__name__}: {exc}'.split())[:160]}"
    cell = kv_head_mapping(case, lambda: fwd(enable_gqa=True), f"probe_case {case.id}: "
                           "q (B, 4, T, d), k and v (B, 2, S, d), enable_gqa=True",
                           documented="grouped", **DOC)
    return Convention(cell.axis, cell.value, f"{cell.evidence}; {without}", cell.documented,
                      cell.documented_source)
