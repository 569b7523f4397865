"""Axes of the scores and their arithmetic, owned by the ledger: softmax_scale (which
scale the system applies, and whether a user sets it), scale_precision (a float64 call's
scale exact, float32-rounded or split, read from its output and the weights it returns:
precision.py), float64_compute (a float64 call computed in float64,
under any reading of its scale: float64.py) and sinks (a per-head logit in the softmax
denominator).

Each probe asks the runner a probe case (its translate and run; softmax_scale and
scale_precision the first form of it the runner can express: forms.py) and names the
reading of the float64 oracle the output matches, every distance quoted.
"""
from __future__ import annotations

from dataclasses import replace

import numpy as np

from conformance.conventions.axes import IGNORED, Convention
from conformance.conventions.probes.probing import closest, probe_case
from conformance.conventions.probes import precision
from conformance.conventions.probes.asked import documented, said, unmeasured
from conformance.conventions.probes.float64 import float64_readings, float64_word, quoted
from conformance.conventions.probes.forms import first_taken
from conformance.conventions.probes.needs import needed_forms
from conformance.conventions.probes.request import ask
from conformance.oracle.canonical import case_data
from conformance.oracle.reference import attention

# the scale a probe sets where the runner can set one: not 1/sqrt(3) nor 1/sqrt(6), and
# 1/SET_SCALE**2 = 9 an integer (Gemma2Config types query_pre_attn_scalar int)
SET_SCALE = 1 / 3
FLOAT64 = 1e-12  # max |output - float64 oracle| of a float64 computation
HEAD3 = {"qk_head_dim": 3, "v_head_dim": 3}  # 1/sqrt(3): unlike 1, rounds in float32


def softmax_scale_cell(runner, own: Convention | None = None) -> Convention:
    """The default scale read as 1/sqrt(d_k) or none; where the runner sets a scale
    (`sets_scale`) through an argument of the system (not `harness_scale`: a wrapper of the
    suite's is no setting of the system; nor a scale its probe_needs fix: T5's 1.0), the
    case's scale asked: `configurable` when the output follows it."""
    harness = runner.harness_scale
    fixed = "scale" in runner.probe_needs  # T5: always 1.0
    sets = runner.sets_scale and not harness and not fixed
    cases = [replace(c, attention=replace(c.attention, scale=SET_SCALE)) if sets else c
             for c in needed_forms(runner, "softmax-scale", attention=HEAD3)]
    case, got, note = first_taken(runner, cases)
    d = case.attention.qk_head_dim

    def at(scale: float):  # the oracle of the case asked (its mask too) at `scale`
        return attention(replace(case, attention=replace(case.attention, scale=scale))).output
    readings = {"inv_sqrt_head_dim": at(1 / np.sqrt(d)), "none": at(1.0)}
    if sets:
        readings = {"configurable": at(SET_SCALE), **readings}
    what = f"probe_case {case.id}, d_k {d}" + (
        f", scale {SET_SCALE:.6g} set" if "configurable" in readings else
        ", no scale set (the system takes none: the runner's scale is a wrapper of its own)"
        if harness else ", no scale set") + note
    if not got.answered:
        return unmeasured("softmax_scale", runner, what, got)
    cell = closest("softmax_scale", got.output, readings, f"{runner.name}, {said(what, got)}",
                   **documented(runner, "softmax_scale"))
    if "configurable" in readings and cell.value != "configurable":  # set, and not applied
        return replace(cell, value=IGNORED, evidence=f"{cell.evidence}: the scale set "
                       "does not move the output to its reading")
    return cell


def scale_precision_cell(runner, own: Convention | None = None) -> Convention:
    """A float64 call's output and returned weights against the exact, the float32-rounded
    and the split float32 1/sqrt(3) (precision.py: `depends` where they read differently,
    `not_probed` where none is within 1e-12)."""
    return precision.scale_precision_cell(runner, own)


def float64_compute_cell(runner, own: Convention | None = None) -> Convention:
    """A float64 case (a prefill of 3 and one step for a runner that decodes only) against
    the float64 oracle at the exact, the float32-rounded and the split float32 scale
    (float64.py): float64 where one is within 1e-12, else below_float64."""
    inputs = {"self_attention": True, "query_len": 4, "key_len": 4, "dtype": "float64"}
    decode = {"decode": {"prefill": 3, "steps": 1}} if getattr(
        runner, "decodes_only", False) else {}
    needs = dict(runner.probe_needs)  # what its system always applies
    case = probe_case("float64", mask={"causal": "upper_left"}, inputs=inputs, **decode,
                      **({"attention": needs} if needs else {}))
    what = f"probe_case {case.id}, float64 causal self-attention" + (
        ", a prefill of 3 and one step" if decode else "")
    got = ask(runner, case)
    if not got.answered:
        return unmeasured("float64_compute", runner, what, got)
    r = float64_readings(case, got.output)  # float64.py: a scale's rounding is no arithmetic
    return Convention("float64_compute", float64_word(r),
                      f"{runner.name}, {said(what, got)}: max |output - float64 oracle| "
                      f"under three readings of the scale: {quoted(r)} (float64 means one "
                      f"<= {FLOAT64:g})", **documented(runner, "float64_compute"))


def sinks_cell(runner, own: Convention | None = None) -> Convention:
    case, got, note = first_taken(runner, needed_forms(runner, "sinks",
                                                      attention={"sinks": True}))
    what = f"probe_case {case.id}, (H,) sink logits{note}"
    if not got.answered:
        return unmeasured("sinks", runner, what, got)
    data = case_data(case)
    plain = replace(data, weights=replace(data.weights, sinks=None))
    return closest("sinks", got.output, {"applied": attention(case, data).output,
                                         IGNORED: attention(case, plain).output},
                   f"{runner.name}, {said(what, got)}", **documented(runner, "sinks"))
