"""qk_norm_scope, owned by the ledger: whether QK-norm normalises each head's d_k values
apart (per_head) or the whole projection at once (all_heads).

The probe cases (2 heads of 8, RMS and LayerNorm, each scope) are asked of the runner
(its translate and run) with unit norm scales and zero biases (position_head_probes.
unit_norm_data: the scope alone then moves the output), and each answer read against the
oracle under either scope: the reading of every answer, `choosable` where the answers
give both, `not_probed` where an answer matches neither.  Where none answers, a form the
system refused at run time (its own error: onnxruntime's CPU GroupQueryAttention refusing
q_norm_weight) makes the cell `refused`, even where other forms are inexpressible.
"""
from __future__ import annotations

from dataclasses import replace

from conformance.conventions.axes import NOT_PROBED, Convention
from conformance.conventions.probes.position_head_probes import qk_norm_case, unit_norm_data
from conformance.conventions.probes.probing import distances, output_with
from conformance.conventions.probes.asked import NEAR, documented, unmeasured
from conformance.conventions.probes.request import ask

SCOPES = ("per_head", "all_heads")
KINDS = ("rms", "layer")


def _scoped(case, scope: str):
    a = case.attention
    return replace(case, attention=replace(a, qk_norm=replace(a.qk_norm, scope=scope)))


def qk_norm_scope_cell(runner, own: Convention | None = None) -> Convention:
    picks, texts, last, refusal = set(), [], None, None
    for kind in KINDS:
        for scope in SCOPES:
            case = qk_norm_case(scope, kind)
            last = ask(runner, case, unit_norm_data(case))
            refusal = refusal or (last if last.raised else None)
            if not last.answered:
                texts.append(f"{kind} {scope}: not answered: "
                             f"{last.raised or last.inexpressible or last.unasked}")
                continue
            d = distances(last.output, {s: output_with(_scoped(case, s), None, unit_norm_data(
                _scoped(case, s))) for s in SCOPES})
            best = min(d, key=d.get)
            picks.add(best if d[best] < NEAR else "neither")
            texts.append(f"{kind} {scope} asked ({last.call}): " + ", ".join(
                f"{s} {v:.1e}" for s, v in d.items()))
    what = "probe_case qk-norm-*, 2 heads of 8, unit scales, zero biases"
    if not picks:  # the system's own refusal of a form it has is the cell, else the reason
        return unmeasured("qk_norm_scope", runner, f"{what}: {' | '.join(texts)}",
                          refusal or last)
    evidence = f"{runner.name}, {what}: max |output - oracle| per scope: {' | '.join(texts)}"
    if "neither" in picks:
        return Convention("qk_norm_scope", NOT_PROBED, f"{evidence}: an answer matches "
                          "neither scope")
    word = "choosable" if len(picks) > 1 else picks.pop()
    return Convention("qk_norm_scope", word, evidence, **documented(runner, "qk_norm_scope"))
