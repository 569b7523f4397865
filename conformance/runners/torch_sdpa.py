"""`torch.nn.functional.scaled_dot_product_attention` with explicit projections.

SDPA holds no parameters: the projections are plain tensors we compute from
the canonical weights, so it can express what nn.MultiheadAttention cannot
(per-head widths, any output width, grouped-query via `enable_gqa=True`).
Its boolean mask is True = *attend* (the opposite of nn.MultiheadAttention),
and `is_causal=True` is aligned to the upper left; a lower-right diagonal
needs `torch.nn.attention.bias.causal_lower_right`.  It returns no attention
weights.  torch is imported inside `run` only.
"""
from __future__ import annotations

from . import Observation, Runner, Translation, to_numpy
from .torch_mha import import_torch, tensors, torch_dtype


def _mask_plan(case, inputs) -> dict:
    """Which SDPA mask argument a user would pass for this case."""
    only_causal = inputs.key_valid is None and inputs.attn_mask is None
    if inputs.causal is not None and only_causal:
        if case.mask.causal == "upper_left" or case.inputs.query_len == case.inputs.key_len:
            return {"is_causal": True}
        return {"attn_mask": "causal_lower_right(T, S)"}
    if inputs.allowed is not None:
        return {"attn_mask": "bool (B, 1, T, S), True = attend"}
    return {}


class TorchSDPA(Runner):
    name = "torch.sdpa"
    framework = "torch"
    requires = ("torch",)

    def translate(self, case):
        from ..weights import case_data

        kwargs = _mask_plan(case, case_data(case).inputs)
        if case.grouped:
            kwargs["enable_gqa"] = True
        args = ", ".join(["q, k, v"] + [f"{k}={v}" for k, v in kwargs.items()])
        return Translation(f"torch.nn.functional.scaled_dot_product_attention({args})", kwargs)

    def run(self, case, translation, data):
        torch = import_torch()
        F = torch.nn.functional

        dt = torch_dtype(torch, case.inputs.dtype)
        w = {n: torch.tensor(a, dtype=dt) for n, a in data.weights.arrays().items()}
        xq, xk, xv = tensors(torch, case, data.inputs)

        def project(x, wn, bn):  # (B, L, E) x (H, E, d) -> (B, H, L, d)
            y = torch.einsum("ble,hed->bhld", x, w[wn])
            return y + w[bn][None, :, None, :] if bn in w else y

        kw = dict(translation.kwargs)
        if kw.get("attn_mask") == "causal_lower_right(T, S)":
            from torch.nn.attention.bias import causal_lower_right

            kw["attn_mask"] = causal_lower_right(case.inputs.query_len, case.inputs.key_len)
        elif "attn_mask" in kw:
            kw["attn_mask"] = torch.tensor(data.inputs.allowed[:, None])
        with torch.no_grad():
            heads = F.scaled_dot_product_attention(project(xq, "wq", "bq"),
                                                   project(xk, "wk", "bk"),
                                                   project(xv, "wv", "bv"), **kw)
            out = torch.einsum("bhtd,hde->bte", heads, w["wo"])
            out = out + w["bo"] if "bo" in w else out
        return Observation(
            output=to_numpy(out), parameters=None,
            projection_parameters=sum(a.size for a in data.weights.arrays().values()),
            weight_shapes={n: tuple(a.shape) for n, a in data.weights.arrays().items()},
            notes=["holds no parameters: the canonical projections are passed as tensors",
                   "returns no attention weights"],
            extras={"mask_polarity": "True = attend"})
