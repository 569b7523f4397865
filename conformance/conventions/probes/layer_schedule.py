"""per_layer_rope, owned by the ledger: whether a system computes the asked layer of a
scheduled model with that layer's own rope base, scaling and window.

The probe asks two layers of a Gemma 3 schedule (attention.layer_schedule: 12 layers,
pattern five sliding to one full; sliding: base 1e4, a causal window of 3 keys; full: base
1e6 with a linear scaling of 8) through the runner's own translate and run: layer 5 (full)
and layer 4 (sliding), head dim 8 all rotating, self-attention over 8 positions from 1000,
causal.  Each answer is read against the float64 oracle (oracle/layer_schedule.py resolves
the layer) under each reading, every candidate a case variant of the asked one:
- per_layer: the layer's own type (its base, scaling and window);
- one_base: the other type's rope (base and scaling) with the layer's own window: one rope
  for every layer, as a port with a single rope_theta computes;
- shifted: the layer computed as its neighbour i - 1 or i + 1 where that one's type
  differs (its rope and its window): a pattern off by one.
At this input the three part by 0.1 or more (the bases turn pair 1 by 0.1 and 0.004 rad
per position, the window drops 5 of 8 keys from the last query).  The cell is per_layer
where both layers read so; else the one word the other readings share (the evidence gives
each layer's), `other` where no candidate matches or two layers read two other words,
`not_probed` where two candidates tie (rope_readings.read), `refused` with the system's
error.
"""
from __future__ import annotations

from conformance.conventions.axes import NOT_PROBED, REFUSED, Convention
from conformance.conventions.probes.asked import documented
from conformance.conventions.probes.forms import first_taken
from conformance.conventions.probes.needs import needed_forms
from conformance.conventions.probes.positions import native_style
from conformance.conventions.probes.rope_readings import OTHER, TIE, Reading, read, unanswered
from conformance.oracle.layer_schedule import at_layer, kind_at, layer_settings, with_kind

AXIS = "per_layer_rope"
PER_LAYER, ONE_BASE, SHIFTED = "per_layer", "one_base", "shifted"
HEAD, LENGTH, OFFSET = 8, 8, 1000  # head dim, positions, the first of them
SCHEDULE = {"num_layers": 12, "pattern": ["sliding"] * 5 + ["full"],
            "sliding": {"rope_base": 10000, "window": 3},
            "full": {"rope_base": 1000000, "rope_scaling": {"type": "linear", "factor": 8}}}
LAYERS = (5, 4)  # the full layer, then the sliding one before it


def asked_case(runner, layer: int, schedule: dict | None = None):
    """(the form asked, the answer, its note) for `layer` of `schedule`."""
    return first_taken(runner, needed_forms(
        runner, f"layer-schedule-{layer}", attention={
            "qk_head_dim": HEAD, "v_head_dim": HEAD, "rope": {"style": native_style(runner)},
            "layer_schedule": {**(schedule or SCHEDULE), "layer": layer}},
        inputs={"self_attention": True, "query_len": LENGTH, "key_len": LENGTH,
                "position_offset": OFFSET},
        mask={"causal": "upper_left"}))


def candidates(case) -> dict[str, list]:
    """word -> the case variants of that reading (words with no variant that differs from
    the asked layer's own are left out)."""
    s = case.attention.layer_schedule
    own_kind, own = s.kind_of(s.layer), layer_settings(case)
    one_base = [with_kind(case, own_kind, rope_base=kind_at(s, j).rope_base,
                          rope_scaling=kind_at(s, j).rope_scaling)
                for j in range(s.num_layers) if s.kind_of(j) != own_kind]
    shifted = [at_layer(case, j) for j in (s.layer - 1, s.layer + 1)
               if 0 <= j < s.num_layers]
    out = {PER_LAYER: [case],
           ONE_BASE: _distinct(one_base, own), SHIFTED: _distinct(shifted, own)}
    return {w: cases for w, cases in out.items() if cases}


def _distinct(cases: list, own: tuple) -> list:
    """The variants whose resolved layer differs from `own`, one per setting."""
    seen, out = {own}, []
    for c in cases:
        key = layer_settings(c)
        if key not in seen:
            seen.add(key)
            out.append(c)
    return out


def combined(readings: dict[int, Reading]) -> str:
    """The cell's word from each layer's reading (the module's docstring)."""
    words = {NOT_PROBED if r.word == TIE else r.word for r in readings.values()}
    others = words - {PER_LAYER}
    if not others:
        return PER_LAYER
    return others.pop() if len(others) == 1 else OTHER


def layer_schedule_cell(runner, own: Convention | None = None) -> Convention:
    """The reading of layers 5 and 4 of the probe's schedule (the module's docstring)."""
    readings, figures, raised = {}, [], []
    for layer in LAYERS:
        case, got, note = asked_case(runner, layer)
        kind = case.attention.layer_schedule.kind_of(layer)
        what = f"layer {layer} ({kind}){note}"
        if not got.answered:
            figures.append(f"{what} not answered: {unanswered(got)}")
            raised += [got] if got.raised else []
            continue
        r = readings[layer] = read(got.output, candidates(case), what)
        figures.append(f"{what}: {r.word}: {r.figures()}"
                       + (f" (alike: {', '.join(r.ties)})" if r.ties else ""))
    head = (f"{runner.name}, probe cases layer-schedule-*: 12 layers, 5 sliding (base 1e4, "
            f"window 3) to 1 full (base 1e6, linear x8), head dim {HEAD}, positions "
            f"{OFFSET}..{OFFSET + LENGTH - 1}; max |output - oracle| under each reading")
    evidence = f"{head}: {'; '.join(figures)}"
    if not readings:
        if raised:
            return Convention(AXIS, REFUSED, evidence, **documented(runner, AXIS))
        return Convention(AXIS, NOT_PROBED, evidence)
    return Convention(AXIS, combined(readings), evidence, **documented(runner, AXIS))
