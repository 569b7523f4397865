"""Torch and ONNX contrib convention probes: every cell a vocabulary word, key findings."""
from __future__ import annotations

import importlib.util

import pytest

from conformance.contract.axes import BY_ID
from conformance.runners.onnx.contrib_mha import OnnxContribMHA
from conformance.runners.torch.mha import TorchMHA, TorchMHAFastPath
from conformance.runners.torch.sdpa import TorchSDPA

pytestmark = pytest.mark.skipif(importlib.util.find_spec("torch") is None, reason="no torch")

EXPECTED = {
    TorchMHA: {"attn_mask_polarity": "true_blocks", "key_padding_polarity": "true_blocks",
               "float_mask": "added", "causal_flag": "hint_only", "input_layout":
               "sequence_first", "returned_weights": "head_averaged", "weights_dropout":
               "post_dropout", "mixed_dtype": "refused", "unbatched_input": "accepted"},
    TorchMHAFastPath: {"causal_flag": "ignored", "float_mask": "not_applicable",
                       "attn_mask_polarity": "true_blocks"},
    TorchSDPA: {"attn_mask_polarity": "true_attends", "key_padding_polarity": "not_applicable",
                "float_mask": "added", "causal_flag": "upper_left", "dropout": "always",
                "softmax_scale": "configurable"},
}


def _check(cells, expected):
    by_axis = {c.axis: c for c in cells}
    for c in cells:
        vocab = BY_ID[c.axis].vocabulary
        assert vocab is None or c.value in vocab, (c.axis, c.value)
        assert c.evidence
    for axis, word in expected.items():
        assert by_axis[axis].value == word, (axis, by_axis[axis].evidence)


@pytest.mark.parametrize("cls", list(EXPECTED))
def test_torch_probes(cls):
    _check(cls().conventions(), EXPECTED[cls])


def test_no_weights_causal_hint_replaces_the_mask():
    cells = TorchMHA(need_weights=False).conventions()
    _check(cells, {"causal_flag": "upper_left", "returned_weights": "none"})


@pytest.mark.skipif(importlib.util.find_spec("onnxruntime") is None, reason="no onnxruntime")
def test_contrib_key_padding_adds_a_finite_fill():
    # -10000 added to every key of a fully padded item: near the unmasked output, but
    # 2e-4 off (float32 rounding of score - 10000), as the matrix rows read it;
    # unidirectional=1 masks top-left; the scale attribute is honoured
    _check(OnnxContribMHA().conventions(), {"key_padding_polarity": "true_attends",
                                            "fully_masked_row": "finite_other",
                                            "causal_flag": "upper_left",
                                            "softmax_scale": "configurable"})
