"""`torch.nn.functional.scaled_dot_product_attention` with explicit projections.

SDPA holds no parameters: the projections are plain tensors we compute from
the canonical weights, so it can express what nn.MultiheadAttention cannot
(per-head widths, any output width, grouped-query via `enable_gqa=True`).
Its boolean mask is True = *attend* (the opposite of nn.MultiheadAttention),
and `is_causal=True` is aligned to the upper left; a lower-right diagonal
needs `torch.nn.attention.bias.causal_lower_right`.  It returns no attention
weights.  `scale=` is passed only when the case sets attention.scale.  torch is
imported inside `run` only.

torch.sdpa passes enable_gqa=True on grouped cases; torch.sdpa.gqa (gqa=True) passes it on
every case, so its row is SDPA's own head mapping throughout (with H_kv == H it must be the
identity).  torch has no rotary-embedding op, so neither row takes attention.rope.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from conformance.contract.runner import Count, Translation
from conformance.runners.torch.common import (
    SDPAAnswers, TorchRunner, canonical_projector, sdpa_observation)
from conformance.runners._export.torch_mha import import_torch, tensors
from conformance.contract.probing import feature_cells
from conformance.runners.torch.sdpa_probes import gqa_cell, sdpa_conventions

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


class TorchSDPA(SDPAAnswers, TorchRunner):
    name = "torch.sdpa"
    system = "torch.nn.functional.scaled_dot_product_attention"
    description = ("`F.scaled_dot_product_attention` with explicit projections (GQA, any "
                   "head size)")
    no_parameters_label = "torch SDPA"
    sets_scale = True  # scale= (default 1/sqrt(E), E = the last dim of q)
    gqa = False  # torch.sdpa.gqa: enable_gqa=True on every case

    def __init__(self, **params):
        super().__init__(**params)
        if self.gqa:
            self.name, self.path = "torch.sdpa.gqa", "enable_gqa=True"
            self.description = (
                "`F.scaled_dot_product_attention(..., enable_gqa=True)` on every case: k and "
                "v keep their H_kv heads, SDPA maps query heads to them (torch has no rotary "
                "op: RoPE cases are not expressible)")

    def translate(self, case):
        plan = sdpa_plan(case, self.gqa)
        return Translation(f"torch.nn.functional.scaled_dot_product_attention("
                           f"{plan.arguments()})", plan)

    def conventions(self):
        torch = import_torch()
        return sdpa_conventions(torch) + [gqa_cell(torch)] + feature_cells(
            "scaled_dot_product_attention",
            torch.nn.functional.scaled_dot_product_attention, skip=("kv_head_mapping",))

    def count(self, case):
        """SDPA holds no parameters: the projections passed in, by the formula."""
        from conformance.case.model import sizes_counts

        return Count(None, method="formula (SDPA holds no parameters; the projections "
                     "passed in)", projection_parameters=sizes_counts(
                         case.attention, case.inputs)["weights"])

    def run(self, case, translation, data):
        torch = import_torch()
        F = torch.nn.functional

        w, project = canonical_projector(torch, case, data)
        xq, xk, xv = tensors(torch, case, data.inputs)

        plan: SdpaPlan = translation.plan
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
            heads = F.scaled_dot_product_attention(project(xq, "wq", "bq"),
                                                   project(xk, "wk", "bk"),
                                                   project(xv, "wv", "bv"), **kw)
            return sdpa_observation(
                torch, heads, w, data, ["holds no parameters: the canonical projections are "
                                        "passed as tensors", "returns no attention weights"],
                extras={"mask_polarity": "True = attend"})
