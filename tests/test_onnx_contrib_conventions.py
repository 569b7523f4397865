"""The contrib ONNX runners' cells where the op's schema has the input: onnxruntime's own
refusals (`refused`, its message quoted), seqlens_k / nonpad_kv_seqlen read as `lengths`,
and planted wrong answers the classifiers reject."""
from __future__ import annotations

import numpy as np
import pytest

from conformance.contract.runner import NotExpressibleError, RawCall
from tests.helpers import require

require("onnx", "onnxruntime")


@pytest.fixture(scope="module")
def gqa():
    from conformance.runners.onnx.contrib_gqa import OnnxContribGQA

    return OnnxContribGQA()


def test_gqa_refusals_and_lengths(gqa):
    from conformance.runners.onnx import gqa_probes as g

    cells = {c.axis: c for c in [g.key_padding_cell(gqa), *g.refusal_cells(gqa)]}
    assert cells["key_padding_polarity"].value == "lengths"
    for axis in ("unbatched_input", "mixed_dtype", "scale_precision"):
        assert cells[axis].value == "refused", cells[axis].evidence
    assert "expected to have 3 dimensions" in cells["unbatched_input"].evidence


def test_gqa_qk_norm_refused_with_ort_message(gqa):
    """The schema has q_norm_weight / k_norm_weight; the CPU kernel refuses them."""
    from conformance.contract import position_head_probes as php
    from conformance.oracle.canonical import case_data
    from conformance.runners.onnx.gqa_probes import qk_norm_cell

    case = php.qk_norm_case("per_head", head_dim=16)
    cell = qk_norm_cell(case, lambda c, d=None: gqa.run(c, gqa.translate(c),
                                                        d or case_data(c)).output)
    assert cell.value == "refused"
    assert "q_norm_weight / k_norm_weight inputs are not supported" in cell.evidence


def test_qk_norm_cell_planted():
    """A kernel that runs the per-head norm is read per_head, one that refuses is refused:
    never not_applicable for an input the schema has."""
    from conformance.contract import position_head_probes as php
    from conformance.contract.probing import output_with
    from conformance.runners.onnx.gqa_probes import qk_norm_cell

    case = php.qk_norm_case("per_head", head_dim=16)

    def refuses(c, d=None):
        raise NotExpressibleError("onnxruntime's CPU kernel refuses the case") from \
            RuntimeError("q_norm_weight not supported here")

    cell = qk_norm_cell(case, refuses)
    assert cell.value == "refused" and "not supported here" in cell.evidence
    good = qk_norm_cell(case, lambda c, d: output_with(c, None, d))
    assert good.value == "per_head"


def test_nonpad_cell_planted():
    """nonpad_kv_seqlen read as lengths; a run that drops it is `ignored`, an inverted one
    true_blocks."""
    from conformance.contract.probing import output_with
    from conformance.runners.onnx.probes import nonpad_cell

    def fake(mode):
        def run(case, lengths):
            i = case.inputs
            valid = np.arange(i.key_len)[None, :] < np.array(lengths)[:, None]
            keys = np.broadcast_to(valid[:, None, :], (i.batch, i.query_len, i.key_len))
            return output_with(case, {"lengths": keys, "inverted": ~keys, "dropped": None}[mode])
        return run

    assert nonpad_cell("fake", fake("lengths")).value == "lengths"
    assert nonpad_cell("fake", fake("inverted")).value == "true_blocks"
    assert nonpad_cell("fake", fake("dropped")).value == "ignored"


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
    cells = {c.axis: c for c in calls.facts(r, CONTRIB_MHA_NAMES)}
    for axis in ("unbatched_input", "mixed_dtype"):
        assert cells[axis].value == "refused", cells[axis].evidence
    assert "3 or 5 dimensions" in cells["unbatched_input"].evidence
