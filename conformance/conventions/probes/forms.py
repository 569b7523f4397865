"""The forms of a probe case a system may take, for the ledger's asked probes: as written,
as self-attention (one tensor for query, key and value, T = S = the written S: a path that
takes only self-attention, e.g. nn.MultiheadAttention's fast path), with the head size
derived from the width (the written d_k with E = H x d_k features: a system with no
head-size argument, e.g. nn.MultiheadAttention) and both.

`first_taken` asks them in that order and moves on only where the runner's translate says
the system cannot express a form (its `inexpressible` reason): a runner that takes the
written case is asked nothing else, so its cell is the written case's; a harness limit
(`unasked`: the suite's rule, e.g. GPT-2's causal-only model) moves on too, the last form's
answer standing where none is asked; the system's own error (`raised`) ends it, except where a
form with the runner's probe_needs (needs.py, NEEDS_SUFFIX) is still to come: a kernel
refusing one form (onnxruntime's CPU GroupQueryAttention at a head size that is no
multiple of 8) is asked the forms its runner says it takes (a refusal of one of them
too sends it on to the next); refused on every form, the first refusal is the answer
(the system's words, quoted).
"""
from __future__ import annotations

from conformance.conventions.probes.probing import probe_case
from conformance.conventions.probes.request import Answer, ask

SELF_SUFFIX, WIDTH_SUFFIX = "-self-attention", "-width-derived"
NEEDS_SUFFIX = "-with-needs"  # needs.needed_forms: the forms with the runner's probe_needs


def _self_attention(sections: dict) -> dict:
    inputs = sections.get("inputs", {})
    if inputs.get("self_attention"):
        return {}
    s = inputs.get("key_len", 5)  # probe_case's default S
    return {**sections, "inputs": {**inputs, "self_attention": True, "query_len": s,
                                   "key_len": s}}


def _width_derived(sections: dict) -> dict:
    attention = dict(sections.get("attention", {}))
    d = attention.pop("qk_head_dim", None)
    if d is None or attention.pop("v_head_dim", d) != d:
        return {}
    attention["query_features"] = attention.get("num_heads", 2) * d
    return {**sections, "attention": attention}


def forms(name: str, **sections) -> list:
    """The probe case `name` with `sections` (probe_case), then each other form a system
    may take (self-attention; the head size derived from the width; both), where it
    differs from the written one."""
    cases = [probe_case(name, **sections)]
    width = _width_derived(sections)
    for suffix, other in ((SELF_SUFFIX, _self_attention(sections)),
                          (WIDTH_SUFFIX, width),
                          (WIDTH_SUFFIX + SELF_SUFFIX, _self_attention(width) if width else {})):
        if other:
            cases.append(probe_case(name + suffix, **other))
    return cases


def first_taken(runner, cases) -> tuple[object, Answer, str]:
    """(the case asked, its answer, a note): the first of `cases` whose translate the runner
    does not refuse as inexpressible (the last where it refuses them all); the note names
    the form asked and the runner's reason for the written one ("" for the written one)."""
    got, first, refusal = Answer(None), "", None
    for n, case in enumerate(cases):
        got = ask(runner, case)
        if got.raised and any(NEEDS_SUFFIX in later.id for later in cases[n + 1:]):
            if refusal is None:  # the first refusal is kept; ask the form it takes
                refusal, first = (case, got), first or got.raised
            continue
        if not (got.inexpressible or got.unasked):  # a harness limit of one form: the next
            break
        first = first or got.inexpressible or got.unasked
    if refusal is not None and not got.answered:  # refused, and no later form answered
        case, got = refusal
    elif refusal is not None:  # the refusal that sent it on, quoted
        first = (f"{first}; {refusal[0].id} refused: {refusal[1].raised}"
                 if first != refusal[1].raised else f"{refusal[0].id} refused: {first}")
    note = f" (asked as {case.id}; for {cases[0].id}: {first})" if case is not cases[0] else ""
    return case, got, note
