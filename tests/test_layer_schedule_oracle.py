"""attention.layer_schedule: the case field's validation, the oracle's resolution of a layer
(oracle/layer_schedule.py) against cases written without a schedule, and closed-form checks
of each system's per-layer tables against the oracle's at Gemma 3 4B's published schedule
(34 layers, sliding_window_pattern 6, rope_local_base_freq 1e4, rope_theta 1e6 with linear
x8, head_dim 256; transformers' configuration_gemma3.py, keras_hub's gemma3_backbone.py),
with one base for every layer and the schedule shifted by one planted: each must be found
on the layers it mixes up and only there, without a forward pass."""
from __future__ import annotations

import importlib.util

import numpy as np
import pytest

from conformance.case.loader import CaseError, parse_case
from conformance.oracle.layer_schedule import at_layer, kind_at, resolved, with_kind
from conformance.oracle.reference import attention
from conformance.oracle.rope_scaling import inv_freq

REL = 1e-6  # float32 inverse frequencies against float64 ones
GEMMA3_4B = {"num_layers": 34, "pattern": ["sliding"] * 5 + ["full"],
             "sliding": {"rope_base": 10000, "window": 1024},
             "full": {"rope_base": 1000000, "rope_scaling": {"type": "linear", "factor": 8}}}


def case(schedule: dict, layer: int, *, head_dim: int = 8, rope=None, mask=None, **att):
    return parse_case({"id": "layer-schedule-test", "attention": {
        "num_heads": 2, "query_features": 2 * head_dim, "bias": False,
        "rope": rope or {"style": "half_split"},
        "layer_schedule": {**schedule, "layer": layer}, **att},
        "inputs": {"batch": 1, "query_len": 8, "self_attention": True, "position_offset": 1000},
        "mask": mask or {"causal": "upper_left"}}, "<test>")


def plain(head_dim: int = 8, rope=None, window=None):
    mask = {"causal": "upper_left", **({"window": window} if window else {})}
    return parse_case({"id": "layer-schedule-plain", "attention": {
        "num_heads": 2, "query_features": 2 * head_dim, "bias": False, "rope": rope},
        "inputs": {"batch": 1, "query_len": 8, "self_attention": True, "position_offset": 1000},
        "mask": mask}, "<test>")


SMALL = {**GEMMA3_4B, "num_layers": 12, "sliding": {"rope_base": 10000, "window": 3}}


def test_a_full_layer_is_the_case_with_its_rope_written_out():
    want = plain(rope={"style": "half_split", "base": 1e6,
                       "scaling": {"type": "linear", "factor": 8}})
    got = attention(case(SMALL, 5)).output
    assert np.array_equal(got, attention(want).output)


def test_a_sliding_layer_is_the_case_with_its_window_written_out():
    want = plain(rope={"style": "half_split", "base": 1e4}, window={"left": 2, "right": 0})
    got = attention(case(SMALL, 4)).output
    assert np.array_equal(got, attention(want).output)
    assert not np.allclose(got, attention(plain(rope={"style": "half_split"})).output)


def test_a_nope_layer_is_the_case_without_rope():
    sched = {"num_layers": 8, "pattern": ["full"], "full": {"rope_base": 10000},
             "nope_layers": [3, 7]}
    assert np.array_equal(attention(case(sched, 3)).output, attention(plain()).output)
    assert np.array_equal(attention(case(sched, 2)).output,
                          attention(plain(rope={"style": "half_split"})).output)


