"""The runners of layer schedules against the float64 oracle: hf.gemma3's row at a full and
a sliding layer of a Gemma 3 schedule agrees, and the same module built with one base for
both types (a port's config) does not; keras_hub.gemma3 says in Gemma3Backbone's words why
it cannot take a pattern, base or scaling the backbone fixes; hf.gemma3 refuses NoPE
layers and a softmax-scale magnitude in transformers' words."""
from __future__ import annotations

import importlib.util

import numpy as np
import pytest

from conformance.case.loader import load_file
from conformance.contract.runner import NotExpressible
from conformance.oracle.canonical import case_data
from conformance.oracle.layer_schedule import with_kind
from conformance.oracle.reference import attention

AGREE, DIFFER = 1e-4, 1e-2
CASES = {c.id: c for c in load_file("cases/layer_schedule_gemma3.yaml")}


def needs(*modules: str) -> None:
    for m in modules:
        if importlib.util.find_spec(m) is None:
            pytest.skip(f"{m} not installed")


def hf_row(case):
    from conformance.runners.hf.gemma3 import HFGemma3

    runner = HFGemma3()
    return runner.run(case, runner.translate(case), case_data(case)).output


@pytest.mark.parametrize("case_id", ["layer-schedule-gemma3-full",
                                     "layer-schedule-gemma3-sliding"])
def test_hf_gemma3_rows_agree_and_one_base_does_not(case_id):
    needs("torch", "transformers")
    c = CASES[case_id]
    assert np.max(np.abs(hf_row(c) - attention(c).output)) < AGREE
    s = c.attention.layer_schedule
    own = s.settings(s.kind_of(s.layer))
    other = next(k for name, k in s.kinds if k != own)
    port = with_kind(c, s.kind_of(s.layer), rope_base=other.rope_base,
                     rope_scaling=other.rope_scaling)  # the system given one rope
    assert np.max(np.abs(hf_row(port) - attention(c).output)) > DIFFER


def test_hf_gemma3_refuses_nope_layers_in_its_words():
    from conformance.runners.hf.gemma3 import HFGemma3

    t = HFGemma3().translate(load_file("cases/layer_schedule_gemma3.yaml")[2])
    assert isinstance(t, NotExpressible) and "no layer without rope" in t.reason


@pytest.mark.parametrize("change, words", [
    ({"pattern": ["sliding", "full"]}, "i % 6 < 5"),
    ({"sliding": {"rope_base": 50000, "window": 3}}, "rope_wavelength 10000"),
    ({"full": {"rope_base": 1000000, "rope_scaling": {
        "type": "yarn", "factor": 8, "original_max_positions": 4096}}}, "rope_type 'linear'"),
])
def test_keras_hub_gemma3_says_what_the_backbone_fixes(change, words):
    from conformance.case.loader import parse_case
    from conformance.runners.keras.hub_gemma3 import KerasHubGemma3

    sched = {"layer": 5, "num_layers": 12, "pattern": ["sliding"] * 5 + ["full"],
             "sliding": {"rope_base": 10000, "window": 3},
             "full": {"rope_base": 1000000, "rope_scaling": {"type": "linear", "factor": 8}}}
    c = parse_case({"id": "x", "attention": {
        "num_heads": 2, "query_features": 16, "bias": False, "rope": {"style": "half_split"},
        "layer_schedule": {**sched, **change}}, "inputs": {
        "batch": 1, "query_len": 8, "self_attention": True}, "mask": {"causal": "upper_left"}},
        "<test>")
    t = KerasHubGemma3().translate(c)
    assert isinstance(t, NotExpressible) and words in t.reason, t
    assert not isinstance(KerasHubGemma3().translate(parse_case({"id": "y", "attention": {
        "num_heads": 2, "query_features": 16, "bias": False, "rope": {"style": "half_split"},
        "layer_schedule": sched}, "inputs": {"batch": 1, "query_len": 8, "self_attention": True},
        "mask": {"causal": "upper_left"}}, "<test>")), NotExpressible)


def mlx_row(case, **args):
    """mlx_lm.gemma3_text's row, its ModelArgs changed by `args` (a port's config)."""
    from conformance.runners.mlx.lm_gemma3 import MlxLmGemma3

    runner = MlxLmGemma3()
    t = runner.translate(case)
    t = type(t)(t.call, {**t.plan, **args})
    return runner.run(case, t, case_data(case)).output


@pytest.mark.parametrize("case_id", ["layer-schedule-gemma3-full",
                                     "layer-schedule-gemma3-sliding"])
def test_mlx_lm_gemma3_rows_agree_and_a_pattern_off_by_one_does_not(case_id):
    """sliding_window_pattern 5 for Gemma 3's 6 moves layers 4 and 5 to the other type; one
    base for both types moves the asked layer's rope."""
    needs("mlx", "mlx_lm")
    c = CASES[case_id]
    want = attention(c).output
    assert np.max(np.abs(mlx_row(c) - want)) < AGREE
    assert np.max(np.abs(mlx_row(c, sliding_window_pattern=5) - want)) > DIFFER
    s = c.attention.layer_schedule
    one_base = ({"rope_theta": 1e4, "rope_scaling": None} if s.kind_of(s.layer) == "full"
                else {"rope_local_base_freq": 1e6})  # one rope for both types
    assert np.max(np.abs(mlx_row(c, **one_base) - want)) > DIFFER


def test_keras_hub_gemma3_leaves_far_positions_to_the_others():
    """Its positions come from a cache of position_offset + T slots whose sliding mask is
    their square: past 4096 slots a harness limit, not the system's refusal."""
    from conformance.runners.keras.hub_gemma3 import KerasHubGemma3

    t = KerasHubGemma3().translate(CASES["layer-schedule-gemma3-sliding-far"])
    assert isinstance(t, NotExpressible) and "a far position costs its square" in t.reason
    assert not isinstance(KerasHubGemma3().translate(CASES["layer-schedule-gemma3-sliding"]),
                          NotExpressible)
