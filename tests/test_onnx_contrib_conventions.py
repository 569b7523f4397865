"""The contrib ONNX runners' cells where the op's schema has the input: onnxruntime's own
refusals (`refused`, its message quoted), seqlens_k / nonpad_kv_seqlen read as `lengths`,
and planted wrong answers the classifiers reject."""
from __future__ import annotations

import numpy as np
import pytest

from conformance.contract.runner import RawCall
from tests.helpers import require

require("onnx", "onnxruntime")


@pytest.fixture(scope="module")
def gqa():
    from conformance.runners.onnx.contrib_gqa import OnnxContribGQA

    return OnnxContribGQA()


# qk_norm_scope of onnx.contrib-gqa.ort is the ledger's (conventions/probes/qk_norm.py):
# tests/test_onnx_ledger.py reads the kernel's refusal and plants a kernel that runs it


@pytest.mark.parametrize("plant, word", [(None, "lengths"), ("inverted", "true_blocks"),
                                         ("dropped", "ignored")])
def test_nonpad_kv_seqlen_planted(plant, word):
    """The Attention op's nonpad_kv_seqlen passed raw (RawCall key_lengths, the ledger's
    key_padding.py) reads as lengths; a runner that drops it (no padding) is `ignored`, one
    that pads the counted keys instead (a bool attn_mask of them) true_blocks."""
    from dataclasses import replace

    from conformance.conventions.probes.key_padding import key_padding_polarity_cell
    from conformance.runners.onnx.attention_op import OnnxAttentionOp

    class Planted(OnnxAttentionOp):
        def answer(self, case, data, raw):
            if raw.argument == "key_lengths" and plant:
                i = case.inputs
                valid = np.arange(i.key_len)[None, :] < np.asarray(raw.value)[:, None]
                keys = np.broadcast_to(valid[:, None, :], (i.batch, i.query_len, i.key_len))
                mask = np.ones_like(keys) if plant == "dropped" else ~keys
                raw = replace(raw, argument="attn_mask", value=mask)
            return super().answer(case, data, raw)

    cell = key_padding_polarity_cell(Planted(engine="reference"))
    assert cell.value == word, cell.evidence
    if plant is None:
        assert "nonpad_kv_seqlen=[3, 2]" in cell.evidence


def test_mha_mask3d_and_refusals():
    """The contrib op's API facts (contrib_mha_calls.facts, no oracle) and its raw (B, T, S)
    mask: onnxruntime's type check of a bool key_padding_mask quoted in the call; the
    mask's polarity and the float64 graph's refusal are the ledger's (test_onnx_ledger)."""
    from conformance.runners.onnx import contrib_mha_calls as calls
    from conformance.runners.onnx.contrib_mha import CONTRIB_MHA_NAMES, OnnxContribMHA

    from conformance.oracle.canonical import case_data

    r = OnnxContribMHA()
    case = calls.raw_case()
    out, call = r.answer(case, case_data(case), RawCall("attn_mask", np.ones(
        (2, 3, 5), bool)))
    assert out.shape == (2, 3, 8) and "tensor(bool)" in call, call
    from conformance.conventions.probes.api_facts import own_cells

    cells = {c.axis: c for c in own_cells(r, calls.facts(r, CONTRIB_MHA_NAMES))}
    assert not {"unbatched_input", "mixed_dtype"} & set(cells)  # the ledger's probe reads them
    from conformance.conventions.probes.native_inputs import mixed_dtype_cell, unbatched_cell

    cells = {"unbatched_input": unbatched_cell(r), "mixed_dtype": mixed_dtype_cell(r)}
    for axis in ("unbatched_input", "mixed_dtype"):
        assert cells[axis].value == "refused", cells[axis].evidence
    assert "3 or 5 dimensions" in cells["unbatched_input"].evidence
