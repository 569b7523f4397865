"""rope_scaling_frequencies, owned by the ledger: whose frequencies a system's output
matches, for each RoPE scaling type its runner translates (attention.rope.scaling).

Each type is asked through the runner's own translate and run (rope_readings.asked: head
dim 8, all of it rotating, in the pairing the system applies) at positions where its
variants part, and the output is read against the float64 oracle under each variant
(oracle/rope_scaling.py; each variant a case, rope_readings.py), YaRN's and LongRoPE's
magnitude read in whichever place fits best (a nuisance here: rope_magnitude.py reads it):
- linear: every frequency / factor (`linear`);
- dynamic, factor 4, original_max_positions 128, positions 512..516:
  `dynamic_per_length` (transformers/modeling_rope_utils.py _compute_dynamic_ntk_parameters
  with dynamic_rope_update: the base grown to base * (factor L / P - (factor - 1)) ** (d /
  (d - 2)), L the largest position + 1), `dynamic_static` (the NTK base grown once,
  base * factor ** (d / (d - 2)), at any length) and `dynamic_uniform` (every frequency
  divided by factor ** (d / (d - 2)) at any length: keras_hub/src/layers/modeling/
  rotary_embedding.py _get_inverse_freq, rope_type="dynamic", which divides pair 0 too),
  and read against linear at the factor too (`dynamic:linear`);
- yarn (factor 4, original 128), asked with truncate true and false: `yarn` (the ramp's
  edges floored and ceiled, transformers' default) and `yarn_untruncated` (the edges as
  computed, 1.309 dims against 2 here: pair 1 turns 0.0625 or 0.0427 rad per position);
- llama3 (factor 8, original 128, bands 1 / 4: pair 0 kept, pair 1 smoothed, 2 and 3
  divided): `llama3` (a port with the bands swapped divides pair 1 and reads `llama3:other`);
- longrope (factor 4, original 128), asked at positions 3..7 and 512..516: `longrope`
  (the short factors within the original context, the long ones past it, as
  transformers' longrope_frequency_update switches), `longrope_short` (short at both),
  `longrope_long` (long at both).
Every type is also read against unscaled RoPE (`ignored`).

The cell is short free text: the readings of the types the runner answered, in that order,
each a word above, or `<asked>:<reading>` where it is another type's word, `ignored`
(accepted, output of unscaled RoPE), `other` (no variant within NEAR), `refused` (the
system's own error) or `not_probed` (a tie at this input); `ignored` or `refused` alone
where every answered type reads so.  A type the runner cannot translate is left out (its
reason in the evidence).
"""
from __future__ import annotations

from conformance.conventions.axes import IGNORED, NOT_PROBED, REFUSED, Convention
from conformance.conventions.probes.asked import documented
from conformance.conventions.probes.rope_readings import (
    OTHER, TIE, Ask, Reading, asked, grouped, magnitude_variants, read, unanswered, unscaled,
    with_scaling)

AXIS = "rope_scaling_frequencies"
ORIGINAL, BEYOND, WITHIN = 128, 512, 3  # original_max_positions; first positions past, in it
SHORT, LONG = (1.0, 1.5, 2.0, 3.0), (2.0, 4.0, 8.0, 16.0)  # longrope's per-pair factors
LONGROPE = {"type": "longrope", "factor": 4, "original_max_positions": ORIGINAL,
            "short_factor": list(SHORT), "long_factor": list(LONG)}
ASKS = (
    Ask("linear", {"type": "linear", "factor": 4}, offset=BEYOND),
    Ask("dynamic", {"type": "dynamic", "factor": 4, "original_max_positions": ORIGINAL},
        offset=BEYOND),
    Ask("yarn", {"type": "yarn", "factor": 4, "original_max_positions": ORIGINAL},
        offset=BEYOND),
    Ask("yarn_untruncated", {"type": "yarn", "factor": 4, "original_max_positions": ORIGINAL,
                             "truncate": False}, offset=BEYOND),
    Ask("llama3", {"type": "llama3", "factor": 8, "original_max_positions": ORIGINAL,
                   "low_freq_factor": 1, "high_freq_factor": 4}, offset=BEYOND),
    Ask("longrope_within", LONGROPE, offset=WITHIN),
    Ask("longrope_beyond", LONGROPE, offset=BEYOND),
)
# the words an ask's answer is written as, bare; any other reading is `<asked>:<reading>`
FAMILY = {"linear": ("linear",),
          "dynamic": ("dynamic_per_length", "dynamic_static", "dynamic_uniform"),
          "yarn": ("yarn", "yarn_untruncated"), "yarn_untruncated": ("yarn_untruncated",),
          "llama3": ("llama3",)}