@pytest.mark.parametrize("change, field", [
    ({"pattern": ["full"], "layer_types": ["full"]}, "attention.layer_schedule.pattern"),
    ({"layer": 12}, "attention.layer_schedule.layer"),
    ({"layer_types": ["sliding"] * 11}, "attention.layer_schedule.layer_types"),
    ({"pattern": ["local"]}, "attention.layer_schedule.pattern[0]"),
    ({"full": {"rope_base": 1e6, "window": 4}}, "attention.layer_schedule.full.window"),
    ({"sliding": {"rope_base": 1e4}}, "attention.layer_schedule.sliding.window"),
    ({"nope_layers": [12]}, "attention.layer_schedule.nope_layers[0]"),
    ({"full": {"rope_base": 1e6, "rope_scaling": {"type": "linear"}}},
     "attention.layer_schedule.full.rope_scaling.factor"),
    ({"pattern": ["full"]}, "attention.layer_schedule.sliding"),
])
def test_each_invalid_schedule_names_its_field(change, field):
    sched = {**SMALL, **change}
    if "layer_types" in change and "pattern" not in change:
        sched.pop("pattern")
    layer = sched.pop("layer", 5)
    with pytest.raises(CaseError) as err:
        case(sched, layer)
    assert err.value.field_name == field, str(err.value)


@pytest.mark.parametrize("rope, mask, field", [
    ({"style": "half_split", "base": 500000}, None, "attention.rope.base"),
    (None, {"causal": "upper_left", "window": {"left": 2}}, "mask.window"),
    (None, {"causal": "none"}, "mask.causal"),
])
def test_the_case_leaves_the_schedules_settings_to_it(rope, mask, field):
    with pytest.raises(CaseError) as err:
        case(SMALL, 5, rope=rope, mask=mask)
    assert err.value.field_name == field, str(err.value)


def gemma3_4b_config():
    from transformers import Gemma3TextConfig

    return Gemma3TextConfig(
        hidden_size=512, num_attention_heads=2, num_key_value_heads=1, head_dim=256,
        num_hidden_layers=34, sliding_window=1024, rope_theta=1e6, rope_local_base_freq=1e4,
        rope_scaling={"rope_type": "linear", "factor": 8.0})


def mismatched_layers(schedule_case, hf_types, hf_tables) -> list[int]:
    """The layers whose oracle inverse frequencies differ from the system's (relative
    REL), or whose type differs from the system's layer_types."""
    s, bad = schedule_case.attention.layer_schedule, []
    for i in range(s.num_layers):
        rope = resolved(at_layer(schedule_case, i)).attention.rope
        want = inv_freq(rope, [0])
        got = hf_tables[hf_types[i]]
        if s.kind_of(i) + "_attention" != hf_types[i] or np.max(
                np.abs(got - want) / want) > REL:
            bad.append(i)
    return bad


def test_transformers_gemma3_tables_are_the_oracles_per_layer():
    """Gemma3RotaryEmbedding's table per layer type (built from the legacy keys
    rope_theta / rope_local_base_freq / rope_scaling, as the 4B checkpoint's config holds
    them) is the oracle's at every layer; one base for every layer is wrong on the 29
    sliding layers (or the 5 full ones), the pattern shifted by one on 10 layers."""
    if importlib.util.find_spec("transformers") is None:
        pytest.skip("transformers not installed")
    from transformers.models.gemma3.modeling_gemma3 import Gemma3RotaryEmbedding

    config = gemma3_4b_config()
    rot = Gemma3RotaryEmbedding(config)
    tables = {t: getattr(rot, f"{t}_inv_freq").double().numpy() for t in set(config.layer_types)}
    assert all(getattr(rot, f"{t}_attention_scaling") == 1.0 for t in tables)
    c = case(GEMMA3_4B, 0, head_dim=256)
    assert mismatched_layers(c, config.layer_types, tables) == []
    full = kind_at(c.attention.layer_schedule, 5)
    one_base = with_kind(c, "sliding", rope_base=full.rope_base, rope_scaling=full.rope_scaling)
    sliding = [i for i in range(34) if (i + 1) % 6]
    assert mismatched_layers(one_base, config.layer_types, tables) == sliding
    s = c.attention.layer_schedule
    types = [s.kind_of((i + 1) % 34) for i in range(34)]
    shifted = case({k: v for k, v in GEMMA3_4B.items() if k != "pattern"} | {
        "layer_types": types}, 0, head_dim=256)
    assert mismatched_layers(shifted, config.layer_types, tables) == [
        i for i in range(34) if s.kind_of(i) != s.kind_of((i + 1) % 34)]


