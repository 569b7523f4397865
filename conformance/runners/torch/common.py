"""What the torch runners share beyond the nn.MultiheadAttention module (which the
exports share too: runners/_export/torch_mha.py): their class attributes, the fast-path
spy and SDPA's hand-made projections and observation.  torch is imported inside the
functions only.
"""
from __future__ import annotations

from conformance.contract.runner import Runner
from conformance.runners._export.torch_mha import torch_dtype


class TorchRunner(Runner):
    """What every runner of this folder declares alike."""

    framework = "torch"
    requires = ("torch",)
    seconds = 0.05


SDPA_DOC = ("https://docs.pytorch.org/docs/stable/generated/"
            "torch.nn.functional.scaled_dot_product_attention.html")


def fast_call(torch, mha, args, **kwargs):
    """Forward under inference_mode; returns (output, weights, whether the native fast
    path ran), seen by wrapping torch._native_multi_head_attention for the call."""
    native, calls = torch._native_multi_head_attention, []

    def spy(*a, **k):
        calls.append(1)
        return native(*a, **k)

    torch._native_multi_head_attention = spy
    try:
        with torch.inference_mode():
            out, weights = mha(*args, **kwargs)
    finally:
        torch._native_multi_head_attention = native
    return out, weights, bool(calls)


def canonical_projector(torch, case, data):
    """(weights as tensors, project): the canonical weights in the case's dtype, and
    project(x, "wq", "bq") = (B, L, E) x (H, E, d) -> (B, H, L, d) plus the bias: the
    projections a caller of F.scaled_dot_product_attention makes by hand."""
    dt = torch_dtype(torch, case.inputs.dtype)
    w = {n: torch.tensor(a, dtype=dt) for n, a in data.weights.arrays().items()}

    def project(x, wn, bn):
        y = torch.einsum("ble,hed->bhld", x, w[wn])
        return y + w[bn][None, :, None, :] if bn in w else y

    return w, project


def sdpa_observation(torch, heads, w: dict, data, notes: list[str], **extras):
    """The Observation of SDPA heads (B, H, T, d_v) through the canonical output
    projection: SDPA itself holds no parameters (the projections were passed in)."""
    from conformance.contract.runner import Observation, to_numpy

    out = torch.einsum("bhtd,hde->bte", heads, w["wo"])
    out = out + w["bo"] if "bo" in w else out
    arrays = data.weights.arrays()
    return Observation(
        output=to_numpy(out), parameters=None,
        projection_parameters=sum(a.size for a in arrays.values()),
        weight_shapes={n: tuple(a.shape) for n, a in arrays.items()}, notes=notes, **extras)


class SDPAAnswers:
    """A runner whose system is F.scaled_dot_product_attention answers the ledger's raw
    calls (Runner.answer) with it: the canonical projections as torch tensors, SDPA called
    with the one argument given, the output projected back.  It only calls; the ledger's
    probes (conventions/probes/flags.py) judge."""

    answers = frozenset({"attn_mask", "is_causal"})
    # the documentation's reference code: attn_bias.masked_fill_(attn_mask.logical_not(),
    # float("-inf"))
    documented_fill = ("-inf", SDPA_DOC)
    documented_conventions = {"attn_mask_polarity": ("true_attends", SDPA_DOC),
                              "float_mask": ("added", SDPA_DOC),
                              "causal_flag": ("upper_left", SDPA_DOC)}

    def answer(self, case, data, raw):
        import numpy as np

        from conformance.contract.runner import to_numpy
        from conformance.runners._export.torch_mha import import_torch

        torch = import_torch()
        w = {n: torch.tensor(a) for n, a in data.weights.arrays().items()}
        x = {n: torch.tensor(getattr(data.inputs, n)) for n in ("query", "key", "value")}
        dt = torch_dtype(torch, case.inputs.dtype)

        def project(t, wn, bn):
            y = torch.einsum("ble,hed->bhld", t, w[wn])
            return (y if bn not in w else y + w[bn][None, :, None, :]).to(dt)

        q, k, v = (project(x["query"], "wq", "bq"), project(x["key"], "wk", "bk"),
                   project(x["value"], "wv", "bv"))
        kw, call = {}, "scaled_dot_product_attention(q, k, v"
        if raw.argument == "attn_mask":
            m = np.asarray(raw.value)
            m = m if m.dtype == bool else m.astype(str(dt).split(".")[-1])  # SDPA: q's dtype
            kw["attn_mask"] = torch.from_numpy(np.ascontiguousarray(m[:, None]))
            call += f", attn_mask=<{m.dtype} (B, 1, T, S)>"
        elif raw.argument == "is_causal":
            kw["is_causal"] = bool(raw.value)
            call += f", is_causal={bool(raw.value)}"
        else:
            raise NotImplementedError(f"{self.name} passes no raw {raw.argument}")
        with torch.no_grad():
            h = torch.nn.functional.scaled_dot_product_attention(q, k, v, **kw)
        out = torch.einsum("bhtd,hde->bte", h.double(), w["wo"].double())
        return to_numpy(out if "bo" not in w else out + w["bo"]), call + ")"
