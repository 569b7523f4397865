"""The MATLAB selfAttentionLayer documented model: translation, layout,
parameter accounting, and that its numbers really check the layout."""
from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import numpy as np

from conformance.case.loader import load_cases, tolerance_for
from conformance.compare.agreement import agree
from conformance.run.evaluate import evaluate
from conformance.oracle.reference import attention
from conformance.contract.runner import NotExpressible
from conformance.runners.documented.matlab import (
    MatlabSelfAttentionModel, forward, matlab_call, matlab_weights)
from conformance.oracle.canonical import case_data

from .helpers import make_case

CASES = {c.id: c for c in load_cases(Path(__file__).resolve().parent.parent / "cases")}
MODEL = MatlabSelfAttentionModel()


def test_the_calls_a_matlab_user_types():
    assert matlab_call(CASES["matlab-4x784"])[0] == "selfAttentionLayer(4,784)"
    assert matlab_call(CASES["matlab-8x392"])[0] == "selfAttentionLayer(8,392)"
    assert matlab_call(CASES["causal-self-attention"])[0].endswith(',AttentionMask="causal")')


def test_parameter_counts_of_the_matlab_answers_question():
    """9.8 M and 4.9 M as MATLAB reports, from the documented property sizes."""
    for case_id, want in (("matlab-4x784", 9_839_984), ("matlab-8x392", 4_921_560)):
        row = evaluate(CASES[case_id], MODEL)
        assert (row.outcome, row.parameters, row.executed) == ("pass", want, False)
        assert row.weight_shapes["QueryWeights"] == [784 if want > 5e6 else 392, 3136]
        assert row.weight_shapes["OutputWeights"] == [3136, 784 if want > 5e6 else 392]


def test_weights_are_out_by_in_with_contiguous_head_blocks():
    w = case_data(CASES["torch-wq-quadratic-512x8"]).weights
    p = matlab_weights(w)
    d = w.wq.shape[2]
    assert p["QueryWeights"].shape == (512, 512)
    np.testing.assert_array_equal(p["QueryWeights"][3 * d:4 * d], w.wq[3].T)
    np.testing.assert_array_equal(p["OutputWeights"][:, 2 * d:3 * d], w.wo[2].T)


def test_a_misread_layout_is_caught():
    """Interleaved head channels (a wrong reading of MATLAB's layout) must fail
    the same comparison the matrix makes."""
    case = CASES["causal-self-attention"]
    data, exp = case_data(case), attention(case)
    p = matlab_weights(data.weights)
    h = case.attention.num_heads
    wrong = dict(p)
    for name in ("QueryWeights", "KeyWeights", "QueryBias", "KeyBias"):
        n = p[name].shape[0]
        order = np.arange(n).reshape(h, n // h).T.ravel()  # channel c of head i -> i + h*c
        wrong[name] = p[name][order]
    out = np.stack([forward(wrong, x.T, h, causal=True)[0].T for x in data.inputs.query])
    assert not agree(exp.output, out, tolerance_for(case)).ok
    good = np.stack([forward(p, x.T, h, causal=True)[0].T for x in data.inputs.query])
    assert agree(exp.output, good, tolerance_for(case)).ok


def test_what_selfattentionlayer_cannot_express_says_why():
    reasons = {cid: MODEL.translate(CASES[cid]) for cid in
               ("cross-attention-kv-features", "no-bias", "dtype-float16")}
    reasons["key-padding"] = MODEL.translate(make_case(
        inputs={"self_attention": True, "batch": 2, "query_len": 5},
        mask={"key_padding": [3, 5]}))
    assert all(isinstance(r, NotExpressible) for r in reasons.values())
    assert "one input X" in reasons["cross-attention-kv-features"].reason
    assert "QueryBias" in reasons["no-bias"].reason
    assert "single, double" in reasons["dtype-float16"].reason
    assert "padded query positions" in reasons["key-padding"].reason
    grouped = replace(CASES["no-bias"], attention=replace(CASES["no-bias"].attention,
                                                          num_kv_heads=2))
    assert "one key/value head per query head" in MODEL.translate(grouped).reason


def test_model_rows_are_marked_in_the_report(tmp_path):
    from conformance.report import write_reports

    row = evaluate(CASES["matlab-8x392"], MODEL)
    write_reports([row], [CASES["matlab-8x392"]], [MODEL], tmp_path, "test")
    text = (tmp_path / "details.md").read_text()
    assert "| 4921560 (model) |" in text and "(model) |" in text.split("## Numerical")[1]


def test_every_convention_cites_a_mathworks_page():
    """The model's cells come from documentation: each names its MathWorks URL, and what
    no page documents is not_applicable, saying so."""
    from conformance.conventions.axes import AXIS_IDS, NA
    from conformance.conventions.ledger import MODEL_AXES, cell_problem

    from conformance.conventions.expectations import cited

    cells = {c.axis: c for c in cited(MODEL.name)}  # data: its expectations file
    assert all(c.documented_source.startswith("https://www.mathworks.com/") for c in
               cells.values())
    assert not [cell_problem(c) for c in cells.values() if cell_problem(c)]
    assert all("not documented" in c.evidence for c in cells.values()
               if c.value in (NA, "not_probed") and c.axis != "causal_flag")
    # a behaviour of an option MATLAB has that no page states is not_probed, an option no
    # page lists not_applicable
    assert cells["key_padding_polarity"].value == "not_probed"
    assert cells["softcap"].value == NA
    assert cells["size_arguments"].documented == "total_over_heads"
    assert cells["softmax_scale"].documented_source.endswith("attentionlayer.html")
    # returned_weights is documented too (HasScoresOutput, false by default): none; the
    # ledger's own probes (mask fill, masked key/value, batch) give a model not_probed
    from conformance.conventions.probes import OWNED_AXES, ledger_cells

    assert set(AXIS_IDS) - set(cells) == set(MODEL_AXES) - {"returned_weights"} | set(
        OWNED_AXES)
    ledger = {c.axis: c for c in ledger_cells(MODEL)}
    assert {ledger[a].value for a in OWNED_AXES} == {"not_probed"}
    assert cells["returned_weights"].value == "none"
