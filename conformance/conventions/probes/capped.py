"""softcap, owned by the ledger: does a system's score softcap (cap * tanh(s / cap)) apply?
A probe case with softcap 1 (a cap that bites on O(1) scores), no mask, is asked through
the runner's translate and run in the first form it takes (forms.first_taken over
needs.needed_forms: as written, as self-attention, ...), and the output read against the
oracle with the cap and without it: `applied`, or `ignored` where a setting accepted gives
the uncapped output.  Where the run returns the scores' stages beside its output (the ONNX
Attention op's qk_matmul_output modes), the evidence names each (stages.py).  Asked of the
runners whose features take a softcap (the others' softcap cell is read from their
signatures, features.py).
"""
from __future__ import annotations

from dataclasses import replace

from conformance.conventions.axes import IGNORED, Convention
from conformance.conventions.probes.probing import closest
from conformance.conventions.probes.asked import documented, said, unmeasured
from conformance.conventions.probes.forms import first_taken
from conformance.conventions.probes.needs import needed_forms
from conformance.conventions.probes.stages import stages_text
from conformance.oracle.reference import attention

CAP = 1.0


def softcap_cell(runner, own: Convention | None = None) -> Convention:
    case, got, note = first_taken(runner, needed_forms(runner, "softcap",
                                                      attention={"softcap": CAP}))
    what = f"probe_case {case.id}, softcap {CAP:g}, no mask{note}"
    if not got.answered:
        return unmeasured("softcap", runner, what, got)
    plain = replace(case, attention=replace(case.attention, softcap=None))
    cell = closest("softcap", got.output, {"applied": attention(case).output,
                                           IGNORED: attention(plain).output},
                   f"{runner.name}, {said(what, got)}", **documented(runner, "softcap"))
    if "score_stages" not in got.extras:
        return cell
    stages = stages_text(case, got.extras["score_stages"])
    return replace(cell, evidence=f"{cell.evidence}; {stages}")
