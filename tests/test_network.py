"""The MATLAB Answers digit network (conformance/report/digit_network.py): learnables per system,
the documented counts against torch and Keras built for real."""
from __future__ import annotations

import importlib.util

import pytest

from conformance.report.digit_network import build_torch, layer_counts, totals

MATLAB_4 = {"system": "matlab", "num_heads": 4, "num_key_channels": 784, "input_features": 3136}
MATLAB_8 = {"system": "matlab", "num_heads": 8, "num_key_channels": 392, "input_features": 3136}
REST = 320 + 64 + 18_496 + 128 + 31_370  # conv1, bn1, conv2, bn2, fc


def test_the_other_layers_are_counted_from_their_documented_learnables():
    assert sum(n for _, n, _ in layer_counts()) == REST == 50_378
    assert sum(s for _, _, s in layer_counts()) == 2 * (32 + 64)  # moving mean + variance


def test_network_totals_per_system():
    four = {r.system: r for r in totals(MATLAB_4)}
    eight = {r.system: r for r in totals(MATLAB_8)}
    assert (four["matlab"].attention, four["matlab"].trainable) == (9_839_984, 9_890_362)
    assert (eight["matlab"].attention, eight["matlab"].trainable) == (4_921_560, 4_971_938)
    for rows in (four, eight):  # torch and Keras give 3136 total width for both
        assert rows["torch"].total == rows["torch"].trainable == 39_400_906
        assert (rows["keras"].trainable, rows["keras"].total) == (39_400_906, 39_401_098)


def test_typed_numbers_off_the_network_give_no_totals():
    assert totals({"system": "torch", "embed_dim": 512, "num_heads": 8}) == []


@pytest.mark.skipif(importlib.util.find_spec("torch") is None, reason="torch not installed")
def test_torch_built_for_real_matches_the_count():
    for typed in (MATLAB_4, MATLAB_8):
        want = {r.system: r for r in totals(typed)}["torch"].trainable
        assert build_torch(typed["num_heads"]) == want


@pytest.mark.skipif(importlib.util.find_spec("keras") is None
                    or importlib.util.find_spec("torch") is None,
                    reason="keras (with the torch backend) not installed")
def test_keras_built_for_real_matches_the_count():
    from conformance.run.workers import call_in_worker
    from conformance.runners import load

    got = call_in_worker(load("conformance.runners.keras.mha:KerasMHA", {"backend": "torch"}),
                         "conformance.report.digit_network:keras_counts",
                         [(4, 784), (8, 392), (4, 196)])
    assert got[0] == got[1] == {"trainable": 39_400_906, "total": 39_401_098}
    # MATLAB's (4, 784) layer in Keras's words is key_dim=196: MATLAB's count
    assert got[2]["trainable"] == 9_839_984 + REST
