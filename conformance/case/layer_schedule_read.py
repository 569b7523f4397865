"""attention.layer_schedule read and validated (the field and its types:
case/layer_schedule.py): every field by its dotted name, each layer type's rope_scaling
through case/features.py's own reader, the case's rope and mask checked against it."""
from __future__ import annotations

from dataclasses import replace
from typing import Mapping

from conformance.case.features import _keys, _positive, rope_scaling
from conformance.case.layer_schedule import LAYER_KINDS, LayerKind, LayerSchedule
from conformance.case.model import short

FIELDS = {"layer", "num_layers", "pattern", "layer_types", "nope_layers", *LAYER_KINDS}
AT = "attention.layer_schedule"
MAX_LAYERS = 1024  # a schedule longer than any published model is a typo


class _Renamed:
    """A reader whose field names under attention.rope.scaling are written under `to`:
    the rope-scaling reader of case/features.py, reused for one layer type's scaling."""

    def __init__(self, r, to: str):
        self._r, self._to = r, to

    def _name(self, dotted: str) -> str:
        return dotted.replace("attention.rope.scaling", self._to, 1)

    def fail(self, dotted: str, problem: str):
        return self._r.fail(self._name(dotted), problem)

    def integer(self, sec, name, dotted, *a, **k):
        return self._r.integer(sec, name, self._name(dotted), *a, **k)

    def boolean(self, sec, name, dotted, default):
        return self._r.boolean(sec, name, self._name(dotted), default)

    def choice(self, sec, name, dotted, default, options):
        return self._r.choice(sec, name, self._name(dotted), default, options)


def _types(r, s: Mapping, num_layers: int) -> tuple[str, ...]:
    if ("pattern" in s) == ("layer_types" in s):
        raise r.fail(f"{AT}.pattern", "give pattern (repeated to num_layers) or layer_types "
                     "(one per layer), exactly one, e.g. pattern: [sliding, full]")
    name = "pattern" if "pattern" in s else "layer_types"
    value = s[name]
    if not isinstance(value, (list, tuple)) or not value or len(value) > num_layers:
        raise r.fail(f"{AT}.{name}", f"must be a list of 1..num_layers ({num_layers}) "
                     f"layer types from {list(LAYER_KINDS)}, got {short(value)}")
    if name == "layer_types" and len(value) != num_layers:
        raise r.fail(f"{AT}.layer_types", f"must name every layer: {num_layers} types, got "
                     f"{len(value)} (a shorter list repeated is `pattern`)")
    for i, kind in enumerate(value):
        if kind not in LAYER_KINDS:
            raise r.fail(f"{AT}.{name}[{i}]", f"must be one of {list(LAYER_KINDS)}, got "
                         f"{short(kind)}")
    return tuple(value[i % len(value)] for i in range(num_layers))


def _kind(r, s: Mapping, kind: str, rotary_dim: int) -> LayerKind:
    at = f"{AT}.{kind}"
    k = _keys(r, s[kind], at, {"rope_base", "rope_scaling", "window"}, {"rope_base"} | (
        {"window"} if kind == "sliding" else set()))
    if kind == "full" and k.get("window") is not None:
        raise r.fail(f"{at}.window", "a full layer sees every key the causal mask allows; "
                     "a window belongs to the sliding type")
    window = None if kind == "full" else r.integer(k, "window", f"{at}.window")
    scaling = rope_scaling(_Renamed(r, f"{at}.rope_scaling"),
                           {"scaling": k.get("rope_scaling")}, rotary_dim)
    return LayerKind(_positive(r, k["rope_base"], f"{at}.rope_base"), scaling, window)


def _nope(r, s: Mapping, num_layers: int) -> tuple[int, ...]:
    value = s.get("nope_layers") or []
    if not isinstance(value, (list, tuple)):
        raise r.fail(f"{AT}.nope_layers", f"must be a list of layer indices, got {short(value)}")
    out = []
    for i, x in enumerate(value):
        if isinstance(x, bool) or not isinstance(x, int) or not 0 <= x < num_layers:
            raise r.fail(f"{AT}.nope_layers[{i}]", f"must be a layer index in 0.."
                         f"{num_layers - 1}, got {short(x)}")
        if x in out:
            raise r.fail(f"{AT}.nope_layers[{i}]", f"layer {x} is named twice")
        out.append(x)
    return tuple(sorted(out))


def _case_limits(r, att, mask) -> None:
    """The schedule gives each layer its base, scaling and window: the case's own must be
    left out, and a window is causal."""
    raw_rope = r.section("attention").get("rope")
    if att.rope is None:
        raise r.fail("attention.rope", "a layer schedule sets each layer type's rope base: "
                     "give attention.rope with style (and rotary_dim) for the roped layers")
    for key in ("base", "scaling"):
        if isinstance(raw_rope, Mapping) and raw_rope.get(key) is not None:
            raise r.fail(f"attention.rope.{key}", f"the layer schedule gives each type its "
                         f"rope_{'base' if key == 'base' else 'scaling'}: set it under "
                         f"{AT}.<type>, not here")
    if mask.window is not None:
        raise r.fail("mask.window", f"the layer schedule gives the sliding type its window "
                     f"({AT}.sliding.window): leave mask.window out")


def read(r, att, inp, mask):
    """`att` with its LayerSchedule, validated against the case's rope and mask."""
    s = r.section("attention")["layer_schedule"]
    if not isinstance(s, Mapping):
        raise r.fail(AT, f"must be a mapping with layer, num_layers, pattern and a section "
                     f"per type, got {short(s)}")
    unknown = sorted(set(s) - FIELDS)
    if unknown:
        raise r.fail(f"{AT}.{unknown[0]}", f"unknown field; valid: {sorted(FIELDS)}")
    _case_limits(r, att, mask)
    num = r.integer(s, "num_layers", f"{AT}.num_layers")
    if num > MAX_LAYERS:
        raise r.fail(f"{AT}.num_layers", f"must be at most {MAX_LAYERS}, got {num}")
    layer = r.integer(s, "layer", f"{AT}.layer", minimum=0)
    if layer >= num:
        raise r.fail(f"{AT}.layer", f"must be below num_layers ({num}): layers count from "
                     f"0, got {layer}")
    types = _types(r, s, num)
    for kind, example in zip(LAYER_KINDS, ("{rope_base: 10000, window: 4}",
                                           "{rope_base: 1000000}")):
        if kind in types and s.get(kind) is None:
            raise r.fail(f"{AT}.{kind}", f"the schedule has {kind} layers: give their "
                         f"settings, e.g. {example}")
        if kind not in types and s.get(kind) is not None:
            raise r.fail(f"{AT}.{kind}", f"no layer of the schedule is {kind}: leave it out")
    if "sliding" in types and mask.causal == "none":
        raise r.fail("mask.causal", "a sliding layer's window is causal (the query and "
                     "window - 1 keys before it): set mask.causal")
    kinds = tuple((k, _kind(r, s, k, att.rope.rotary_dim)) for k in LAYER_KINDS if k in types)
    return replace(att, layer_schedule=LayerSchedule(layer, types, kinds, _nope(r, s, num))), mask
