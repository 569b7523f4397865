"""attention.layer_schedule: which layer of a model the case is, and the schedule of layer
types that model runs, so each layer's rope base, frequency scaling, window and NoPE are
the ones its type gives it (oracle/layer_schedule.py resolves them).

    attention:
      rope: {style: half_split}               # pairing and rotary_dim of every roped layer;
                                              # no base or scaling here: the types give them
      layer_schedule:
        layer: 5                              # the layer asked, 0-based
        num_layers: 12
        pattern: [sliding, sliding, sliding, sliding, sliding, full]   # repeated to num_layers
        # or layer_types: [...]               # one type per layer, num_layers long
        sliding: {rope_base: 10000, window: 4}
        full: {rope_base: 1000000, rope_scaling: {type: linear, factor: 8}}
        nope_layers: [3, 7, 11]               # layers that apply no RoPE at all

A type is `sliding` (a causal window of `window` keys: the query and window - 1 before it,
transformers' `sliding_window`, keras_hub's `sliding_window_size`) or `full` (every key the
causal mask allows).  This is transformers' Gemma 3 (configuration_gemma3.py: `layer_types`
from `sliding_window_pattern`, `rope_parameters` keyed by "sliding_attention" /
"full_attention", `rope_local_base_freq`), keras_hub's Gemma3Backbone (gemma3_backbone.py:
`i % 6 < 5` sliding, wavelength 1e4 local and 1e6 global, a scaling factor each) and the
NoPE layers of Llama 4 (`no_rope_layers`) and SmolLM3.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Mapping

from conformance.case.model import RopeScaling, short

LAYER_KINDS = ("sliding", "full")
# the words transformers' layer_types use for each kind (configuration_gemma3.py)
HF_LAYER_TYPES = {"sliding": "sliding_attention", "full": "full_attention"}
MAX_LAYERS = 1024  # a schedule longer than any published model is a typo
FIELDS = {"layer", "num_layers", "pattern", "layer_types", "nope_layers", *LAYER_KINDS}
AT = "attention.layer_schedule"


@dataclass(frozen=True)
class LayerKind:
    """What one type of layer gets: its rope base and scaling, and its window."""

    rope_base: float
    rope_scaling: RopeScaling | None = None
    window: int | None = None  # keys a query sees: itself and window - 1 before it


@dataclass(frozen=True)
class LayerSchedule:
    """The asked layer and the model's schedule, every layer's type spelled out."""

    layer: int
    layer_types: tuple[str, ...]  # one of LAYER_KINDS per layer
    kinds: tuple[tuple[str, LayerKind], ...]  # (type, its settings), in LAYER_KINDS order
    nope_layers: tuple[int, ...] = ()

    @property
    def num_layers(self) -> int:
        return len(self.layer_types)

    def kind_of(self, layer: int) -> str:
        return self.layer_types[layer]

    def settings(self, kind: str) -> LayerKind:
        return dict(self.kinds)[kind]

    def roped(self, layer: int) -> bool:
        return layer not in self.nope_layers


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
    from conformance.case.features import _keys, _positive, rope_scaling

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
    from dataclasses import replace

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
