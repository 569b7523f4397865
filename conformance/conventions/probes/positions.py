"""Axes of the positions, owned by the ledger: rope_style (the rotary pairing: half-split
or interleaved, or either by a setting), rope_partial (a rotary width below the head dim)
and alibi_slopes (the ALiBi slopes of a head count that is no power of two).

Each probe asks the runner probe cases (its translate and run: the rotation or the bias
as its system applies them), in the first form it takes (needs.needed_forms: as written,
as self-attention, with the head size derived from the width, then with what the system
applies on every call, Runner.probe_needs), and names the reading of the float64 oracle
the output matches, every distance quoted.
"""
from __future__ import annotations

from dataclasses import replace

import numpy as np

from conformance.conventions.axes import IGNORED, Convention
from conformance.conventions.probes.probing import closest, distances
from conformance.conventions.probes.asked import NEAR, documented, said, unmeasured
from conformance.conventions.probes.forms import first_taken
from conformance.conventions.probes.needs import needed_forms
from conformance.oracle import positional
from conformance.oracle.reference import attention

STYLES = ("half_split", "interleaved")
HEAD8 = {"qk_head_dim": 8, "v_head_dim": 8}


def _with_rope(case, **rope):
    return replace(case, attention=replace(case.attention, rope=replace(
        case.attention.rope, **rope)))


def rope_style_cell(runner, own: Convention | None = None) -> Convention:
    """Each pairing asked (head dim 8, positions from 3): the pairing each output matches;
    `choosable` where the two asks give the two pairings."""
    bases = needed_forms(runner, "rope-style", attention={
        **HEAD8, "rope": {"style": "half_split"}}, inputs={"position_offset": 3})
    picks, figures, last = {}, [], None
    for style in STYLES:
        case, last, note = first_taken(runner, [_with_rope(b, style=style) for b in bases])
        if not last.answered:
            why = last.raised or last.inexpressible or last.unasked
            figures.append(f"{style} not answered: {why}")
            continue
        d = distances(last.output, {s: attention(_with_rope(case, style=s)).output
                                    for s in STYLES})
        picks[style] = min(d, key=d.get)
        figures.append(f"{style} asked ({last.call}){note}: " + ", ".join(
            f"{s} {v:.1e}" for s, v in d.items()))
    what = f"probe_case {bases[0].id}, head dim 8, positions from 3"
    if not picks:
        return unmeasured("rope_style", runner, what, last)
    word = "choosable" if len(set(picks.values())) > 1 else next(iter(picks.values()))
    return Convention("rope_style", word, f"{runner.name}, {what}, max |output - oracle| "
                      f"under each pairing: {'; '.join(figures)}",
                      **documented(runner, "rope_style"))


def rope_partial_cell(runner, own: Convention | None = None) -> Convention:
    """rotary_dim 4 of head dim 8 asked, in the pairing the system always applies (its
    probe_needs' rope, else half-split): supported (4 rotate), ignored (all 8 rotate)."""
    case, got, note = first_taken(runner, needed_forms(
        runner, "rope-partial", attention={**HEAD8, "rope": {
            "style": native_style(runner), "rotary_dim": 4}}))
    d, r = case.attention.qk_head_dim, case.attention.rope.rotary_dim  # the form asked
    what = f"probe_case {case.id}, rotary_dim {r} of head dim {d} (ignored: all {d} rotate){note}"
    if not got.answered:
        return unmeasured("rope_partial", runner, what, got)
    return closest("rope_partial", got.output,
                   {"supported": attention(case).output,
                    IGNORED: attention(_with_rope(case, rotary_dim=d)).output},
                   f"{runner.name}, {said(what, got)}", **documented(runner, "rope_partial"))


def native_style(runner) -> str:
    """The rotary pairing the system applies on every call (its probe_needs' rope), else
    half-split."""
    rope = dict(runner.probe_needs).get("rope") or {}
    return rope.get("style", "half_split")


def alibi_slopes_cell(runner, own: Convention | None = None) -> Convention:
    """6 heads (no power of two), causal self-attention (where a bias -slope |i - j| and the
    paper's slope (j - i) agree): paper where the output is the oracle's (the paper's
    rule), ignored where it is the output without ALiBi, else other."""
    case, got, note = first_taken(runner, needed_forms(
        runner, "alibi-slopes", attention={"num_heads": 6, "query_features": 12,
                                           "alibi": True},
        inputs={"self_attention": True, "key_len": 3}, mask={"causal": "upper_left"}))
    paper = np.round(positional.alibi_slopes(6), 5).tolist()
    what = f"probe_case {case.id}, 6 heads, causal (the paper's slopes {paper}){note}"
    if not got.answered:
        return unmeasured("alibi_slopes", runner, what, got)
    plain = replace(case, attention=replace(case.attention, alibi=False))
    d = distances(got.output, {"paper": attention(case).output,
                               IGNORED: attention(plain).output})
    word = "paper" if d["paper"] < NEAR else IGNORED if d[IGNORED] < NEAR else "other"
    return Convention("alibi_slopes", word, f"{runner.name}, {said(what, got)}: max |output "
                      f"- oracle| under each reading: paper {d['paper']:.1e}; no ALiBi "
                      f"{d[IGNORED]:.1e}", **documented(runner, "alibi_slopes"))
