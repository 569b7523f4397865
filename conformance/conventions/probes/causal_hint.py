"""causal_flag of a causal switch that is a hint beside a mask (nn.MultiheadAttention's
`is_causal`: "a hint that attn_mask is the causal mask"), owned by the ledger.

The runner answers RawCall "causal_hint": its causal switch on beside `value['attn_mask']`
(a (B, T, S) boolean array given as it is to its attention-mask argument) and, where
`value['pad_nothing']` is set, a key-padding mask that pads no key (in the system's own
polarity), beside it; RawCall "attn_mask" (the mask alone) and "is_causal" (the switch
alone) as flags.py asks them.  The mask is non-causal, so the output says what the switch
did: `hint_only` (it follows the mask, read as the system reads it alone), `upper_left` or
`lower_right` (the switch replaced the mask), `depends` where the key padding changes that
(each condition with its figures).  With T = S (a path that takes only self-attention) the
alignment cannot show: the switch alone is read instead, `ignored` where the output stays
unmasked, `not_probed` where it applies.
"""
from __future__ import annotations

from conformance.conventions.axes import DEPENDS, IGNORED, NOT_PROBED, Convention
from conformance.conventions.probes.probing import (
    causal_candidates, closest, distances, output_with, probe_mask)
from conformance.contract.runner import RawCall
from conformance.conventions.probes.asked import NEAR, documented, unmeasured
from conformance.conventions.probes.forms import forms
from conformance.conventions.probes.request import Answer, ask_raw
from conformance.oracle.canonical import causal_mask

AXIS = "causal_flag"


def _hint(runner, case, raw_mask, pad_nothing: bool) -> Answer:
    return ask_raw(runner, case, RawCall("causal_hint", {"attn_mask": raw_mask,
                                                         "pad_nothing": pad_nothing}))


def _asked(runner):
    """(case, the raw mask, the hint's answer): the written case, else its self-attention
    form where the runner cannot pass the hint on the written one (`unasked`)."""
    for case in forms("causal-hint")[:2]:
        raw = ~probe_mask(case)  # read as True = blocked, the mask is probe_mask
        got = _hint(runner, case, raw, False)
        if not got.unasked:
            break
    return case, raw, got


def causal_hint_cell(runner) -> Convention:
    case, raw, got = _asked(runner)
    what = f"probe_case {case.id}: the causal switch on beside a non-causal attn_mask " \
        f"(B, T, S) passed raw"
    if not got.answered:
        return unmeasured(AXIS, runner, what, got)
    alone = ask_raw(runner, case, RawCall("attn_mask", raw))
    m = probe_mask(case)
    d = distances(alone.output, {"blocks": output_with(case, m),
                                 "attends": output_with(case, ~m)}) if alone.answered else {}
    allowed = ~m if d and d["attends"] < d["blocks"] else m  # the mask as the system reads it
    cands = {"hint_only": output_with(case, allowed),
             **{k: v for k, v in causal_candidates(case).items() if k != IGNORED}}
    cell = closest(AXIS, got.output, cands, f"{runner.name}, {what} ({got.call})",
                   **documented(runner, AXIS))
    switch = ask_raw(runner, case, RawCall("is_causal", True))
    if case.inputs.query_len == case.inputs.key_len:
        return _square(runner, case, cell, switch)
    tail = f"the switch alone: {switch.raised or switch.unasked}" if not switch.answered \
        else "the switch alone runs"
    padded = _hint(runner, case, raw, True)
    if not padded.answered:
        return _with(cell, f"beside a key padding that pads nothing: "
                     f"{padded.raised or padded.unasked}; {tail}")
    kp = closest(AXIS, padded.output, cands, f"beside a key padding that pads nothing "
                 f"({padded.call})")
    if kp.value == cell.value:
        return _with(cell, f"{kp.evidence}; {tail}")
    return Convention(AXIS, DEPENDS, f"{runner.name}, {what}: without key padding: "
                      f"{cell.value} ({_figures(cell)}) | with a key padding that pads "
                      f"nothing: {kp.value} ({_figures(kp)}); {tail}",
                      **documented(runner, AXIS))


def _square(runner, case, with_mask: Convention, switch: Answer) -> Convention:
    """T = S: the switch alone, unmasked (ignored) or causal (applied, alignment hidden)."""
    if not switch.answered:
        return _with(with_mask, f"the switch alone: {switch.raised or switch.unasked}")
    i = case.inputs
    d = distances(switch.output, {IGNORED: output_with(case, None), "applied": output_with(
        case, causal_mask(i.query_len, i.key_len, "upper_left"))})
    figures = (f"{runner.name}, probe_case {case.id}: the causal switch alone, T = S = "
               f"{i.query_len} ({switch.call}): output {d[IGNORED]:.1e} from the unmasked "
               f"oracle, {d['applied']:.1e} from the causal one; beside a non-causal mask "
               f"{with_mask.value}: {_figures(with_mask)}")
    if d[IGNORED] < NEAR <= d["applied"]:
        return Convention(AXIS, IGNORED, f"the switch accepted and dropped: {figures}",
                          **documented(runner, AXIS))
    if d["applied"] < NEAR:
        return Convention(AXIS, NOT_PROBED, f"the switch applies, but the case has T = S "
                          f"(self-attention only), so its alignment cannot show: {figures}",
                          **documented(runner, AXIS))
    return _with(with_mask, f"alone: {figures}")


def _figures(cell: Convention) -> str:
    return cell.evidence.split(": ", 1)[-1] if ": max |" not in cell.evidence else \
        "max |" + cell.evidence.split(": max |", 1)[1]


def _with(cell: Convention, more: str) -> Convention:
    return Convention(cell.axis, cell.value, f"{cell.evidence}; {more}", cell.documented,
                      cell.documented_source)

