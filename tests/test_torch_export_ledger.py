"""The torch exports answer the ledger (#29): onnx.torch-export* (and, through
deployed.RuntimeProbe, openvino.onnx / .torch and executorch.xnnpack) pass attn_mask,
key_padding and dropout_training raw through probe graphs exported the runner's way
(_export/torch_export_answers.py), and the ledger's generic probes judge them.  Planted
exported graphs (a probe module that inverts the mask, drops the key padding, applies its
dropout rate in eval, returns per-head weights by default) must move each cell; the
real export must read the pinned words.  The TorchScript exporter (dynamo=False) keeps
these exports fast; planted runners have their own names, so their graphs never share a
cache entry with the real ones."""
from __future__ import annotations

import numpy as np
import pytest

from conformance.conventions.axes import IGNORED
from conformance.contract.runner import RawCall, Runner
from conformance.conventions.probes import flags, key_padding, training
from conformance.oracle.canonical import case_data
from tests.helpers import planted_export_probe, require

require("torch", "onnx", "onnxruntime")
pytestmark = pytest.mark.torch


def _runner(name: str = "", change=None):
    from conformance.runners._export.torch_onnx import wrap_module
    from conformance.runners.onnx.torch_export import OnnxTorchExport

    r = OnnxTorchExport(dynamo=False, **({"name": f"test.planted-{name}"} if name else {}))
    if change is not None:
        r.probe = lambda: planted_export_probe(r, change)
    else:
        assert r.probe().wrap is wrap_module
    return r


def _only(stage, edit):
    return lambda s, mha, x: edit(mha, x) if s == stage else x


def test_the_real_export_answers_in_the_pinned_words():
    r = _runner()
    assert flags.attn_mask_polarity_cell(r).value == "true_blocks"
    assert flags.float_mask_cell(r).value == "added"
    assert key_padding.key_padding_cell(r).value == "true_blocks"
    cell = training.dropout_cell(r)
    assert cell.value == "never" and "no training input" in cell.evidence, cell.evidence


def test_a_planted_inverted_mask_reads_true_attends():
    invert = _only("masks", lambda mha, m: {k: ~v if str(v.dtype) == "torch.bool" else v
                                            for k, v in m.items()})
    r = _runner("inverted-mask", invert)
    assert flags.attn_mask_polarity_cell(r).value == "true_attends"
    assert flags.float_mask_cell(r).value == "added"  # a float mask is not inverted


def test_a_planted_graph_dropping_the_key_padding_reads_ignored():
    drop = _only("masks", lambda mha, m: {k: v for k, v in m.items()
                                          if k != "key_padding_mask"})
    cell = key_padding.key_padding_cell(_runner("no-padding", drop))
    assert cell.value == IGNORED, cell.evidence


def test_the_causal_hint_depends_on_key_padding_and_a_planted_graph_moves_it():
    """need_weights=False, is_causal=True beside a non-causal mask: the switch replaces the
    mask (upper left) unless a key_padding_mask is given (torch/nn/functional.py: "when we
    have a kpm or need weights, we need attn_mask"): depends.  A graph dropping the key
    padding reads upper_left both ways; one dropping the switch reads hint_only."""
    cell = flags.causal_flag_cell(_runner())
    assert cell.value == "depends", cell.evidence
    assert "without key padding: upper_left" in cell.evidence
    assert "pads nothing: hint_only" in cell.evidence
    assert "Need attn_mask" in cell.evidence or "switch alone" in cell.evidence
    drop = _only("masks", lambda mha, m: {k: v for k, v in m.items()
                                          if k != "key_padding_mask"})
    assert flags.causal_flag_cell(_runner("no-padding", drop)).value == "upper_left"


def test_a_planted_graph_dropping_in_eval_reads_always():
    scaled = _only("outputs", lambda mha, ow: (ow[0] * (1 - mha.dropout), ow[1]))
    cell = training.dropout_cell(_runner("eval-dropout", scaled))
    assert cell.value == "always", cell.evidence


