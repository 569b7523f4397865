"""gate_packing, owned by the ledger: which packing of the output gate's weights a system's
query projection holds, found by loading each packing and seeing which gives the oracle.

For a runner whose `answers` lists "packed_gate" (RAW_ARGUMENTS): a gated self-attention
probe case (2 heads of 4 over 8 features, no biases: AFMoE's gate_proj has none), in the
first form the runner takes with what its system applies on every call (Qwen3-Next's
QK-norm and rotation), is asked three times, the canonical W_q and W_g loaded through the
system's own weight names packed (convert/gate.py):
- per_head: q_proj rows [q_0 | g_0 | q_1 | g_1];
- halves: [q_0 | q_1 | g_0 | g_1] (at one head the two are the same rows: two heads part them);
- separate: q_proj the queries alone and a gate_proj of its own (a module without one
  refuses the key in its own words).
Each output is read against the float64 oracle (each head's output times sigmoid(x W_g[h] +
b_g[h]), then W_o); the word is the one packing within NEAR.  Where none is: a packing
within NEAR of the gate applied after the output projection (H d_v = E_o = 8 here, so the
gate's 8 values per token multiply the projected output) reads `after_output`; one within
NEAR of the ungated oracle `ignored`; else `other`.  Every packing refused: `refused`, quoted;
a packing the suite cannot ask is left out with its reason (none asked: `not_probed`).
Two packings within NEAR is a tie the probe cannot part: `not_probed`, with the distances.
"""
from __future__ import annotations

from dataclasses import replace

import numpy as np

from conformance.contract.runner import RawCall
from conformance.conventions.axes import IGNORED, NOT_PROBED, REFUSED, Convention
from conformance.conventions.probes.asked import NEAR, documented, unmeasured
from conformance.conventions.probes.forms import first_taken
from conformance.conventions.probes.needs import needed_forms
from conformance.conventions.probes.probing import distances
from conformance.conventions.probes.request import ask_raw
from conformance.oracle.canonical import case_data
from conformance.oracle.output_gate import sigmoid
from conformance.oracle.reference import attention

AXIS = "gate_packing"
PACKINGS = ("per_head", "halves", "separate")
AFTER, OTHER = "after_output", "other"
GATE = {"num_heads": 2, "query_features": 8, "bias": False,
        "output_gate": {"activation": "sigmoid"}}


def probe_cases(runner) -> list:
    """The gated probe case in each form the runner may take (needs.needed_forms)."""
    return needed_forms(runner, "gate-packing", raw=True, attention=GATE,
                        inputs={"self_attention": True, "query_len": 4, "key_len": 4})


def readings(case) -> dict[str, np.ndarray]:
    """The oracle's gated output, the gate after the output projection, and no gate."""
    data = case_data(case)
    gated = attention(case, data).output
    plain = attention(replace(case, attention=replace(case.attention, output_gate=None)))
    w, x = data.weights, data.inputs.query
    pre = np.einsum("bte,hed->bthd", x, w.wg)
    pre = pre if w.bg is None else pre + w.bg[None, None]
    gate = sigmoid(pre.reshape(*x.shape[:2], -1))
    after = plain.output * gate if gate.shape == plain.output.shape else \
        np.full_like(plain.output, np.nan)
    return {"gated": gated, AFTER: after, IGNORED: plain.output}


def word_of(found: dict[str, dict[str, float]]) -> tuple[str, str]:
    """(the word, why) from packing -> {reading -> max |output - reading|}."""
    for reading, word in (("gated", None), (AFTER, AFTER), (IGNORED, IGNORED)):
        near = [p for p, d in found.items() if d[reading] < NEAR]
        if len(near) > 1:
            return NOT_PROBED, f"{' and '.join(near)} both within {NEAR:g} ({reading}): a tie"
        if near:
            return (word or near[0]), f"{near[0]} packing, {reading}"
    return OTHER, f"no packing within {NEAR:g} of any reading"


def gate_packing_cell(runner) -> Convention:
    """The packing whose load gives the oracle (the module's docstring)."""
    case, plain, note = first_taken(runner, probe_cases(runner))
    what = ("probe case gate-packing, 2 heads of 4, no biases; W_q and "
            f"W_g loaded per_head, in halves and separate{note}")
    if case is None or not plain.answered:
        return unmeasured(AXIS, runner, f"{what}: the case as it translates", plain)
    wanted = readings(case)
    found, figures, refusals, unasked = {}, [], [], []
    for packing in PACKINGS:
        got = ask_raw(runner, case, RawCall("packed_gate", packing))
        if got.raised:
            refusals.append(f"refused {packing}: {got.raised}")
        elif not got.answered:  # the suite could not ask it: no reading of the system
            unasked.append(f"{packing} not asked: {got.unasked or got.inexpressible}")
        if not got.answered:
            continue
        found[packing] = d = distances(got.output, wanted)
        figures.append(f"{packing}: {d['gated']:.1e} from the oracle, {d[AFTER]:.1e} gated "
                       f"after the output projection, {d[IGNORED]:.1e} ungated")
    evidence = f"{runner.name}, {what}: " + "; ".join(figures + refusals + unasked)
    if not found:
        return (Convention(AXIS, REFUSED, evidence, **documented(runner, AXIS)) if refusals
                else Convention(AXIS, NOT_PROBED, evidence))
    word, why = word_of(found)
    evidence += f" -> {why}"
    return Convention(AXIS, word, evidence,
                      **({} if word == NOT_PROBED else documented(runner, AXIS)))


RAW_PROBES = {AXIS: ("packed_gate", gate_packing_cell)}
