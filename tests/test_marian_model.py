"""The C++ Marian documented model: the options a user sets, Marian's parameter names
and layout, what the source does not allow (the seed claim), and cells that cite lines."""
from __future__ import annotations

import re

import numpy as np

from conformance.case.loader import load_cases, tolerance_for
from conformance.compare.agreement import agree
from conformance.contract.runner import NotExpressible
from conformance.run.evaluate import evaluate
from conformance.paths import ROOT
from conformance.oracle.reference import attention
from conformance.runners.documented.marian import (
    BLOB, LINES, MarianCppModel, log_mask, marian_weights, multi_head)
from conformance.oracle.canonical import case_data

from .helpers import make_case

CASES = {c.id: c for c in load_cases(ROOT / "cases")}
MODEL = MarianCppModel()
SELF = {"attention": {"num_heads": 4, "query_features": 16}, "inputs": {"self_attention": True}}


def test_translation_is_marian_options():
    t = MODEL.translate(make_case(**SELF, mask={"key_padding": [5, 3]}))
    assert t.call.startswith("marian --type transformer --dim-emb 16 --transformer-heads 4 "
                             '--transformer-preprocess "" --transformer-postprocess ""')
    assert "encoder_l1_self" in t.call and "lengths [5, 3]" in t.call
    causal = MODEL.translate(CASES["causal-self-attention"])
    assert "decoder_l1_self" in causal.call and causal.plan["causal"]


def test_runs_agree_and_are_marked_as_a_model():
    for case in (CASES["causal-self-attention"],
                 make_case(**SELF, mask={"key_padding": [5, 3]})):
        row = evaluate(case, MODEL)
        assert (row.outcome, row.executed) == ("pass", False), row.reason
        e = case.attention.query_features
        assert row.parameters == 4 * e * e + 4 * e
        assert row.weight_shapes["encoder_l1_self_Wq" if "encoder" in row.native_call
                                 else "decoder_l1_self_Wq"] == [e, e]


def test_weights_are_in_by_out_with_head_blocks_as_split_heads_reads_them():
    case = make_case(**SELF)
    w = case_data(case).weights
    p = marian_weights(w, "encoder_l1_self")
    np.testing.assert_array_equal(p["encoder_l1_self_Wq"][:, 8:12], w.wq[2])
    assert p["encoder_l1_self_bq"].shape == (1, 16) and p["encoder_l1_self_Wo"].shape == (16, 16)
    # a transposed (out x in) reading is caught by the same comparison the matrix makes
    x = case_data(case).inputs.query
    mask = log_mask({"lengths": None, "causal": False}, 2, 5, 5)
    wrong = {**p, "encoder_l1_self_Wq": p["encoder_l1_self_Wq"].T.copy()}
    assert not agree(attention(case).output, multi_head(wrong, "encoder_l1_self", x, 4, mask)[0],
                     tolerance_for(case)).ok
    assert agree(attention(case).output, multi_head(p, "encoder_l1_self", x, 4, mask)[0],
                 tolerance_for(case)).ok


def test_seed_claim_is_refused_with_the_source_lines():
    """Marian has no head-size option: W_q is square and dimDepth = dimModel / dimHeads."""
    t = MODEL.translate(CASES["seed-claim-head-width"])
    assert isinstance(t, NotExpressible)
    for n in (249, 94, 316):
        assert f"transformer.h:{n} `{LINES[n]}`" in t.reason
    assert "{dimModel, dimModel}" in t.reason and "dimModel / dimHeads" in t.reason


def test_other_limits_say_why():
    reasons = {k: MODEL.translate(c) for k, c in {
        "cross": CASES["cross-attention-kv-features"], "bias": CASES["no-bias"],
        "f16": CASES["dtype-float16"], "mask": CASES["random-attn-mask"],
        "gqa": CASES["grouped-query-8q-2kv"]}.items()}
    assert all(isinstance(r, NotExpressible) for r in reasons.values())
    assert "_bq" in reasons["bias"].reason and "transformer.h:250" in reasons["bias"].reason
    assert "no mask input" in reasons["mask"].reason or "three tensors" in reasons["mask"].reason
    scaled = make_case(attention={**SELF["attention"], "scale": 1.0}, inputs=SELF["inputs"])
    row = evaluate(scaled, MODEL)
    assert row.outcome == "not_expressible" and "no softmax-scale setting" in row.reason


def test_every_cell_cites_a_line_of_the_source():
    from conformance.conventions.axes import AXIS_IDS, NA
    from conformance.conventions.ledger import MODEL_AXES, cell_problem

    from conformance.conventions.expectations import cited

    cells = {c.axis: c for c in cited(MODEL.name)}  # data: its expectations file
    # weight_layout is read from the source too (affine(q, Wq, bq): in x out), a second
    # witness beside the rows' square shapes, which cannot orient it
    assert set(AXIS_IDS) - set(cells) == set(MODEL_AXES) - {"weight_layout"} | {
        "batch_invariance"}  # the ledger's own probe: not_probed for a documented model
    assert cells["masked_value_nonfinite"].value == "propagates"
    assert cells["weight_layout"].value.endswith("in x out")
    for c in cells.values():
        assert cell_problem(c) is None
        anchor = re.fullmatch(re.escape(BLOB) + r"#L(\d+)", c.documented_source)
        assert anchor and f"transformer.h:{anchor[1]} `" in c.evidence, c
        assert c.documented == c.value
    assert cells["size_arguments"].value == "derived_from_width"
    assert cells["softmax_scale"].value == "inv_sqrt_head_dim"
    assert cells["key_padding_polarity"].value == "lengths"
    assert cells["fully_masked_row"].value == NA
