"""The export runners pass the native calls of mixed_dtype, unbatched_input and weights_dropout
(_export/torch_native_calls.py, keras_export_answers.native_call) and the ledger judges them
(conventions/probes/native_inputs.py): what the program gives comes back as it gave it (its
output's own dtype, its weights from the same execution), and its runtime's or converter's
error is quoted in its own words, never in the suite's wrapper.  Planted programs and
probes carry each defect the calls exist to avoid: a runtime's error wrapped by the suite,
an output cast to float64 before its dtype is read, weights that move with the rate, an
output that drops while the weights do not."""
from __future__ import annotations

import numpy as np
import pytest

from conformance.contract.runner import NotExpressibleError, RawCall
from conformance.conventions.probes.native_inputs import (
    mixed_dtype_cell, unbatched_cell, weights_dropout_cell)
from conformance.oracle.canonical import case_data
from tests.helpers import planted_export_probe, require

require("torch", "onnx", "onnxruntime")
pytestmark = pytest.mark.torch


def native_cells(runner) -> list:
    """The three cells, as the ledger reads them (called in a runner's worker too)."""
    return [mixed_dtype_cell(runner), unbatched_cell(runner), weights_dropout_cell(runner)]


def _legacy(name: str = ""):
    """onnx.torch-export-legacy (the TorchScript exporter keeps these exports fast); a
    planted runner has its own name, so its programs never share a cache entry."""
    from conformance.runners.onnx.torch_export import OnnxTorchExport

    return OnnxTorchExport(dynamo=False, **({"name": f"test.native-{name}"} if name else {}))


def _with_probe(runner, probe):
    runner.probe = lambda: probe
    return runner


class _Program:
    """A RuntimeProbe of the runner's ONNX programs whose runtime is onnxruntime behind
    `runtime(session, feed) -> outputs`, so a test plants what a runtime does."""

    def __init__(self, runner, runtime):
        from conformance.runners._export.deployed import RuntimeProbe
        from conformance.runners._export.onnx_runtime import ort_session
        from conformance.runners._export.torch_onnx import wrap_module

        def execute(blob, feed):
            return runtime(ort_session(blob, "planted program"), feed)

        self.probe = RuntimeProbe(runner, execute, wrap_module, "planted runtime")


def test_the_real_export_refuses_in_onnxruntimes_own_words():
    cells = {c.axis: c for c in native_cells(_legacy())}
    assert cells["mixed_dtype"].value == "refused"
    assert "Unexpected input data type" in cells["mixed_dtype"].evidence
    assert cells["unbatched_input"].value == "refused"
    assert "Invalid rank for input" in cells["unbatched_input"].evidence
    # the TorchScript exporter traces in eval (training=TrainingMode.EVAL, torch/onnx/utils.py)
    dropout = cells["weights_dropout"]
    assert dropout.value == "ignored" and "holds 0 Dropout nodes" in dropout.evidence


def test_a_runtime_error_the_runner_wraps_is_quoted_in_the_runtimes_words():
    def wrapped(session, feed):  # as executorch/common.py execute wraps its runtime's error
        try:
            raise RuntimeError("method->set_inputs() for method 'forward' failed with error 0x12")
        except RuntimeError as exc:
            raise NotExpressibleError("the suite's wrapper: the runtime refuses") from exc

    runner = _with_probe(_legacy("wrapped"), _Program(_legacy("wrapped"), wrapped).probe)
    for cell in native_cells(runner):
        assert cell.value == "refused", cell.evidence
        assert "RuntimeError: method->set_inputs()" in cell.evidence
        assert "wrapper" not in cell.evidence and "NotExpressibleError" not in cell.evidence


@pytest.mark.parametrize("dtype, word", [(np.float32, "cast_to_layer"),
                                         (np.float64, "promoted")])
def test_the_output_dtype_is_the_runtimes_never_the_suites_cast(dtype, word):
    """A runtime that converts a float64 input to the port's float32 (OpenVINO's infer)
    reads cast_to_layer, though RuntimeProbe.run casts every output to float64 for the
    rows: the native call reads the output as the runtime gave it.  A runtime computing in
    float64 (planted) reads promoted."""
    def converting(session, feed):
        out = session.run(None, {n: v.astype(np.float32) for n, v in feed.items()})
        return [o.astype(dtype) for o in out]

    runner = _with_probe(_legacy("converting"), _Program(_legacy("converting"),
                                                         converting).probe)
    cell = mixed_dtype_cell(runner)
    assert cell.value == word, cell.evidence


def _planted(name: str, change):
    """The legacy export whose probe module's outputs `change(mha, (out, weights))` edits."""
    runner = _legacy(name)
    return _with_probe(runner, planted_export_probe(
        runner, lambda stage, mha, x: change(mha, x) if stage == "outputs" else x))


def test_weights_that_move_with_the_rate_read_post_dropout():
    moved = _planted("weights-move", lambda mha, ow: (ow[0], ow[1] * (1 - mha.dropout)))
    cell = weights_dropout_cell(moved)
    assert cell.value == "post_dropout", cell.evidence


def test_an_output_that_drops_beside_whole_weights_reads_pre_dropout():
    drops = _planted("output-drops", lambda mha, ow: (ow[0] * (1 - mha.dropout), ow[1]))
    cell = weights_dropout_cell(drops)
    assert cell.value == "pre_dropout", cell.evidence


def test_the_weights_come_from_the_same_execution_as_the_output():
    """A runtime that drops differently on every call (ExecuTorch's program exported in
    train mode) must give its output and weights from one execution: planted, a runtime
    that counts its executions."""
    calls = []

    def counting(session, feed):
        calls.append(1)
        return session.run(None, feed)

    runner = _legacy("counting")
    probe = _Program(runner, counting).probe
    from conformance.runners._export.torch_export_answers import answer, base_case

    case = base_case()
    obs, call = answer(probe, case, case_data(case), RawCall("dropout_weights", {"rate": 0.5}))
    assert len(calls) == 1 and obs.attention_weights.shape == (2, 2, 3, 5)
    assert obs.extras == {"training_set_at": "export"} and "train mode" in call
