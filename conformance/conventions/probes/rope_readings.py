"""What the RoPE-scaling probes share (rope_scaling.py, rope_magnitude.py): the probe
cases with `attention.rope.scaling`, the candidate readings of a scaling built as case
variants the float64 oracle computes (oracle/rope_scaling.py), and the reading of one
answer among them.

A candidate is a case, never an array of the probe's own: another frequency rule is the
same case with its scaling (or base) changed, and another place for the magnitude is the
same case with its `attention_factor`, `magnitude` and softmax scale changed, so every
candidate output is the oracle's reference attention.  Where the probe reads one property
(the frequencies) another one the system may set its own way (where the magnitude lands)
is a nuisance: each reading is its best variant over the nuisance's candidates, so a
system that puts YaRN's factor on the softmax scale still has its frequencies read.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, replace

import numpy as np

from conformance.conventions.probes.asked import NEAR
from conformance.conventions.probes.forms import first_taken
from conformance.conventions.probes.needs import needed_forms
from conformance.conventions.probes.positions import native_style
from conformance.conventions.probes.probing import distances
from conformance.conventions.probes.resolution import alike
from conformance.conventions.probes.request import Answer
from conformance.oracle import rope_scaling
from conformance.oracle.reference import attention

HEAD = 8  # the probe's head dim (4 rotated pairs at full rotary width)
PLACEMENTS = ("cos_sin", "softmax_scale", "both", "none")  # where the magnitude lands
OTHER = "other"  # an answer no candidate matches within NEAR
TIE = "tie"  # an answer two candidates match within the probe's resolution


@dataclass(frozen=True)
class Ask:
    """One probe case of a scaling: its name in the evidence, attention.rope.scaling as a
    case file writes it, the rotary width and the first query (and key) position."""

    name: str
    scaling: dict
    rotary_dim: int = HEAD
    offset: int = 0


@dataclass(frozen=True)
class Reading:
    """One answer read among candidates: the word (a candidate's, OTHER or TIE), each
    candidate's distance, the tied words, and what was asked."""

    word: str
    distance: dict[str, float]
    ties: tuple[str, ...]
    what: str

    def figures(self) -> str:
        return ", ".join(f"{w} {d:.1e}" for w, d in self.distance.items())


def asked(runner, ask: Ask) -> tuple[object, Answer, str]:
    """(the form asked, the runner's answer, the form's note) for `ask`, in the pairing the
    system applies on every call, through its own translate and run (needs.needed_forms)."""
    rope = {"style": native_style(runner), "rotary_dim": ask.rotary_dim,
            "scaling": ask.scaling}
    return first_taken(runner, needed_forms(
        runner, f"rope-scaling-{ask.name}", attention={
            "qk_head_dim": HEAD, "v_head_dim": HEAD, "rope": rope},
        inputs={"position_offset": ask.offset}))


def unanswered(got: Answer) -> str:
    """Why an ask gave no output: the system's error, its runner's reason or the harness's."""
    return got.raised or got.inexpressible or got.unasked


def grouped(reasons: dict[str, str]) -> list[str]:
    """`<names> not answered: <reason>`, the asks sharing a reason named together."""
    by_reason: dict[str, list[str]] = {}
    for name, why in reasons.items():
        by_reason.setdefault(why, []).append(name)
    return [f"{', '.join(names)} not answered: {why}" for why, names in by_reason.items()]


def with_scaling(case, **changes):
    """`case` with fields of its RopeScaling changed (a candidate reading)."""
    a = case.attention
    s = replace(a.rope.scaling, **changes)
    return replace(case, attention=replace(a, rope=replace(a.rope, scaling=s)))


def unscaled(case, base: float | None = None):
    """`case` with no frequency scaling at all (the `ignored` reading), at `base`."""
    a = case.attention
    rope = replace(a.rope, scaling=None, base=a.rope.base if base is None else base)
    return replace(case, attention=replace(a, rope=rope))


def placed(case, placement: str, factor: float):
    """`case` with the magnitude `factor` where `placement` says: on the rotated dims of q
    and k (cos_sin), squared on the softmax scale (softmax_scale), on both, or nowhere."""
    a = case.attention
    if placement == "none":
        return with_scaling(case, attention_factor=1.0)
    where = "softmax_scale" if placement == "softmax_scale" else "cos_sin"
    out = with_scaling(case, attention_factor=factor, magnitude=where)
    if placement == "both":
        scale = a.scale if a.scale is not None else 1 / math.sqrt(a.qk_head_dim)
        out = replace(out, attention=replace(out.attention, scale=scale * factor * factor))
    return out


def magnitude_variants(case) -> list:
    """`case` under each placement of its own magnitude (one case where it has none)."""
    s = case.attention.rope.scaling
    if s.kind not in ("yarn", "longrope"):
        return [case]
    m = rope_scaling.magnitude(case.attention.rope)
    return [placed(case, p, m) for p in PLACEMENTS]


def read(output: np.ndarray, candidates: dict[str, list], what: str) -> Reading:
    """The candidate word whose best variant the output matches (within NEAR, and apart
    from every other word's best by the probe's resolution, resolution.alike); OTHER where
    none matches, TIE where two cannot be told apart at this input."""
    best: dict[str, tuple[float, np.ndarray]] = {}
    for word, cases in candidates.items():
        outs = [attention(c).output for c in cases]
        d = distances(output, {str(i): o for i, o in enumerate(outs)})
        i = min(d, key=d.get)
        best[word] = (d[i], outs[int(i)])
    distance = {w: v[0] for w, v in best.items()}
    ties = alike(distance, {w: v[1] for w, v in best.items()})
    if distance[ties[0]] >= NEAR:
        return Reading(OTHER, distance, (), what)
    if len(ties) > 1:
        return Reading(TIE, distance, tuple(ties), what)
    return Reading(ties[0], distance, (), what)
