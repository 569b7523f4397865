"""scale_precision is the ledger's (#29, conventions/probes/precision.py): a float64 call's
output AND the attention weights it returns, each read against the float64 oracle under
the exact, the float32-rounded and the split float32 scale (sqrt(scale) rounded to
float32 and applied to Q and to K: onnxruntime's CPU Attention kernel).  Toy runners answer
with each planted scale, and with output and weights at different ones: the cell must
name each, `depends` where the two parts differ (nothing measured is dropped), and a
planted wrong answer must move it."""
from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest

from conformance.conventions.axes import AXES, DEPENDS, NOT_PROBED
from conformance.contract.runner import NotExpressible, Observation, Runner, Translation
from conformance.conventions.probes import ASKED_PROBES, precision, scores
from conformance.conventions.probes.float64 import scales, split_scale
from conformance.conventions.probes.forms import forms
from conformance.conventions.probes.request import ask
from conformance.oracle.reference import attention

SCALES = {"exact": lambda d: None, "rounded": lambda d: float(np.float32(1 / np.sqrt(d))),
          "split": split_scale, "unscaled": lambda d: 1.0}


class Toy(Runner):
    """Answers the probe case with its output at the scale `out` and its weights at the
    scale `weights` (None: no weights), returned per head or averaged; `off` adds to the
    output, `w_off` to the weights (a planted arithmetic below float64)."""

    name = "toy.scale"

    def __init__(self, out="exact", weights=None, returned="per_head", off=0.0, w_off=0.0,
                 head_size=True):
        self.out, self.weights, self.returned = out, weights, returned
        self.off, self.w_off, self.head_size = off, w_off, head_size

    def translate(self, case):
        if not self.head_size and case.attention.query_features != \
                case.attention.num_heads * case.attention.qk_head_dim:
            return NotExpressible("toy: head_dim = embed_dim // num_heads")
        return Translation(f"toy({case.id}, out={self.out}, weights={self.weights})", None)

    def _at(self, case, data, plant):
        d = case.attention.qk_head_dim
        return attention(replace(case, attention=replace(case.attention,
                                                         scale=SCALES[plant](d))), data)

    def run(self, case, translation, data):
        out = self._at(case, data, self.out).output + self.off
        if self.weights is None:
            return Observation(output=out)
        w = self._at(case, data, self.weights).weights + self.w_off
        return Observation(output=out, attention_weights=w.mean(1) if self.returned ==
                           "averaged" else w, weights_returned=self.returned)


def cell(**kw):
    return scores.scale_precision_cell(Toy(**kw))


def test_the_vocabulary_names_the_split_scale():
    axis = next(a for a in AXES if a.id == "scale_precision")
    assert "split_float32" in axis.vocabulary and "split_float32" in axis.meaning
    assert ASKED_PROBES["scale_precision"] is scores.scale_precision_cell


def test_an_answer_carries_the_weights_its_run_returned():
    case = forms("scale-precision", attention=precision.HEAD3, inputs={"dtype": "float64"})[0]
    got = ask(Toy(weights="exact"), case)
    i = case.inputs
    assert got.weights_returned == "per_head"
    assert got.attention_weights.shape == (i.batch, 2, i.query_len, i.key_len)
    assert got.attention_weights.dtype == np.float64
    plain = ask(Toy(), case)
    assert plain.attention_weights is None and plain.weights_returned == "none"


@pytest.mark.parametrize("plant, word", [("exact", "float64"), ("rounded", "float32_rounded"),
                                         ("split", "split_float32")])
@pytest.mark.parametrize("weights", [False, True])
def test_each_scale_reads_its_word_from_the_output_and_the_weights(plant, word, weights):
    c = cell(out=plant, weights=plant if weights else None)
    assert c.value == word, c.evidence
    assert "float64 " in c.evidence and "split_float32 " in c.evidence  # every figure quoted
    assert ("returned weights (per_head)" in c.evidence) is weights


