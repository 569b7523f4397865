"""The exported Keras layer (onnx.keras-export, litert.keras) passes the native calls of
mixed_dtype, unbatched_input and weights_dropout (keras_export_answers.native_call) and the
ledger judges them (conventions/probes/native_inputs.py).  A fake runtime with the oracle as
its arithmetic answers them; each planted runtime carries what a real one does or a defect
the calls exist to keep out of the cell: an output cast before its dtype is read, a 2-D
input accepted, weights returned before the dropout the output shows, a program the runtime
refuses to load.  Then the real runners, in their TensorFlow worker."""
from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pytest

from conformance.contract.runner import RawCall, Runner
from conformance.conventions.probes.native_inputs import (
    mixed_dtype_cell, unbatched_cell, weights_dropout_cell)
from conformance.conventions.probes.probing import output_with
from conformance.oracle.canonical import case_data


def native_cells(runner) -> list:
    """The three cells, as the ledger reads them (called in a runner's worker too)."""
    return [mixed_dtype_cell(runner), unbatched_cell(runner), weights_dropout_cell(runner)]


class _Session:
    """A program of one probe configuration run by a fake runtime: `plant` says how."""

    def __init__(self, case, config: dict, plant: str):
        self.case, self.config, self.plant = case, config, plant

    def get_inputs(self):
        return [SimpleNamespace(name=n) for n in ("query", "value", "key")]

    def run(self, _names, feed: dict) -> list:
        if self.plant == "strict" and any(v.dtype != np.float32 or v.ndim != 3
                                          for v in feed.values()):
            raise ValueError("Cannot set tensor: Got value of type FLOAT64 but expected "
                             "type FLOAT32")  # the runtime's own words (LiteRT's)
        unbatched = feed["query"].ndim == 2
        out = output_with(self.case, None)
        out = out[:1] if unbatched else out
        dtype = np.float64 if self.plant == "float64" else np.float32
        if self.config.get("return_attention_scores"):
            weights = np.full((2, 2, 3, 5), 0.2)  # rows that sum to 1: taken before dropout
            return [(out * 0.5).astype(dtype), weights]
        return [out.astype(dtype)]


class _Graphs:
    what, runtime, artifact = "fake program", "fake runtime", "fake model"

    def __init__(self, plant: str = ""):
        self.plant, self.configs = plant, []

    def session(self, case, mask=None, causal=False, dropout=0.0, value_mask=False,
                options=(), call_options=()):
        if self.plant == "unloadable" and dropout:
            from conformance.contract.runner import NotExpressibleError

            try:
                raise RuntimeError("INVALID_GRAPH : No Op registered for "
                                   "StatelessRandomUniformV2")
            except RuntimeError as exc:
                raise NotExpressibleError("onnxruntime refuses to load the probe graph") \
                    from exc
        self.configs.append({"dropout": dropout, **dict(call_options)})
        return _Session(case, self.configs[-1], self.plant)


class _Exported(Runner):
    name, framework, system = "toy.keras-native", "toy", "toy"

    def __init__(self, graphs):
        super().__init__()
        from conformance.runners._export.keras_export_answers import ANSWERS

        self.g, self.answers = graphs, ANSWERS

    def answer(self, case, data, raw):
        from conformance.runners._export.keras_export_answers import answer

        return answer(self.g, case, data, raw)


def test_the_weights_call_asks_the_scores_of_a_training_call_in_the_model():
    from conformance.runners._export.keras_export_answers import answer, base_case

    g, case = _Graphs(), base_case()
    obs, call = answer(g, case, case_data(case), RawCall("dropout_weights", {"rate": 0.5}))
    assert g.configs == [{"dropout": 0.5, "return_attention_scores": True, "training": True}]
    assert obs.extras == {"training_set_at": "export"} and obs.weights_returned == "per_head"
    assert "training=True" in call


@pytest.mark.parametrize("plant, words", [
    ("", ("cast_to_layer", "accepted", "pre_dropout")),   # LiteRT's readings
    ("float64", ("promoted", "accepted", "pre_dropout")),  # a runtime computing in float64
    ("strict", ("refused", "refused", "pre_dropout")),     # onnxruntime's readings
])
def test_each_runtime_reading_is_the_runtimes(plant, words):
    cells = native_cells(_Exported(_Graphs(plant)))
    assert tuple(c.value for c in cells) == words, [c.evidence for c in cells]


@pytest.mark.parametrize("item, words", [(0, "a batch axis of 1 given back, max |output - "
                                                "oracle item 0| 2.6e-08"),  # float32
                                         (1, "the 2-D input is misread")])
def test_a_batch_axis_of_one_given_back_is_read_past_not_called_a_misreading(item, words):
    """LiteRT resizes the (2, T, E) input to (T, E) and gives back (1, T, E): item 0's
    output, not a misreading; a (1, T, E) output of another item still is one (planted)."""
    class GivesBack(_Session):
        def run(self, _names, feed):
            return [output_with(self.case, None)[item:item + 1].astype(np.float32)]

    graphs = _Graphs()
    graphs.session = lambda case, **kw: GivesBack(case, {}, "")
    cell = unbatched_cell(_Exported(graphs))
    assert cell.value == "accepted" and words in cell.evidence, cell.evidence


def test_a_program_the_runtime_cannot_load_is_refused_in_its_words():
    cell = weights_dropout_cell(_Exported(_Graphs("unloadable")))
    assert cell.value == "refused"
    assert "RuntimeError: INVALID_GRAPH" in cell.evidence, cell.evidence
    assert "refuses to load" not in cell.evidence and "NotExpressible" not in cell.evidence


@pytest.mark.parametrize("target, params, words", [
    ("conformance.runners.onnx.keras_export:OnnxKerasExport", {},
     {"mixed_dtype": "refused", "unbatched_input": "refused", "weights_dropout": "refused"}),
    ("conformance.runners.litert.keras:LiteRTKeras", {},
     {"mixed_dtype": "refused", "unbatched_input": "accepted",
      "weights_dropout": "ignored"}),  # its exporter calls training=False (litert.py)
])
def test_the_real_exports_in_their_worker(target, params, words):
    from tests.helpers import require

    require("keras", "tensorflow", "onnxruntime")
    from conformance.run import workers
    from conformance.runners import load

    runner = load(target, params)
    if runner.available():
        pytest.skip(runner.available())
    cells = {c.axis: c for c in workers.conventions_in_worker(
        runner, "tests.test_keras_export_native_calls:native_cells")}
    assert {a: c.value for a, c in cells.items()} == words, {
        a: c.evidence for a, c in cells.items()}
