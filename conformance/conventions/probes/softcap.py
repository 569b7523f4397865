"""softcap_order, owned by the ledger: where a system's softcap (cap * tanh(s / cap)) sits
against an additive float mask.  A probe case with softcap 1 is asked with a finite float
mask 0 / -2 passed raw (request.ask_raw, the runner's `answer` of attn_mask, with the
case's softcap as the system takes it), so softcap(s) + m and softcap(s + m) differ; the
output is named by the reading it matches (conventions/probes/cache_probes.softcap_order:
before_mask, after_mask, or `ignored` where it is the uncapped one), every distance quoted.
A runner that cannot pass the mask on the written cross-attention case (`unasked`) is
asked its self-attention form (forms.py).  A runner that passes no raw mask at all (its
system takes an additive bias only: onnxruntime's GroupQueryAttention attention_bias) is
asked through its translate and run a probe case with the cap and a random mask filled
with -1e4 (mask.fill, the finite number the case gives the system), in the first form it
takes (needs.needed_forms), and read the same way against that additive 0 / -1e4.
Asked of the runners whose features take a softcap (table.py).
"""
from __future__ import annotations

import numpy as np

from conformance.conventions.probes import cache_probes as cp
from conformance.conventions.probes.probing import probe_mask
from conformance.contract.runner import RawCall
from conformance.conventions.axes import Convention
from conformance.conventions.probes.asked import documented, said, unmeasured
from conformance.conventions.probes.forms import first_taken, forms
from conformance.conventions.probes.needs import needed_forms
from conformance.conventions.probes.request import ask_raw
from conformance.oracle.canonical import case_data

CAP, FILL, CASE_FILL = 1.0, -2.0, "-1e4"


def softcap_order_cell(runner, own: Convention | None = None) -> Convention:
    for case in forms("op-softcap", attention={"softcap": CAP})[:2]:  # then self-attention
        add = np.where(probe_mask(case), 0.0, FILL)
        got = ask_raw(runner, case, RawCall("attn_mask", add))
        if not got.unasked:  # the runner cannot pass the written case: its self-attention
            break
    what = (f"probe_case {case.id}, softcap {CAP:g} with a finite float attn_mask 0 / "
            f"{FILL:g} (B, T, S) passed raw")
    if got.unasked:  # every runner translates: ask it the case itself
        return _through_the_case(runner)
    if not got.answered:
        return unmeasured("softcap_order", runner, what, got)
    return cp.softcap_order(case, CAP, add, got.output, f"{runner.name}, {said(what, got)}",
                            **documented(runner, "softcap_order"))


def _through_the_case(runner) -> Convention:
    """softcap_order of a runner passing no raw mask: the case's mask with fill -1e4 and the
    cap, through its translate and run (first_taken over needed_forms)."""
    case, got, note = first_taken(runner, needed_forms(
        runner, "softcap-order-fill", attention={"softcap": CAP},
        mask={"attn_mask": {"random": 0.5}, "fill": CASE_FILL}))
    what = (f"probe_case {case.id}, softcap {CAP:g}, a random mask with fill {CASE_FILL} "
            f"(the runner passes no raw mask: the case's mask as it translates it){note}")
    if not got.answered:
        return unmeasured("softcap_order", runner, what, got)
    add = np.where(case_data(case).inputs.allowed, 0.0, float(CASE_FILL))
    return cp.softcap_order(case, CAP, add, got.output, f"{runner.name}, {said(what, got)}",
                            **documented(runner, "softcap_order"))
