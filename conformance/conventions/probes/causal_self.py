"""causal_flag of a system that passes its causal switch on self-attention only (the HF
attention modules: one hidden_states tensor, so T = S), owned by the ledger.

flags.causal_flag_cell asks the switch with T != S; where the runner cannot pass it on
that case (`unasked`), the switch is asked (its `answer`, RawCall "is_causal", no mask) on
a self-attention probe case of T = S = 4, then on that case with what the system applies
on every call (needs.py: probe_needs).  At T = S both alignments are one mask, so the
output reads `ignored` where it is the unmasked oracle's, and `not_probed` where the
switch applies (which alignment it takes for T != S cannot show), every distance quoted.
"""
from __future__ import annotations

from conformance.conventions.axes import IGNORED, NOT_PROBED, Convention
from conformance.conventions.probes.probing import distances, output_with
from conformance.contract.runner import RawCall
from conformance.conventions.probes.asked import NEAR, documented, unmeasured
from conformance.conventions.probes.forms import NEEDS_SUFFIX
from conformance.conventions.probes.needs import needed_forms
from conformance.conventions.probes.request import ask_raw
from conformance.oracle.canonical import causal_mask

LENGTH = 4
CAUSAL = "causal (T = S)"


def causal_self_attention_cell(runner, why: str) -> Convention:
    """`why`: the reason the runner gave for the T != S case."""
    cases = needed_forms(runner, "raw-causal-self-attention", raw=True, inputs={
        "self_attention": True, "query_len": LENGTH, "key_len": LENGTH})
    refused = None
    for n, case in enumerate(cases):
        got = ask_raw(runner, case, RawCall("is_causal", True))
        if got.raised and any(NEEDS_SUFFIX in later.id for later in cases[n + 1:]):
            refused = refused or (case, got)  # a kernel refusing this form: ask the needs
            continue
        if not got.unasked:
            break
    if refused is not None and not got.answered:  # refused, and no later form answered
        case, got = refused
    what = (f"probe_case {case.id}: the causal switch on, T = S = {LENGTH} (for T != S: "
            f"{why})")
    if not got.answered:
        return unmeasured("causal_flag", runner, what, got)
    d = distances(got.output, {
        CAUSAL: output_with(case, causal_mask(LENGTH, LENGTH, "upper_left")),
        IGNORED: output_with(case, None)})
    text = (f"{runner.name}, {what} ({got.call}): max |output - oracle| under each reading: "
            + "; ".join(f"{k} {v:.1e}" for k, v in d.items()))
    if d[IGNORED] < NEAR and d[IGNORED] <= d[CAUSAL]:
        return Convention("causal_flag", IGNORED, f"{text}: the switch accepted and without "
                          "effect", **documented(runner, "causal_flag"))
    if d[CAUSAL] < NEAR:
        return Convention("causal_flag", NOT_PROBED, f"{text}: the switch applies, but a "
                          "system taking self-attention only has T = S, so its alignment "
                          "for T != S cannot show")
    return Convention("causal_flag", NOT_PROBED, f"{text}: neither reading matches")