def test_the_training_run_exports_the_module_in_train_mode():
    """The program has no training input: the switch is the module's mode at export, said
    in the answer's extras; the TorchScript exporter's default training=TrainingMode.EVAL
    leaves no dropout in it (torch/onnx/utils.py)."""
    from conformance.contract.runner import Observation
    from conformance.runners._export.torch_export_answers import answer

    r = _runner()
    case = _case()
    obs, call = answer(r.probe(), case, case_data(case), RawCall(
        "dropout_training", {"rate": 0.5, "training": True}))
    assert isinstance(obs, Observation) and obs.extras == {"training_set_at": "export"}
    assert "exported in train mode (module.training True)" in call
    with pytest.raises(NotImplementedError):
        answer(r.probe(), case, case_data(case), RawCall("window", 3))


def test_the_facts_read_the_default_calls_program():
    """The runner reports what the default call's program returns (head-averaged weights,
    (B, T, S)); the native calls the ledger judges are tests/test_export_native_calls.py's."""
    from conformance.conventions.probes.api_facts import own_cells

    cells = {c.axis: c for c in own_cells(_runner())}
    assert cells["returned_weights"].value == "head_averaged"
    assert "(2, 3, 5)" in cells["returned_weights"].evidence
    assert cells["returned_weights"].documented == "head_averaged"  # expectations' word
    assert not {"weights_dropout", "unbatched_input", "mixed_dtype"} & set(cells)
    per_head = _only("outputs", lambda mha, ow: (ow[0], ow[1].unsqueeze(1).expand(
        -1, 2, -1, -1)))  # planted: a program returning (B, H, T, S)
    planted = {c.axis: c for c in own_cells(_runner("per-head", per_head))}
    assert planted["returned_weights"].value == "per_head"


def _case():
    from conformance.runners._export.torch_export_answers import base_case

    case = base_case()
    assert np.shape(case_data(case).inputs.query) == (2, 3, 8)
    return case


# ---- float64_compute under three readings of the scale (conventions/probes/float64.py):
# onnxruntime's Attention kernel (the opset-23/24 exports) applies sqrt(scale) rounded to
# float32 to Q and to K, in float64 arithmetic

class _Scaled(Runner):
    """A toy runner answering the float64 case at a planted scale and precision."""

    name = "toy.float64"

    def __init__(self, plant: str):
        self.plant = plant

    def translate(self, case):
        from conformance.contract.runner import Translation

        return Translation(f"toy({case.id}, {self.plant})", None)

    def run(self, case, translation, data):
        from dataclasses import replace

        from conformance.contract.runner import Observation
        from conformance.conventions.probes.float64 import split_scale
        from conformance.oracle.reference import attention

        d = case.attention.qk_head_dim
        scale = {"exact": None, "split": split_scale(d), "float32": None,
                 "scale 1": 1.0, "1e-9 off": None}[self.plant]
        out = attention(replace(case, attention=replace(case.attention, scale=scale)),
                        data).output
        if self.plant == "float32":
            out = out.astype(np.float32).astype(np.float64)
        return Observation(output=out + (1e-9 if self.plant == "1e-9 off" else 0.0))


@pytest.mark.parametrize("plant,word", [("exact", "float64"), ("split", "float64"),
                                        ("float32", "below_float64"),
                                        ("scale 1", "below_float64"),
                                        ("1e-9 off", "below_float64")])
def test_float64_compute_reads_every_scale_and_only_float64_arithmetic(plant, word):
    from conformance.conventions.probes.scores import float64_compute_cell

    cell = float64_compute_cell(_Scaled(plant))
    assert cell.value == word, cell.evidence
    assert "split float32 scale" in cell.evidence


def test_the_split_scale_differs_from_the_exact_one_at_the_probes_head_size():
    """d_k 4: 1/2 is a float32 number, its float32 square root squared is not 1/2, so a
    planted split-scale output is float64 only through that reading."""
    from conformance.conventions.probes.float64 import split_scale
    from conformance.runners._export.onnx_runtime import split_scale as runtimes

    assert split_scale(4) != 0.5 and abs(split_scale(4) - 0.5) < 1e-7
    assert all(split_scale(d) == runtimes(d) for d in (1, 2, 3, 4, 5, 16))
