"""The ONNX runners' ledger cells (the ledger's probes of their graphs, and the facts their
graphs show with no oracle: attention_op_facts, torch_export_answers): every cell is a word
of its axis, the key findings are pinned, and the readings a runner reports reject a
planted wrong answer."""
from __future__ import annotations

import pytest

from conformance.conventions.axes import AXIS_IDS
from conformance.conventions.ledger import DERIVERS, cell_problem
from tests.helpers import require

require("onnx", "onnxruntime")


def _cells(runner, ledger: bool = False):
    """The runner's probe cells (with `ledger`: conventions.probes.ledger_cells, the ledger's
    own probes of the runner too, the raw arguments it answers among them)."""
    from conformance.conventions.probes import ledger_cells
    from conformance.conventions.probes.api_facts import own_cells

    cells = {c.axis: c for c in (ledger_cells(runner) if ledger else own_cells(runner))}
    assert not [cell_problem(c) for c in cells.values() if cell_problem(c)]
    # the rest is left to the rows, and the mask encodings to fill_probes.ledger_conventions
    # (and the generic probes': masks, batch invariance)
    generic = {"mask_fill", "masked_kv_nonfinite", "masked_key_nonfinite",
               "masked_value_nonfinite", "batch_invariance"}
    assert set(AXIS_IDS) - set(cells) <= set(DERIVERS) | generic
    return cells


@pytest.fixture(scope="module")
def op_cells():
    from conformance.runners.onnx.attention_op import OnnxAttentionOp

    return {e: _cells(OnnxAttentionOp(engine=e), ledger=True) for e in ("ort", "reference")}


RAW_AXES = {"attn_mask_polarity", "float_mask", "causal_flag"}


def test_attention_op_answers_raw(op_cells):
    """The one-call rows answer attn_mask and is_causal raw (Runner.answer): the ledger's
    probes judge those axes (their call quoted), the runner's own probes no longer do; the
    cache rows (a subclass) answer attn_mask on the op they call; the external-cache rows
    also is_causal (beside nonpad_kv_seqlen = S, test_onnx_ledger)."""
    from conformance.runners.onnx.attention_cache import OnnxAttentionCache
    from conformance.runners.onnx.attention_op import OnnxAttentionOp

    r = OnnxAttentionOp(engine="reference")
    assert r.answers == {"attn_mask", "is_causal", "window", "key_lengths", "input_dtype",
                         "unbatched"}
    from conformance.conventions.probes.api_facts import own_cells

    assert not RAW_AXES & {c.axis for c in own_cells(r)}
    for cells in op_cells.values():
        assert "attn_mask=<bool (B, 1, T, S)>" in cells["attn_mask_polarity"].evidence
        assert "attn_mask=<float32 (B, 1, T, S)>" in cells["float_mask"].evidence
        assert "is_causal=1, no attn_mask, no past_key" in cells["causal_flag"].evidence
        assert cells["causal_flag"].documented == "upper_left"
    native = {"input_dtype", "unbatched"}  # the native calls (attention_op.native_call)
    assert OnnxAttentionCache(engine="reference").answers - {"step_mask"} == {
        "attn_mask", "is_causal", *native}
    assert OnnxAttentionCache(engine="reference", cache="static").answers == {
        "attn_mask", "is_causal", *native}


@pytest.mark.parametrize("plant, axis, word", [
    ("inverted", "attn_mask_polarity", "true_blocks"),
    ("float_as_bool", "float_mask", "cast_to_bool"),
    ("switch_dropped", "causal_flag", "ignored")])
def test_attention_op_planted_raw_answers(plant, axis, word):
    """A planted wrong answer (the runner's graph fed an inverted mask, the float mask as
    a boolean of its non-zero entries, the causal switch dropped) is read as such."""
    from dataclasses import replace

    import numpy as np

    from conformance.conventions.probes.flags import RAW_PROBES
    from conformance.runners.onnx.attention_op import OnnxAttentionOp

    class Planted(OnnxAttentionOp):
        def answer(self, case, data, raw):
            v = np.asarray(raw.value)
            if plant == "inverted" and v.dtype == bool:
                raw = replace(raw, value=~v)
            elif plant == "float_as_bool" and v.dtype != bool:
                raw = replace(raw, value=v != 0)
            elif plant == "switch_dropped":
                raw = replace(raw, value=False)
            return super().answer(case, data, raw)

    cell = RAW_PROBES[axis][1](Planted(engine="reference"))
    assert cell.value == word, cell.evidence