WORDS = ("linear", "dynamic_per_length", "dynamic_static", "dynamic_uniform", "yarn",
         "yarn_untruncated", "llama3", "longrope", "longrope_short", "longrope_long")
# (reading within the original context, reading past it) -> the longrope word
SWITCH = {("short", "long"): "longrope", ("short", "short"): "longrope_short",
          ("long", "long"): "longrope_long"}


def dynamic_exponent_factor(case) -> float:
    """factor ** (d / (d - 2)): the NTK base growth of dynamic scaling at the factor."""
    s, d = case.attention.rope.scaling, case.attention.rope.rotary_dim
    return s.factor ** (d / (d - 2))


def candidates(name: str, case) -> dict[str, list]:
    """word -> the case variants (each magnitude placement) of each reading of `name`."""
    s = case.attention.rope.scaling
    if name == "dynamic":
        grown = dynamic_exponent_factor(case)
        rules = {"dynamic_per_length": case,
                 "dynamic_static": unscaled(case, case.attention.rope.base * grown),
                 "dynamic_uniform": with_scaling(case, kind="linear", factor=grown),
                 "linear": with_scaling(case, kind="linear")}  # the factor as linear
    elif name.startswith("yarn"):
        rules = {"yarn": with_scaling(case, truncate=True),
                 "yarn_untruncated": with_scaling(case, truncate=False)}
    elif name == "longrope_within":  # the oracle reads short here, long past the original
        rules = {"short": case, "long": with_scaling(case, short_factor=s.long_factor)}
    elif name == "longrope_beyond":
        rules = {"long": case, "short": with_scaling(case, long_factor=s.short_factor)}
    else:
        rules = {name: case}
    out = {w: magnitude_variants(c) if c.attention.rope.scaling else [c]
           for w, c in rules.items()}
    return {**out, IGNORED: [unscaled(case)]}


def token(name: str, reading: Reading) -> str:
    """How one ask's reading is written in the cell."""
    word = NOT_PROBED if reading.word == TIE else reading.word
    return word if word in FAMILY.get(name, ()) else f"{name}:{word}"


def longrope_token(within: Reading | None, beyond: Reading | None) -> str | None:
    """The longrope word of its two asks (None where neither answered)."""
    if within is None and beyond is None:
        return None
    pair = (within.word if within else "", beyond.word if beyond else "")
    if pair in SWITCH:
        return SWITCH[pair]
    if set(pair) <= {IGNORED, ""}:
        return f"longrope:{IGNORED}"
    return f"longrope:{OTHER}" if "" not in pair else f"longrope:{NOT_PROBED}"


def read_asks(runner) -> tuple[dict[str, Reading], dict[str, str], list[str]]:
    """(ask name -> its reading, ask name -> the system's error, the evidence of each)."""
    readings, raised, figures, reasons = {}, {}, [], {}
    for ask in ASKS:
        case, got, note = asked(runner, ask)
        if not got.answered:
            reasons[ask.name] = unanswered(got)
            if got.raised:
                raised[ask.name] = got.raised
            continue
        what = f"{ask.name} at positions from {ask.offset}{note}"
        readings[ask.name] = r = read(got.output, candidates(ask.name, case), what)
        figures.append(f"{what}: {r.figures()}" + (f" (alike: {', '.join(r.ties)})"
                                                   if r.ties else ""))
    return readings, raised, figures + grouped(reasons)


def rope_scaling_frequencies_cell(runner, own: Convention | None = None) -> Convention:
    """The readings of each scaling type the runner answers (the module's docstring)."""
    readings, raised, figures = read_asks(runner)
    tokens = [token(n, r) for n, r in readings.items() if not n.startswith("longrope")]
    tokens += [f"{n}:{REFUSED}" for n in raised if not n.startswith("longrope")]
    lr = longrope_token(readings.get("longrope_within"), readings.get("longrope_beyond"))
    tokens += [lr] if lr else [f"longrope:{REFUSED}"] if any(
        n.startswith("longrope") for n in raised) else []
    what = (f"{runner.name}, probe cases rope-scaling-*, head dim 8 rotating, original "
            f"{ORIGINAL}; max |output - oracle| under each reading")
    evidence = f"{what}: {'; '.join(figures)}"
    if not readings and not raised:
        return Convention(AXIS, NOT_PROBED, evidence)
    if not readings:
        return Convention(AXIS, REFUSED, evidence, **documented(runner, AXIS))
    bare = set(tokens) - {f"{n}:{IGNORED}" for n in FAMILY} - {f"longrope:{IGNORED}"}
    value = IGNORED if not bare and not raised else ", ".join(dict.fromkeys(tokens))
    return Convention(AXIS, value, evidence, **documented(runner, AXIS))