def test_transformers_gemma3_cos_sin_per_layer_type_at_far_positions():
    """Gemma3RotaryEmbedding's cos and sin of each layer type at positions 4096..4103 are
    the oracle's angles (float32 angles: within 2e-3 at |angle| ~ 4e3 rad rounding), while
    the other type's table is far from them."""
    if importlib.util.find_spec("transformers") is None:
        pytest.skip("transformers not installed")
    import torch
    from transformers.models.gemma3.modeling_gemma3 import Gemma3RotaryEmbedding

    config = gemma3_4b_config()
    rot = Gemma3RotaryEmbedding(config)
    pos = np.arange(4096, 4104)
    c = case(GEMMA3_4B, 0, head_dim=256)
    for layer, other in ((4, 5), (5, 4)):
        rope = resolved(at_layer(c, layer)).attention.rope
        angle = pos[:, None] * np.tile(inv_freq(rope, pos), 2)[None]
        cos, sin = (t[0].double().numpy() for t in rot(
            torch.zeros(1, 8, 512), torch.tensor(pos)[None], config.layer_types[layer]))
        assert np.abs(cos - np.cos(angle)).max() < 2e-3
        assert np.abs(sin - np.sin(angle)).max() < 2e-3
        wrong, _ = (t[0].double().numpy() for t in rot(
            torch.zeros(1, 8, 512), torch.tensor(pos)[None], config.layer_types[other]))
        assert np.abs(wrong - np.cos(angle)).max() > 0.5


def keras_backbone_layers(num_layers: int, window: int, local: float, glob: float) -> list:
    """(sliding, rope_wavelength, rope_scaling_factor, sliding_window_size) of each layer
    keras_hub's Gemma3Backbone builds (run in the Keras worker)."""
    from keras_hub.src.models.gemma3.gemma3_backbone import Gemma3Backbone

    bb = Gemma3Backbone(vocabulary_size=4, image_size=None, num_layers=num_layers,
                        num_query_heads=1, num_key_value_heads=1, hidden_dim=8,
                        intermediate_dim=2, head_dim=8, use_sliding_window_attention=True,
                        sliding_window_size=window, local_rope_scaling_factor=local,
                        global_rope_scaling_factor=glob, vision_encoder=None)
    return [(a.use_sliding_window_attention, a.rope_wavelength, a.rope_scaling_factor,
             a.sliding_window_size) for a in (t.attention for t in bb.transformer_layers)]


def test_keras_hub_gemma3_backbone_gives_each_layer_the_oracles_settings():
    """Gemma3Backbone at 12 layers of Gemma 3 4B's schedule gives every layer the oracle's
    type, base, linear factor and window; the schedule shifted by one is caught on the 4
    layers it moves."""
    for m in ("keras", "keras_hub", "jax"):
        if importlib.util.find_spec(m) is None:
            pytest.skip(f"{m} not installed")
    from conformance.run.workers import call_in_worker
    from conformance.runners import load

    runner = load("conformance.runners.keras.hub_gemma3:KerasHubGemma3", {})
    got = call_in_worker(runner, "tests.test_layer_schedule_oracle:keras_backbone_layers",
                         12, 1024, 1.0, 8.0)

    def settings(c, i):
        r = resolved(at_layer(c, i))
        s = r.attention.rope.scaling
        return (r.mask.window is not None, r.attention.rope.base,
                1.0 if s is None else s.factor)

    sched = {**GEMMA3_4B, "num_layers": 12}
    c = case(sched, 0, head_dim=256)
    assert [settings(c, i) for i in range(12)] == [g[:3] for g in got]
    assert all(g[3] == 1024 for g in got if g[0])
    s = c.attention.layer_schedule
    shifted = case({k: v for k, v in sched.items() if k != "pattern"} | {
        "layer_types": [s.kind_of((i + 1) % 12) for i in range(12)]}, 0, head_dim=256)
    assert [i for i in range(12) if settings(shifted, i) != got[i][:3]] == [4, 5, 10, 11]