def test_attention_op_conventions(op_cells):
    for cells in op_cells.values():
        words = {a: c.value for a, c in cells.items()}
        assert words["attn_mask_polarity"] == "true_attends"
        assert words["float_mask"] == "added"
        assert words["causal_flag"] == "upper_left"  # is_causal without a past
        assert words["softmax_scale"] == "configurable"
        assert words["softcap"] == "applied"
        assert words["key_padding_polarity"] == "lengths"  # Attention-24 nonpad_kv_seqlen
        assert "nonpad_kv_seqlen=[3, 2]" in cells["key_padding_polarity"].evidence
        assert words["mixed_dtype"] == "refused"
        assert words["returned_weights"] == "per_head"
    assert op_cells["reference"]["scale_precision"].value == "float64"
    # onnxruntime scales Q and K each by float32(sqrt(float32(1/sqrt(d)))): the output and
    # the returned weights both read the split scale
    assert op_cells["ort"]["scale_precision"].value == "split_float32"
    assert op_cells["ort"]["mask_fill"].value == "finfo_min"  # named by the masked scores
    assert op_cells["reference"]["mask_fill"].value == "-inf"


def test_softcap_mode0_ort_and_reference_disagree(op_cells):
    """Spec: mode 0 is 'the output of qk matmul' (before softcap).  ORT follows it; the
    reference returns the softcapped scores at mode 0 (the softcap probe's call returns
    qk_matmul_output at modes 0-2, named in its evidence by the ledger: stages.py)."""
    ort = op_cells["ort"]["softcap"].evidence
    ref = op_cells["reference"]["softcap"].evidence
    assert "mode 0: qk (" in ort and "follows the spec text" in ort
    assert "mode 0: softcapped (" in ref and "departs from the spec text" in ref


def test_a_planted_mode0_that_returns_the_capped_scores_departs_from_the_spec():
    """The ledger names each stage from the arrays alone: onnxruntime's graph with its mode-0
    scores replaced by its mode-1 (softcapped) ones reads as departing from the spec."""
    from conformance.runners.onnx.attention_op import OnnxAttentionOp
    from conformance.conventions.probes.capped import softcap_cell

    class Planted(OnnxAttentionOp):
        def stages(self, case, data, plan):
            got = super().stages(case, data, plan)
            if got:
                got["score_stages"][0] = got["score_stages"][1]
            return got

    cell = softcap_cell(Planted(engine="ort"))
    assert cell.value == "applied"
    assert "mode 0: softcapped (" in cell.evidence and "departs from the spec" in cell.evidence


@pytest.mark.torch
def test_torch_export_conventions():
    pytest.importorskip("torch")
    pytest.importorskip("onnxscript")
    from conformance.runners.onnx.torch_export import OnnxTorchExport

    cells = _cells(OnnxTorchExport(dynamo=True, opset=23), ledger=True)  # the ledger asks
    words = {a: c.value for a, c in cells.items()}
    assert words["attn_mask_polarity"] == "true_blocks"
    assert words["key_padding_polarity"] == "true_blocks"
    assert "inconsistent q_sequence_length" in cells["key_padding_polarity"].evidence
    assert words["returned_weights"] == "head_averaged"
    assert words["causal_flag"] == "depends"  # upper_left alone, hint_only beside key padding
    assert words["float_mask"] == "added"
    assert words["softcap"] == "not_applicable"
    # the Attention op's output applies the split float32 scale, the weights' graph float32
    assert words["scale_precision"] == "depends"
    assert "output: split_float32" in cells["scale_precision"].evidence
    assert "returned weights (per_head): float32_rounded" in cells["scale_precision"].evidence
    assert words["unbatched_input"] == words["mixed_dtype"] == "refused"
    assert words["weights_dropout"] == "ignored"  # dropout=0.5 accepted, no effect
