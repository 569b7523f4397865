"""A layer of a scheduled model, resolved: the case as that one layer computes it.

A model with a layer schedule (case/layer_schedule.py) gives each layer the settings of its
type: layer i is `layer_types[i]`, and that type's rope base, frequency scaling and window
are the layer's; a layer among `nope_layers` rotates nothing.  So the asked layer is an
ordinary case once resolved: attention.rope at its type's base and scaling (None at a NoPE
layer), mask.window the type's causal window (window keys: the query and window - 1 before
it, i - (window - 1) <= j <= i), and the oracle runs it unchanged.

Sources: transformers/models/gemma3/modeling_gemma3.py (Gemma3TextModel computes
position_embeddings per layer type from Gemma3RotaryEmbedding(x, position_ids, layer_type)
and the mask per type, create_sliding_window_causal_mask for "sliding_attention"; layer i
takes config.layer_types[i]), configuration_gemma3.py (layer_types default "sliding" unless
(i + 1) % sliding_window_pattern == 0; rope_parameters["sliding_attention"]["rope_theta"] =
rope_local_base_freq, 1e4, and ["full_attention"] 1e6 with the checkpoint's scaling);
transformers/models/smollm3 and llama4 (`no_rope_layers[i]` 0: layer i uses no rope).
"""
from __future__ import annotations

from dataclasses import replace

from conformance.case.model import Window


def kind_at(schedule, layer: int):
    """The LayerKind of `layer` in `schedule`."""
    return schedule.settings(schedule.kind_of(layer))


def resolved(case):
    """`case` as its asked layer computes it (the case itself when it has no schedule):
    the schedule replaced by the layer's rope (base and scaling, or none) and window."""
    s = case.attention.layer_schedule
    if s is None:
        return case
    a, kind = case.attention, kind_at(s, s.layer)
    rope = (replace(a.rope, base=kind.rope_base, scaling=kind.rope_scaling)
            if a.rope is not None and s.roped(s.layer) else None)
    window = None if kind.window is None else Window(kind.window - 1, 0)
    return replace(case, attention=replace(a, rope=rope, layer_schedule=None),
                   mask=replace(case.mask, window=window))


def at_layer(case, layer: int):
    """`case` asking another layer of the same schedule (a port off by one reads so)."""
    s = case.attention.layer_schedule
    return replace(case, attention=replace(case.attention, layer_schedule=replace(s, layer=layer)))


def with_kind(case, kind: str, **changes):
    """`case` with fields of one type's LayerKind changed (rope_base, rope_scaling, window)."""
    s = case.attention.layer_schedule
    kinds = tuple((k, replace(v, **changes) if k == kind else v) for k, v in s.kinds)
    return replace(case, attention=replace(case.attention,
                                           layer_schedule=replace(s, kinds=kinds)))


def layer_settings(case) -> tuple:
    """(rope base, rope scaling, window) the resolved case computes with; None for no rope."""
    r = resolved(case)
    rope = None if r.attention.rope is None else (r.attention.rope.base, r.attention.rope.scaling)
    return rope, r.mask.window
