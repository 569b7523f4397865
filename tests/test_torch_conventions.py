"""Torch and ONNX contrib convention probes: every cell a vocabulary word, key findings."""
from __future__ import annotations

import importlib.util

import pytest

from conformance.conventions.axes import BY_ID
from conformance.runners.onnx.contrib_mha import OnnxContribMHA
from conformance.runners.torch.mha import TorchMHA, TorchMHAFastPath
from conformance.runners.torch.sdpa import TorchSDPA

pytestmark = pytest.mark.skipif(importlib.util.find_spec("torch") is None, reason="no torch")

EXPECTED = {
    TorchMHA: {"attn_mask_polarity": "true_blocks", "key_padding_polarity": "true_blocks",
               "float_mask": "added", "causal_flag": "hint_only", "input_layout":
               "sequence_first", "returned_weights": "head_averaged", "weights_dropout":
               "post_dropout", "mixed_dtype": "refused", "unbatched_input": "accepted"},
    # the fast path's own declines (why_not_fast_path) are its refusals; is_causal alone
    # leaves its output unmasked (ignored)
    TorchMHAFastPath: {"causal_flag": "ignored", "float_mask": "refused",
                       "unbatched_input": "refused", "weights_dropout": "refused",
                       "dropout": "never", "attn_mask_polarity": "true_blocks"},
    TorchSDPA: {"attn_mask_polarity": "true_attends", "key_padding_polarity": "not_applicable",
                "float_mask": "added", "causal_flag": "upper_left", "dropout": "always",
                "softmax_scale": "configurable"},
}


def _check(cells, expected):
    by_axis = {c.axis: c for c in cells}
    for c in cells:
        vocab = BY_ID[c.axis].words  # its own words and the universal ones
        assert vocab is None or c.value in vocab, (c.axis, c.value)
        assert c.evidence
    for axis, word in expected.items():
        assert by_axis[axis].value == word, (axis, by_axis[axis].evidence)


@pytest.mark.parametrize("cls", list(EXPECTED))
def test_torch_probes(cls):
    from conformance.conventions.probes import ledger_cells

    _check(ledger_cells(cls()), EXPECTED[cls])  # the ledger's probes of the runner too


def test_no_weights_causal_hint_depends_on_key_padding():
    # need_weights=False: the flag replaces the attn_mask (SDPA, upper left) unless a
    # key_padding_mask is passed, which turns the hint off (the mask is read); the ledger
    # asks it (conventions/probes/causal_hint.py; planted checks: test_torch_mha_ledger.py)
    from conformance.conventions.probes import ledger_cells

    cells = ledger_cells(TorchMHA(need_weights=False))
    _check(cells, {"causal_flag": "depends", "returned_weights": "none"})
    ev = next(c for c in cells if c.axis == "causal_flag").evidence
    assert "without key padding: upper_left" in ev and "pads nothing: hint_only (" in ev


@pytest.mark.skipif(importlib.util.find_spec("onnxruntime") is None, reason="no onnxruntime")
def test_contrib_key_padding_adds_a_finite_fill():
    # -10000 added to every key of a fully padded item: near the unmasked output, but
    # 2e-4 off (float32 rounding of score - 10000), as the matrix rows read it;
    # unidirectional=1 with T != S masks rows 0..T-2 upper left and lets the last row
    # attend every key (depends, f064967); the scale attribute is honoured
    from conformance.conventions.probes import ledger_cells

    _check(ledger_cells(OnnxContribMHA()), {"key_padding_polarity": "true_attends",
                                            "fully_masked_row": "finite_other",
                                            "causal_flag": "depends",
                                            "softmax_scale": "configurable"})
