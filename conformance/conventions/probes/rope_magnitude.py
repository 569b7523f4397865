"""rope_scaling_magnitude, owned by the ledger: where a system puts the attention factor
of a RoPE scaling (YaRN's 0.1 ln(factor) + 1, LongRoPE's sqrt(1 + ln(factor) / ln(P))).

transformers' Llama line multiplies cos and sin by it (transformers/models/llama/
modeling_llama.py LlamaRotaryEmbedding.forward: cos * attention_scaling), so each rotated
dim of q and k; its DeepSeek V3 multiplies the softmax scale by its square and leaves cos
and sin at mscale / mscale_all_dim (transformers/models/deepseek_v3/modeling_deepseek_v3.py
yarn_apply_mscale: scaling * mscale * mscale); keras-hub's RotaryEmbedding multiplies cos and
sin (keras_hub/src/layers/modeling/rotary_embedding.py, rope_type="yarn").  With every
dim rotating, the two are the same number on every score; with 4 of 8 dims rotating (the
probe) the unrotated half of the scores parts them.

YaRN at factor 40 (m = 1.369, m^2 = 1.874), original 128, positions 512..516, is asked twice
through the runner's translate and run: with the magnitude on cos and sin as the case
writes it, and with it on the softmax scale (mscale = mscale_all_dim = 1); a system that
cannot rotate part of a head (transformers' Llama: its rotary table is head_dim wide) is
asked the same at full width, where cos_sin and softmax_scale tie: the cell names the tie
(`not_probed`, or the documented word where it is one of them), while `both`, `none` and
`ignored` still part; a system with no YaRN is asked LongRoPE at factor 16, original 4096
(m = 1.1547), partial then full.  Each output is read
against the oracle with the factor on the rotated dims (`cos_sin`), squared on the softmax
scale (`softmax_scale`), on both (`both`: a port applying it twice), nowhere (`none`) and
with no scaling at all (`ignored`), YaRN's ramp edges truncated or not (a nuisance here:
rope_scaling.py reads them).  `choosable` where the two asks read two places (a setting
picks it, named in the evidence); `not_probed` where an answer matches no reading, or
two at this input, every distance quoted.
"""
from __future__ import annotations

from conformance.conventions.axes import DEPENDS, IGNORED, NOT_PROBED, Convention
from conformance.conventions.probes.asked import documented, unmeasured
from conformance.conventions.probes.resolution import named_tie
from conformance.conventions.probes.rope_readings import (
    OTHER, PLACEMENTS, TIE, Ask, Reading, asked, grouped, placed, read, unanswered, unscaled,
    with_scaling)
from conformance.oracle import rope_scaling

AXIS = "rope_scaling_magnitude"
YARN = {"type": "yarn", "factor": 40, "original_max_positions": 128}
DEEPSEEK = {**YARN, "magnitude": "softmax_scale", "mscale": 1, "mscale_all_dim": 1}
LONGROPE = {"type": "longrope", "factor": 16, "original_max_positions": 4096}
PARTS = ("cos_sin", "softmax_scale")  # alike where every dim rotates


def _longrope(rotary_dim: int) -> dict:
    pairs = rotary_dim // 2
    return {**LONGROPE, "short_factor": [1.0 + i / 2 for i in range(pairs)],
            "long_factor": [2.0 ** (i + 1) for i in range(pairs)]}


# groups of asks, in order: the first group with an answer is read.  4 of 8 dims rotating
# parts the two places; a system that cannot rotate part of a head is asked at full width,
# where they tie (named so, never the nearest)
GROUPS = ((Ask("yarn-cos-sin", YARN, 4, 512), Ask("yarn-softmax-scale", DEEPSEEK, 4, 512)),
          (Ask("yarn-cos-sin-full", YARN, 8, 512),
           Ask("yarn-softmax-scale-full", DEEPSEEK, 8, 512)),
          (Ask("longrope-cos-sin", _longrope(4), 4, 512),),
          (Ask("longrope-cos-sin-full", _longrope(8), 8, 512),))


def candidates(case) -> dict[str, list]:
    """placement -> the case with the asked factor there (YaRN's ramp edges either way)."""
    m = rope_scaling.magnitude(case.attention.rope)
    edges = [case]
    if case.attention.rope.scaling.kind == "yarn":
        edges = [with_scaling(case, truncate=True), with_scaling(case, truncate=False)]
    out = {p: [placed(c, p, m) for c in edges] for p in PLACEMENTS}
    return {**out, IGNORED: [unscaled(case)]}


def read_asks(runner) -> tuple[list[Reading], list[str], object]:
    """(the readings of the first group of asks with an answer, the evidence of each, the
    last unanswered answer or None)."""
    readings, figures, last, reasons = [], [], None, {}
    for group in GROUPS:
        for ask in group:
            case, got, note = asked(runner, ask)
            if not got.answered:
                reasons[ask.name] = unanswered(got)
                last = last if last and last.raised else got  # the system's own error first
                continue
            m, r = rope_scaling.magnitude(case.attention.rope), case.attention.rope.rotary_dim
            reading = read(got.output, candidates(case), f"{ask.name} (m = {m:.4g}, m^2 = "
                           f"{m * m:.4g}, rotary_dim {r} of {case.attention.qk_head_dim}){note}")
            readings.append(reading)
            figures.append(f"{reading.what}: {reading.figures()}")
        if readings:
            break
    return readings, figures + grouped(reasons), last


def rope_scaling_magnitude_cell(runner, own: Convention | None = None) -> Convention:
    """Where the system's output puts the scaling's magnitude (the module's docstring)."""
    readings, figures, last = read_asks(runner)
    what = "probe cases rope-scaling-*"
    if not readings:
        return unmeasured(AXIS, runner, f"{what}: {'; '.join(figures)}", last)
    evidence = (f"{runner.name}, {what}: max |output - oracle| under each reading: "
                f"{'; '.join(figures)}")
    ties = {w for r in readings if r.word == TIE for w in r.ties}
    if ties and ties <= set(PARTS) and all(r.word == TIE for r in readings):
        return named_tie(AXIS, sorted(ties), f"{evidence}; {' and '.join(sorted(ties))} give "
                         "the same scores where every dim rotates (this system is asked no "
                         "partial rotary width)", **documented(runner, AXIS))
    if any(r.word in (OTHER, TIE) for r in readings):
        why = "; ".join(f"{r.what}: " + ("no reading matches" if r.word == OTHER else
                                         f"{', '.join(r.ties)} alike at this input")
                        for r in readings if r.word in (OTHER, TIE))
        return Convention(AXIS, NOT_PROBED, f"{evidence}; {why}")
    words = list(dict.fromkeys(r.word for r in readings))
    if len(words) > 1:  # a setting picks the place (choosable), or one ask is ignored
        word = "choosable" if set(words) <= set(PLACEMENTS) else DEPENDS
        return Convention(AXIS, word, f"{evidence}; the asks read {' and '.join(words)}",
                          **documented(runner, AXIS))
    return Convention(AXIS, words[0], evidence, **documented(runner, AXIS))
