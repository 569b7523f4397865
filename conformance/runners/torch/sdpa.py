"""`torch.nn.functional.scaled_dot_product_attention` with explicit projections.

SDPA holds no parameters: the projections are plain tensors we compute from
the canonical weights, so it can express what nn.MultiheadAttention cannot
(per-head widths, any output width, grouped-query via `enable_gqa=True`).
Its boolean mask is True = *attend* (the opposite of nn.MultiheadAttention),
and `is_causal=True` is aligned to the upper left; a lower-right diagonal
needs `torch.nn.attention.bias.causal_lower_right`.  It returns no attention
weights.  `scale=` is passed only when the case sets attention.scale.  Its plan and call
live in common.py (torch.sdpa.cache's single calls are the same); the ledger asks its
conventions (common.py SDPAAnswers: the raw calls and `probe_takes`), observations.py
reports what its API shows.  torch is imported inside `run` only.

torch.sdpa passes enable_gqa=True on grouped cases; torch.sdpa.gqa (gqa=True) passes it on
every case, so its row is SDPA's own head mapping throughout (with H_kv == H it must be the
identity).  torch has no rotary-embedding op, so neither row takes attention.rope.
"""
from __future__ import annotations

from conformance.contract.runner import Count, Translation
from conformance.runners.torch.common import (  # noqa: F401 (SdpaPlan: the plan's type)
    SDPAAnswers, SdpaPlan, TorchRunner, sdpa_call, sdpa_plan)
from conformance.runners._export.torch_mha import import_torch


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
        """What the function's API shows (observations.py); the ledger asks the rest."""
        from conformance.runners.torch.observations import sdpa_cells

        return sdpa_cells(import_torch())

    def count(self, case):
        """SDPA holds no parameters: the projections passed in, by the formula."""
        from conformance.case.model import sizes_counts

        return Count(None, method="formula (SDPA holds no parameters; the projections "
                     "passed in)", projection_parameters=sizes_counts(
                         case.attention, case.inputs)["weights"])

    def run(self, case, translation, data):
        return sdpa_call(import_torch(), case, translation.plan, data)
