"""What the torch runners share beyond the nn.MultiheadAttention module (which the
exports share too: runners/_export/torch_mha.py): their class attributes, the fast-path
spy, SDPA's plan of a case, its hand-made projections, its single call and observation,
and the raw calls SDPA answers for the ledger.  torch is imported inside the functions
only.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from conformance.contract.runner import Runner
from conformance.runners._export.torch_mha import torch_dtype


class TorchRunner(Runner):
    """What every runner of this folder declares alike."""

    framework = "torch"
    requires = ("torch",)
    seconds = 0.05


SDPA_DOC = ("https://docs.pytorch.org/docs/stable/generated/"
            "torch.nn.functional.scaled_dot_product_attention.html")


MASK_WORDS = {"causal_lower_right": "causal_lower_right(T, S)",
              "bool": "bool (B, 1, T, S), True = attend"}  # as the call shows them


@dataclass(frozen=True)
class SdpaPlan:
    """Which SDPA arguments a user would pass for the case."""

    is_causal: bool = False  # is_causal=True: the causal part alone, upper-left aligned
    mask: Literal["none", "causal_lower_right", "bool"] = "none"  # what attn_mask gets
    enable_gqa: bool = False
    scale: float | None = None  # scale=: only when the case sets attention.scale

    def arguments(self) -> str:
        """The call's arguments, e.g. "q, k, v, is_causal=True"."""
        args = ["q, k, v"]
        if self.is_causal:
            args.append("is_causal=True")
        if self.mask != "none":
            args.append(f"attn_mask={MASK_WORDS[self.mask]}")
        if self.enable_gqa:
            args.append("enable_gqa=True")
        if self.scale is not None:
            args.append(f"scale={self.scale!r}")
        return ", ".join(args)


def sdpa_plan(case, gqa: bool = False) -> SdpaPlan:
    """Read from the case alone (no arrays): a causal mask with nothing else goes
    to is_causal (or causal_lower_right where the alignment needs it), any other
    mask to a boolean attn_mask holding every part.  enable_gqa=True on grouped cases,
    and on every case with `gqa` (torch.sdpa.gqa)."""
    causal = case.mask.causal != "none"
    common = {"enable_gqa": gqa or case.grouped, "scale": case.attention.scale}
    if causal and not case.has_non_causal_mask:
        if case.mask.causal == "upper_left" or case.inputs.query_len == case.inputs.key_len:
            return SdpaPlan(is_causal=True, **common)
        return SdpaPlan(mask="causal_lower_right", **common)
    return SdpaPlan(mask="bool" if causal or case.has_non_causal_mask else "none", **common)


def sdpa_call(torch, case, plan: SdpaPlan, data):
    """F.scaled_dot_product_attention called as `plan` says on the canonical projections:
    the Observation of its heads through the output projection."""
    from conformance.runners._export.torch_mha import tensors

    w, project = canonical_projector(torch, case, data)
    xq, xk, xv = tensors(torch, case, data.inputs)
    kw = {"is_causal": True} if plan.is_causal else {}
    if plan.mask == "causal_lower_right":
        from torch.nn.attention.bias import causal_lower_right

        kw["attn_mask"] = causal_lower_right(case.inputs.query_len, case.inputs.key_len)
    elif plan.mask == "bool":
        kw["attn_mask"] = torch.tensor(data.inputs.allowed[:, None])
    if plan.enable_gqa:
        kw["enable_gqa"] = True
    if plan.scale is not None:
        kw["scale"] = plan.scale
    with torch.no_grad():
        heads = torch.nn.functional.scaled_dot_product_attention(
            project(xq, "wq", "bq"), project(xk, "wk", "bk"), project(xv, "wv", "bv"), **kw)
        return sdpa_observation(
            torch, heads, w, data, ["holds no parameters: the canonical projections are "
                                    "passed as tensors", "returns no attention weights"],
            extras={"mask_polarity": "True = attend"})


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

    answers = frozenset({"attn_mask", "is_causal", "dropout_training", "input_dtype",
                         "unbatched", "dropout_weights"})
    probe_takes = frozenset({"grouped"})  # k, v with fewer heads (enable_gqa)
    # the documentation's reference code: attn_bias.masked_fill_(attn_mask.logical_not(),
    # float("-inf"))
    documented_fill = ("-inf", SDPA_DOC)

    def signatures(self):
        from conformance.runners._export.torch_mha import import_torch

        return ("scaled_dot_product_attention",
                (import_torch().nn.functional.scaled_dot_product_attention,))

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
        if raw.argument in ("input_dtype", "unbatched", "dropout_weights"):
            return sdpa_native_call(torch, raw, (q, k, v), w)
        kw, call = {}, "scaled_dot_product_attention(q, k, v"
        if raw.argument == "attn_mask":
            m = np.asarray(raw.value)
            m = m if m.dtype == bool else m.astype(str(dt).split(".")[-1])  # SDPA: q's dtype
            kw["attn_mask"] = torch.from_numpy(np.ascontiguousarray(m[:, None]))
            call += f", attn_mask=<{m.dtype} (B, 1, T, S)>"
        elif raw.argument == "is_causal":
            kw["is_causal"] = bool(raw.value)
            call += f", is_causal={bool(raw.value)}"
        elif raw.argument == "dropout_training":  # a plain call: no training switch
            kw["dropout_p"] = float(raw.value["rate"])
            call += f", dropout_p={kw['dropout_p']}) (no training switch: asked training=" \
                f"{raw.value['training']}"
            torch.manual_seed(0)
        else:
            raise NotImplementedError(f"{self.name} passes no raw {raw.argument}")
        with torch.no_grad():
            h = torch.nn.functional.scaled_dot_product_attention(q, k, v, **kw)
        out = torch.einsum("bhtd,hde->bte", h.double(), w["wo"].double())
        return to_numpy(out if "bo" not in w else out + w["bo"]), call + ")"


def sdpa_native_call(torch, raw, qkv, w):
    """SDPA on the projected (B, H, T, d) q, k, v with one of the calls whose answer is more
    than an output (RAW_ARGUMENTS): q alone cast to raw.value (k and v stay in the case's
    dtype: the function holds no weights, so the query is the input); item 0 as (H, T, d)
    tensors; dropout_p at raw.value['rate'] (torch.manual_seed(0)), the function returning
    no weights.  The output is projected back; native_dtype is SDPA's own output's."""
    from conformance.contract.runner import Observation, to_numpy

    q, k, v = qkv
    sdpa = torch.nn.functional.scaled_dot_product_attention
    if raw.argument == "input_dtype":
        q = q.to(getattr(torch, raw.value))
        call = f"scaled_dot_product_attention(q.to({raw.value}), k, v)"
    elif raw.argument == "unbatched":
        q, k, v = q[0], k[0], v[0]
        call = "scaled_dot_product_attention(q[0], k[0], v[0]) on (H, T, d) tensors"
    else:
        torch.manual_seed(0)
        call = f"scaled_dot_product_attention(q, k, v, dropout_p={raw.value['rate']})"
    with torch.no_grad():
        h = sdpa(q, k, v, dropout_p=raw.value["rate"]) if raw.argument == "dropout_weights" \
            else sdpa(q, k, v)
    held = str(h.dtype).split(".")[-1]
    out = torch.einsum("...htd,hde->...te", h.double(), w["wo"].double())
    out = out if "bo" not in w else out + w["bo"].double()
    return Observation(output=to_numpy(out), native_dtype=held), call
