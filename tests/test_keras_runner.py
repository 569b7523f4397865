"""The Keras runners' framework-free helpers: translation, layouts, digests,
names and workers.  Nothing here imports Keras; the one check of the worker
side runs in a Keras (JAX) worker and skips with a reason without them."""
from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pytest

from conformance.case.loader import load_cases
from conformance.contract.runner import NotExpressible
from conformance.convert import to_keras
from conformance.runners.keras.common import digest
from conformance.runners._export.keras_mha import mha_translation
from conformance.runners.keras.gqa import KerasGQA, gqa_translation
from conformance.runners.keras.mha import KerasMHA
from conformance.runners.onnx.keras_export import OnnxKerasExport
from conformance.oracle.canonical import case_data

CASES = {c.id: c for c in load_cases(Path(__file__).resolve().parent.parent / "cases")}


def test_translation_is_what_a_user_types():
    t = mha_translation(CASES["matlab-4x784"])
    assert t.call == ("keras.layers.MultiHeadAttention(num_heads=4, key_dim=196, "
                      "value_dim=196, output_shape=3136)")


def test_per_head_widths_are_expressible_and_grouped_query_is_not():
    assert not isinstance(mha_translation(CASES["keras-per-head-widths-3x7x5"]), NotExpressible)
    assert isinstance(mha_translation(CASES["grouped-query-8q-2kv"]), NotExpressible)
    assert "lower" in mha_translation(CASES["causal-lower-right-3x6"]).reason


def test_gqa_needs_one_head_dim_and_the_query_width():
    assert isinstance(gqa_translation(CASES["per-head-widths"]), NotExpressible)
    assert gqa_translation(CASES["grouped-query-8q-2kv"]).plan == {
        "head_dim": 4, "num_query_heads": 8, "num_key_value_heads": 2}


def test_kernels_are_the_canonical_layout_transposed():
    w = case_data(CASES["keras-per-head-widths-3x7x5"]).weights
    named = to_keras(w, grouped=True)  # what the runners load (load_weights)
    assert named["query/kernel"].shape == (16, 3, 7)
    assert named["value/kernel"].shape == (16, 3, 5)
    assert named["attention_output/kernel"].shape == (3, 5, 9)
    assert np.array_equal(named["key/kernel"][:, 1, :], w.wk[1])
    grouped = case_data(CASES["grouped-query-8q-2kv"]).weights
    assert to_keras(grouped, grouped=True)["key/kernel"].shape[1] == 2  # GQA: kv heads
    with pytest.raises(ValueError, match="one key/value head per query head"):
        to_keras(grouped)  # MultiHeadAttention's layout has none


def test_runners_share_one_worker_per_backend():
    tf, jax = KerasMHA(backend="tensorflow"), KerasMHA(backend="jax")
    assert tf.worker.key == "keras-tensorflow"
    assert tf.worker.env["KERAS_BACKEND"] == "tensorflow"
    assert tf.worker.env["OMP_NUM_THREADS"] == "1"  # deterministic sums
    for other in (KerasGQA(backend="tensorflow"), KerasMHA(backend="tensorflow", scores=True),
                  OnnxKerasExport()):  # one TensorFlow worker for all
        assert other.worker == tf.worker
    assert jax.worker.key == "keras-jax"


def test_parameters_name_the_runners_and_their_paths():
    assert [(r.name, r.path) for r in (KerasMHA(backend="tensorflow"),
                                       KerasMHA(backend="jax", scores=True))] == [
        ("keras.tensorflow", "fused"), ("keras.jax.scores", "scores")]
    gqa = KerasGQA(backend="torch")
    assert (gqa.name, gqa.system, gqa.requires) == (
        "keras.gqa.torch", "keras.layers.GroupQueryAttention", ("keras", "torch"))
    assert KerasMHA(backend="jax", name="keras.mine").name == "keras.mine"
    with pytest.raises(TypeError, match="no runner parameter"):
        KerasMHA(backnd="jax")


def test_digest_is_small_and_samples_large_outputs():
    small = digest(np.arange(6.0).reshape(1, 2, 3) / 3, "float32")
    assert np.float32(small["values"][1]) == np.float32(1 / 3) and not small["sampled"]
    big = digest(np.ones((1, 4, 3136)), "float32")
    assert big["sampled"] and len(big["values"]) == 256 and big["size"] == 12544


def test_worker_machinery_shares_layers_and_refuses_bad_readback():
    """In a Keras (JAX) worker: a case's `.scores` row reuses the layer its fused
    row built, another case does not, and a weight the layer cannot hold
    exactly fails the readback check (skips without Keras or JAX)."""
    from conformance.run import workers
    from conformance.runners import load

    probe = load("tests.keras_probe:KerasProbe")
    if probe.available():
        pytest.skip(probe.available())
    case = CASES["no-bias"]
    notes = workers.run_in_worker(probe, case, probe.translate(case)).notes
    assert notes[:2] == ["scores row shares the layer: True", "another case shares it: False"]
    assert re.match(r"readback refused: readback of \S+/query/kernel differs", notes[2])


def test_keras_workers_hide_only_what_their_backend_does_not_use():
    assert set(KerasMHA(backend="tensorflow").worker.hide) == {"jax", "pandas"}
    assert "jax" not in KerasMHA(backend="jax").worker.hide
