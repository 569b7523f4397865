"""relative_bias_buckets, owned by the ledger: which bucket rule a system's T5 relative
position bias follows (attention.relative_bias; oracle/relative_bias.py).

Asked of a runner declaring the case feature relative_bias, through its own translate and
run, at T5's own table (32 buckets, max distance 128) over 136 positions of
self-attention, so the pairs span distances -135..135: both signs, the exact buckets
(|d| < 8), the logarithmic bins (8..127) and the shared last bucket past max_distance.
Two asks: the encoder's buckets (bidirectional) and the decoder's (unidirectional: every
key after the query in bucket 0).  Each output is read against the float64 oracle under
each candidate rule, every candidate a case variant of the asked one:
- `t5`: the asked rule (relative position key - query, transformers/models/t5/
  modeling_t5.py T5Attention.compute_bias: memory_position - context_position);
- `sign_flipped`: query - key (a port taking Transformer-XL's i - j, or swapping the
  arange operands): keys after the query get the lower half's buckets;
- `unidirectional` (the encoder ask read with the decoder's buckets) and `bidirectional`
  (the decoder ask read with the encoder's): is_decoder read the other way round;
- `ignored`: the table accepted and no bias added.
The cell is `t5` where every answered ask reads T5's own rule, the one other word every
non-t5 ask reads otherwise (`other` where they read different ones, or no candidate
matches within NEAR), `not_probed` where two candidates tie at this input, each distance
quoted; an ask the system refuses is named with its words.
"""
from __future__ import annotations

from dataclasses import dataclass, replace

from conformance.conventions.axes import IGNORED, NOT_PROBED, Convention
from conformance.conventions.probes.asked import documented, unmeasured
from conformance.conventions.probes.forms import first_taken
from conformance.conventions.probes.needs import needed_forms
from conformance.conventions.probes.rope_readings import (
    OTHER, TIE, Reading, grouped, read, unanswered)

AXIS = "relative_bias_buckets"
T5_TABLE = {"num_buckets": 32, "max_distance": 128}  # T5Config's defaults, the paper's
LENGTH = 136  # tokens: distances up to 135, past max_distance 128 on both sides
WORDS = ("t5", "sign_flipped", "unidirectional", "bidirectional")


@dataclass(frozen=True)
class BucketAsk:
    """One probe case: its name in the evidence and whether its buckets face both ways."""

    name: str
    bidirectional: bool


ASKS = (BucketAsk("encoder", True), BucketAsk("decoder", False))


def asked(runner, ask: BucketAsk):
    """(the form asked, the runner's answer, the form's note): self-attention over LENGTH
    positions, T5's unscaled scores and no projection biases, with T5's table."""
    rb = {**T5_TABLE, "bidirectional": ask.bidirectional}
    return first_taken(runner, needed_forms(
        runner, f"relative-bias-{ask.name}",
        attention={"qk_head_dim": 4, "v_head_dim": 4, "bias": False, "scale": 1.0,
                   "relative_bias": rb},
        inputs={"query_len": LENGTH, "key_len": LENGTH, "self_attention": True}))


def with_rule(case, **changes):
    """`case` with fields of its RelativeBias changed (a candidate rule)."""
    a = case.attention
    return replace(case, attention=replace(a, relative_bias=replace(a.relative_bias,
                                                                    **changes)))


def candidates(case) -> dict[str, list]:
    """word -> the case variant of each candidate rule of the asked `case`."""
    both = case.attention.relative_bias.bidirectional
    other = "unidirectional" if both else "bidirectional"
    return {"t5": [case], "sign_flipped": [with_rule(case, relative_position="query_minus_key")],
            other: [with_rule(case, bidirectional=not both)],
            IGNORED: [replace(case, attention=replace(case.attention, relative_bias=None))]}


def read_asks(runner) -> tuple[dict[str, Reading], list[str], object]:
    """(ask name -> its reading, the evidence of each, the last unanswered answer)."""
    readings, figures, reasons, last = {}, [], {}, None
    for ask in ASKS:
        case, got, note = asked(runner, ask)
        if not got.answered:
            reasons[ask.name] = unanswered(got)
            last = last if last and last.raised else got  # the system's own error first
            continue
        what = f"{ask.name} buckets ({case.id}){note}"
        readings[ask.name] = r = read(got.output, candidates(case), what)
        figures.append(f"{what}: {r.figures()}" + (f" (alike: {', '.join(r.ties)})"
                                                   if r.ties else ""))
    return readings, figures + grouped(reasons), last


def word_of(readings: dict[str, Reading]) -> str:
    """The cell's word from the asks' readings (the module's docstring)."""
    words = {r.word for r in readings.values()}
    if TIE in words:
        return NOT_PROBED
    if words == {IGNORED}:
        return IGNORED
    rest = words - {"t5"}
    if not rest:
        return "t5"
    return rest.pop() if len(rest) == 1 and rest <= set(WORDS) else OTHER


def relative_bias_buckets_cell(runner, own: Convention | None = None) -> Convention:
    """The bucket rule the system's output follows (the module's docstring)."""
    readings, figures, last = read_asks(runner)
    what = (f"probe cases relative-bias-*, {T5_TABLE['num_buckets']} buckets, max distance "
            f"{T5_TABLE['max_distance']}, {LENGTH} positions (distances -{LENGTH - 1}.."
            f"{LENGTH - 1})")
    if not readings:
        return unmeasured(AXIS, runner, f"{what}: {'; '.join(figures)}", last)
    evidence = (f"{runner.name}, {what}; max |output - oracle| under each rule: "
                f"{'; '.join(figures)}")
    word = word_of(readings)
    if word == NOT_PROBED:
        return Convention(AXIS, NOT_PROBED, f"{evidence}; two rules alike at this input")
    return Convention(AXIS, word, evidence, **documented(runner, AXIS))
