"""The Keras runners' framework-free helpers: translation, layouts, digests, the
cross-backend section.  Nothing here imports Keras; the one check of the worker
side runs in a Keras (JAX) worker and skips with a reason without them."""
from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from conformance.case import load_cases
from conformance.runners import NotExpressible
from conformance.runners.keras_gqa import gqa_translation
from conformance.runners.keras_mha import (KerasJax, KerasTensorFlow, canonical_variables,
                                           digest, mha_translation)
from conformance.runners.keras_report import max_difference, section_keras_backends
from conformance.weights import case_data

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
    assert gqa_translation(CASES["grouped-query-8q-2kv"]).kwargs == {
        "head_dim": 4, "num_query_heads": 8, "num_key_value_heads": 2}


def test_kernels_are_the_canonical_layout_transposed():
    w = case_data(CASES["keras-per-head-widths-3x7x5"]).weights
    named = canonical_variables(w)
    assert named["query/kernel"].shape == (16, 3, 7)
    assert named["value/kernel"].shape == (16, 3, 5)
    assert named["attention_output/kernel"].shape == (3, 5, 9)
    assert np.array_equal(named["key/kernel"][:, 1, :], w.wk[1])


def test_runners_share_one_worker_per_backend():
    assert KerasTensorFlow.worker == "keras-tensorflow"
    assert KerasTensorFlow.worker_env["KERAS_BACKEND"] == "tensorflow"
    assert KerasTensorFlow.worker_env["OMP_NUM_THREADS"] == "1"  # deterministic sums
    from conformance.runners.keras_gqa import KerasGQATensorFlow
    from conformance.runners.onnx_keras import OnnxKerasExport

    for other in (KerasGQATensorFlow, OnnxKerasExport):  # one TensorFlow worker for all
        assert (other.worker, other.worker_env) == (KerasTensorFlow.worker,
                                                    KerasTensorFlow.worker_env)
    assert KerasJax.worker == "keras-jax"


def test_digest_is_small_and_samples_large_outputs():
    small = digest(np.arange(6.0).reshape(1, 2, 3) / 3, "float32")
    assert np.float32(small["values"][1]) == np.float32(1 / 3) and not small["sampled"]
    big = digest(np.ones((1, 4, 3136)), "float32")
    assert big["sampled"] and len(big["values"]) == 256 and big["size"] == 12544


def test_max_difference_and_section():
    a = {"size": 3, "sampled": False, "values": [1.0, 2.0, None]}
    b = {"size": 3, "sampled": False, "values": [1.0, 2.5, 3.0]}
    assert max_difference(a, b) == "5.00e-01 (1 non-finite skipped)"
    assert max_difference(a, None) == ""
    frame = pd.DataFrame([{"case": "no-bias", "runner": "keras.tensorflow",
                           "extras": {"_output_digest": a}},
                          {"case": "no-bias", "runner": "keras.jax",
                           "extras": {"_output_digest": b}}], dtype=object)
    section = section_keras_backends(frame, [CASES["no-bias"]], ["keras.tensorflow", "keras.jax"])
    assert list(section.table.columns) == ["tf − jax"]
    assert section_keras_backends(frame.iloc[:0], [], []) is None


def test_worker_machinery_shares_layers_and_refuses_bad_readback():
    """In a Keras (JAX) worker: a case's `.scores` row reuses the layer its fused
    row built, another case does not, and a weight the layer cannot hold
    exactly fails the readback check (skips without Keras or JAX)."""
    from conformance import workers
    from conformance.runners import load

    probe = load("tests.keras_probe:KerasProbe")
    if probe.available():
        pytest.skip(probe.available())
    case = CASES["no-bias"]
    try:
        notes = workers.run_in_worker(probe, case, probe.translate(case)).notes
    finally:
        workers.close(probe.worker)
    assert notes[:2] == ["scores row shares the layer: True", "another case shares it: False"]
    assert re.match(r"readback refused: readback of \S+/query/kernel differs", notes[2])


def test_keras_workers_hide_only_what_their_backend_does_not_use():
    from conformance.workers import HIDE_ENV

    assert set(KerasTensorFlow.worker_env[HIDE_ENV].split(",")) == {"jax", "pandas"}
    assert "jax" not in KerasJax.worker_env[HIDE_ENV].split(",")
