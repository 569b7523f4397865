"""nope_placement, owned by the ledger: which layers of a schedule with NoPE layers a system
rotates.

The probe asks two layers of a SmolLM3-style schedule (attention.layer_schedule: 8 full
layers, base 1e4, layers 3 and 7 without RoPE) through the runner's own translate and run:
layer 3 (NoPE) and layer 2 (roped), head dim 8 all rotating, self-attention over 8
positions from 1000, causal.  Each answer is read against the float64 oracle as the layer
`unrotated` (no rope) or `rotated` (rope at the base), each candidate a case variant of the
asked one (the schedule with that layer added to, or taken from, nope_layers).  The cell:
- per_layer: layer 3 unrotated, layer 2 rotated (transformers' and mlx-lm's SmolLM3 read
  `no_rope_layers[i]` as 1 = RoPE, 0 = NoPE);
- rotated_everywhere: both rotated (the NoPE layers ignored);
- unrotated_everywhere: neither rotated;
- inverted: layer 3 rotated and layer 2 not (the per-layer flags read the other way: a
  port taking no_rope_layers = [1, 1, 1, 0, ...] for the list of layers WITHOUT rope);
`other` where an answer matches neither, `not_probed` where they tie, `refused` with the
system's error.
"""
from __future__ import annotations

from dataclasses import replace

from conformance.conventions.axes import NOT_PROBED, REFUSED, Convention
from conformance.conventions.probes.asked import documented
from conformance.conventions.probes.forms import first_taken
from conformance.conventions.probes.needs import needed_forms
from conformance.conventions.probes.positions import native_style
from conformance.conventions.probes.rope_readings import OTHER, TIE, read, unanswered

AXIS = "nope_placement"
UNROTATED, ROTATED = "unrotated", "rotated"
HEAD, LENGTH, OFFSET = 8, 8, 1000
SCHEDULE = {"num_layers": 8, "pattern": ["full"], "full": {"rope_base": 10000},
            "nope_layers": [3, 7]}
NOPE, ROPED = 3, 2  # the layers asked
WORDS = {(UNROTATED, ROTATED): "per_layer", (ROTATED, ROTATED): "rotated_everywhere",
         (UNROTATED, UNROTATED): "unrotated_everywhere", (ROTATED, UNROTATED): "inverted"}


def asked_case(runner, layer: int):
    return first_taken(runner, needed_forms(
        runner, f"nope-layer-{layer}", attention={
            "qk_head_dim": HEAD, "v_head_dim": HEAD, "rope": {"style": native_style(runner)},
            "layer_schedule": {**SCHEDULE, "layer": layer}},
        inputs={"self_attention": True, "query_len": LENGTH, "key_len": LENGTH,
                "position_offset": OFFSET},
        mask={"causal": "upper_left"}))


def with_nope(case, nope: bool):
    """`case` with its asked layer among nope_layers (`nope`) or not."""
    s = case.attention.layer_schedule
    layers = set(s.nope_layers) | {s.layer} if nope else set(s.nope_layers) - {s.layer}
    return replace(case, attention=replace(case.attention, layer_schedule=replace(
        s, nope_layers=tuple(sorted(layers)))))


def candidates(case) -> dict[str, list]:
    return {UNROTATED: [with_nope(case, True)], ROTATED: [with_nope(case, False)]}


def nope_placement_cell(runner, own: Convention | None = None) -> Convention:
    """The readings of layers 3 and 2 of the probe's schedule (the module's docstring)."""
    words, figures, raised = {}, [], False
    for layer in (NOPE, ROPED):
        case, got, note = asked_case(runner, layer)
        what = f"layer {layer} ({'NoPE' if layer == NOPE else 'RoPE'}){note}"
        if not got.answered:
            figures.append(f"{what} not answered: {unanswered(got)}")
            raised = raised or bool(got.raised)
            continue
        r = read(got.output, candidates(case), what)
        words[layer] = r.word
        figures.append(f"{what}: {r.word}: {r.figures()}")
    evidence = (f"{runner.name}, probe cases nope-layer-*: 8 layers, base 1e4, layers 3 and 7 "
                f"without RoPE, head dim {HEAD}, positions {OFFSET}..{OFFSET + LENGTH - 1}; max "
                f"|output - oracle| unrotated and rotated: {'; '.join(figures)}")
    if len(words) < 2:
        value = REFUSED if raised else NOT_PROBED
        extra = documented(runner, AXIS) if raised else {}
        return Convention(AXIS, value, evidence, **extra)
    if TIE in words.values():
        return Convention(AXIS, NOT_PROBED, evidence)
    value = WORDS.get((words[NOPE], words[ROPED]), OTHER)
    return Convention(AXIS, value, evidence, **documented(runner, AXIS))
