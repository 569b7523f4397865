"""Keras Hub runners (conformance/runners/keras/hub.py, rope.py, cached.py): translations, the
skip without keras_hub, and the cached decode in a Keras worker's environment, where a step
without keras_hub's causal mask (a planted defect: the mask dropped) is caught.  The rotary
rows are run by tests/test_rope_permutation.py on every backend."""
from __future__ import annotations

import importlib.util

import numpy as np
import pytest

from conformance.case.loader import parse_case
from conformance.contract.runner import NotExpressible
from conformance.runners.keras.cached import KerasCached
from conformance.runners.keras.hub import INSTALL
from conformance.runners.keras.rope import KerasRope

def case(**sections):
    base = {"id": "hub", "attention": {"num_heads": 2, "query_features": 8},
            "inputs": {"batch": 2, "query_len": 5, "self_attention": True}}
    for key, value in sections.items():
        base[key] = {**base.get(key, {}), **value}
    return parse_case(base, "<test>")


def test_rope_translation_picks_the_layer_and_refuses_what_it_lacks():
    runner = KerasRope(backend="torch")
    plain = runner.translate(case(attention={"rope": {"style": "half_split", "rotary_dim": 2}},
                                  inputs={"position_offset": 3}))
    assert plain.call.startswith("keras.layers.MultiHeadAttention(")
    assert plain.plan["starts"] == (3, 3) and plain.plan["rotary_dim"] == 2
    grouped = runner.translate(case(attention={"num_kv_heads": 1,
                                               "rope": {"style": "half_split"}}))
    assert grouped.call.startswith("keras.layers.GroupQueryAttention(")
    inter = runner.translate(case(attention={"rope": {"style": "interleaved"}}))
    assert isinstance(inter, NotExpressible) and "half-split pairs only" in inter.reason
    assert isinstance(runner.translate(case()), NotExpressible)


def test_cached_translation_needs_a_decode_and_one_head_width():
    runner = KerasCached(backend="jax")
    dec = {"mask": {"causal": "upper_left"}, "decode": {"prefill": 3, "steps": 2}}
    ok = runner.translate(case(**dec))
    assert "CachedMultiHeadAttention" in ok.call and "cache_update_index" in ok.call
    assert isinstance(runner.translate(case()), NotExpressible)
    wide = runner.translate(case(attention={"qk_head_dim": 4, "v_head_dim": 2}, **dec))
    assert isinstance(wide, NotExpressible) and "stacking keys and values" in wide.reason
    assert "window" not in runner.features  # the call ignores sliding_window


def test_missing_keras_hub_is_a_skip_naming_the_install_line(monkeypatch):
    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec",
                        lambda name, *a: None if name == "keras_hub" else real(name, *a))
    for runner in (KerasRope(backend="tensorflow"), KerasCached(backend="torch")):
        reason = runner.available()
        assert reason and INSTALL in reason and "--no-deps" in reason


def cached_decode_distances() -> dict[str, float]:
    """In a Keras worker: max |last decoded step - causal forward| with keras_hub's causal
    mask (True) and with it dropped (False), through a 6-slot cache."""
    import keras
    import keras_hub

    from conformance.conventions.probes import cache_probes as cp
    from conformance.oracle.canonical import case_data
    from conformance.runners.keras.common import load_weights, numpy_zeros, tensor
    from conformance.runners.keras.hub import decode

    case = cp.decode_case()
    data = case_data(case)
    layer = keras_hub.layers.CachedMultiHeadAttention(
        num_heads=2, key_dim=4, output_shape=8, kernel_initializer=numpy_zeros(keras),
        bias_initializer=numpy_zeros(keras))
    x = data.inputs.query
    layer.build(x.shape, x.shape, x.shape)
    load_weights(keras, layer, data.weights, "float32")
    full = cp.step_candidates(case)["lower_right"]
    out = {}
    for masked in (True, False):
        steps = decode(keras, layer, tensor(keras, x, "float32"), 3, 6, masked)[0]
        out[str(masked)] = float(np.max(np.abs(steps[-1] - full)))
    return out


def test_cached_decode_needs_keras_hubs_causal_mask():
    """Through a 6-slot cache the step equals the causal forward with compute_causal_mask,
    and is far from it with the mask dropped (it attends the unwritten zero slots)."""
    if importlib.util.find_spec("keras_hub") is None or importlib.util.find_spec("torch") is None:
        pytest.skip(f"keras_hub or torch not installed ({INSTALL})")
    from conformance.run.workers import call_in_worker

    from conformance.runners import load

    cached = load("conformance.runners.keras.cached:KerasCached", {"backend": "torch"})
    found = call_in_worker(cached,  # in its worker: Keras on torch
                           "tests.test_keras_hub:cached_decode_distances")
    assert found["True"] < 1e-5
    assert found["False"] > 1e-2