def test_weights_rounded_beside_an_exact_output_read_depends_with_both():
    """The opset-18 torch export's shape: need_weights=False computes the exact scale, the
    need_weights=True graph the weights come from rounds it to float32."""
    c = cell(out="exact", weights="rounded")
    assert c.value == DEPENDS, c.evidence
    assert "output: float64:" in c.evidence
    assert "returned weights (per_head): float32_rounded:" in c.evidence
    split = cell(out="split", weights="rounded")  # the opset-23/24 exports' shape
    assert split.value == DEPENDS and "output: split_float32:" in split.evidence


def test_averaged_weights_are_read_against_the_oracles_mean_over_heads():
    c = cell(out="exact", weights="rounded", returned="averaged")
    assert c.value == DEPENDS and "returned weights (averaged): float32_rounded" in c.evidence
    assert cell(out="exact", weights="exact", returned="averaged").value == "float64"


@pytest.mark.parametrize("kw, word", [
    ({"out": "unscaled"}, NOT_PROBED),  # no reading holds: not separable
    ({"off": 1e-9}, NOT_PROBED),  # arithmetic below float64
    ({"off": 1e-9, "weights": "rounded"}, "float32_rounded"),  # the weights still tell
    ({"weights": "exact", "w_off": 1e-9}, "float64"),  # the output still tells
    ({"weights": "unscaled"}, "float64")])
def test_a_planted_wrong_answer_moves_the_cell(kw, word):
    assert cell().value == "float64"
    c = cell(**kw)
    assert c.value == word, c.evidence
    if word == NOT_PROBED:
        assert "not separable" in c.evidence
    elif "weights" in kw or "w_off" in kw:
        assert "no reading within 1e-12, so there the scale's rounding is not separable" \
            in c.evidence


def test_a_system_without_a_head_size_is_asked_the_width_derived_form():
    c = cell(out="exact", weights="rounded", head_size=False)
    assert c.value == DEPENDS and "probe-scale-precision-width-derived" in c.evidence


def test_the_readings_are_apart_at_the_probes_head_size():
    """d_k 3: the three scales differ by more than the 1e-12 a reading holds within, so
    one output names one of them."""
    s = list(scales(1 / np.sqrt(3)).values())
    assert min(abs(a - b) for i, a in enumerate(s) for b in s[i + 1:]) > 1e-9


@pytest.mark.torch
def test_the_torch_exports_read_both_graphs_a_row_exports():
    """nn.MultiheadAttention exported as its rows export it: the need_weights=False graph
    (the output) scales Q and K by the exact sqrt(1/sqrt(3)) in float64; the need_weights=True
    graph (the per-head weights) multiplies by float32(1/sqrt(3)) held as a float64 constant
    (torch 2.13's dynamo export; the TorchScript exporter keeps the exact scale)."""
    from tests.helpers import require

    require("torch", "onnx", "onnxruntime", "onnxscript")
    from conformance.runners.onnx.torch_export import OnnxTorchExport

    dynamo = scores.scale_precision_cell(OnnxTorchExport(dynamo=True))
    assert dynamo.value == DEPENDS, dynamo.evidence
    assert "output: float64:" in dynamo.evidence
    assert "returned weights (per_head): float32_rounded:" in dynamo.evidence
    legacy = scores.scale_precision_cell(OnnxTorchExport(dynamo=False))
    assert legacy.value == "float64" and "returned weights (per_head): float64" in \
        legacy.evidence, legacy.evidence


class Unscaled(Toy):
    """A system that scales by nothing (T5): it takes only cases with scale 1.0, which its
    probe_needs carry; `out` its arithmetic ("unscaled" right, "exact" a planted 1/sqrt(d))."""

    probe_needs = {"scale": 1.0}

    def translate(self, case):
        if case.attention.scale != 1.0:
            return NotExpressible("toy: no scale but 1.0")
        return super().translate(case)


def test_a_system_without_a_scale_has_no_precision_to_read():
    cell = scores.scale_precision_cell(Unscaled(out="unscaled"))
    assert cell.value == "not_applicable" and "not scaled" in cell.evidence, cell.evidence
    assert "-with-needs" in cell.evidence  # asked the form with what it always applies
    assert scores.scale_precision_cell(Unscaled(out="exact")).value == NOT_PROBED
