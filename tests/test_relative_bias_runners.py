"""The runners of T5's relative bias against the oracle (oracle/relative_bias.py): hf.t5
(T5Attention with has_relative_attention_bias) and keras_hub.t5 (keras_hub's
T5MultiHeadAttention, in its Keras worker) agree on the relative-bias cases; hf.t5 built
with is_decoder the wrong way round, or with the table's halves swapped (a port that flips
the sign of key - query moves every nonzero distance to the other half), does not; each
refusal is in the system's words."""
from __future__ import annotations

import importlib.util
from dataclasses import replace

import numpy as np
import pytest

from conformance.case.loader import load_file
from conformance.contract.runner import NotExpressible
from conformance.oracle.canonical import case_data
from conformance.oracle.reference import attention

AGREE, DIFFER = 1e-5, 1e-2  # float32 rounding of O(1) outputs; a wrong bucket's change
CASES = ("relative_bias_t5_encoder", "relative_bias_t5_decoder", "relative_bias_small_buckets")


def needs(*modules: str) -> None:
    for m in modules:
        if importlib.util.find_spec(m) is None:
            pytest.skip(f"{m} not installed")


def case(stem: str):
    return load_file(f"cases/{stem}.yaml")[0]


def gap(out, c, data=None) -> float:
    return float(np.max(np.abs(np.asarray(out, np.float64) - attention(c, data).output)))


def hf_output(c, plan_changes=None, data=None):
    from conformance.runners.hf.t5 import HFT5

    runner = HFT5()
    t = runner.translate(c)
    assert not isinstance(t, NotExpressible), t
    t = replace(t, plan={**t.plan, **(plan_changes or {})})
    return runner.run(c, t, data or case_data(c)).output


@pytest.mark.parametrize("stem", CASES)
def test_hf_t5_agrees_with_the_oracle(stem):
    needs("torch", "transformers")
    c = case(stem)
    assert gap(hf_output(c), c) < AGREE


@pytest.mark.parametrize("stem", CASES)
def test_hf_t5_with_is_decoder_the_wrong_way_is_caught(stem):
    """Bidirectional read as unidirectional (and the reverse): keys after the query land in
    bucket 0, or keys before it in the encoder's bins."""
    needs("torch", "transformers")
    c = case(stem)
    wrong = hf_output(c, {"is_decoder": c.attention.relative_bias.bidirectional})
    assert gap(wrong, c) > DIFFER


def test_hf_t5_with_the_sign_flipped_is_caught():
    """For a bidirectional table, bucket(-d) is bucket(d) in the other half (d != 0): the
    module on the table with its halves swapped is a port computing query - key."""
    needs("torch", "transformers")
    c = case("relative_bias_t5_encoder")
    data = case_data(c)
    table = data.weights.relative_bias
    swapped = np.concatenate([table[16:], table[:16]])
    swapped[0] = table[0]  # distance 0 stays in bucket 0 either way
    port = replace(data, weights=replace(data.weights, relative_bias=swapped))
    assert gap(hf_output(c, data=port), c) > DIFFER
    flipped = replace(c.attention.relative_bias, relative_position="query_minus_key")
    assert gap(hf_output(c, data=port), replace(c, attention=replace(
        c.attention, relative_bias=flipped))) < AGREE  # the swap is exactly the flip


def test_refusals_are_in_the_systems_words():
    from conformance.runners.hf.t5 import HFT5
    from conformance.runners.keras.hub_t5 import KerasHubT5

    c = case("relative_bias_small_buckets")
    keras_why = KerasHubT5().translate(c)
    assert isinstance(keras_why, NotExpressible)
    assert "relative_attention_buckets = 32" in keras_why.reason
    flipped = replace(c.attention.relative_bias, relative_position="query_minus_key")
    hf_why = HFT5().translate(replace(c, attention=replace(c.attention,
                                                           relative_bias=flipped)))
    assert isinstance(hf_why, NotExpressible) and "memory_position" in hf_why.reason


def keras_outputs() -> dict[str, list]:
    """In the keras_hub.t5 worker: its output on each of the T5-sized relative-bias cases."""
    from conformance.runners.keras.hub_t5 import KerasHubT5

    runner, out = KerasHubT5(), {}
    for stem in CASES[:2]:
        c = case(stem)
        out[stem] = runner.run(c, runner.translate(c), case_data(c)).output.tolist()
    return out


def test_keras_hub_t5_is_a_second_witness():
    needs("keras_hub", "tensorflow")
    from conformance.run.workers import call_in_worker
    from conformance.runners import load

    runner = load("conformance.runners.keras.hub_t5:KerasHubT5", {})
    found = call_in_worker(runner, "tests.test_relative_bias_runners:keras_outputs")
    for stem, out in found.items():
        assert gap(out, case(stem)) < AGREE, stem
