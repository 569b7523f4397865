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

This module holds the types and imports nothing of the package (case/model.py names
LayerSchedule); case/layer_schedule_read.py reads and validates the field.
"""
from __future__ import annotations

from dataclasses import dataclass

LAYER_KINDS = ("sliding", "full")
# the words transformers' layer_types use for each kind (configuration_gemma3.py)
HF_LAYER_TYPES = {"sliding": "sliding_attention", "full": "full_attention"}


@dataclass(frozen=True)
class LayerKind:
    """What one type of layer gets: its rope base and scaling, and its window."""

    rope_base: float
    rope_scaling: object = None  # a case.model.RopeScaling, or None
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
