"""Agreement clusters (issue #18 part 6): systems grouped by agreeing with one another,
without the reference; a reference outside the largest group of independent systems is
flagged `reference suspect`."""
from __future__ import annotations

import json
from dataclasses import replace

import numpy as np
import pytest

from conformance.contract.runner import agreement_sample
from conformance.oracle.canonical import case_data
from conformance.oracle.reference import attention
from conformance.paths import REPORTS_DIR
from conformance.report.clusters import (
    AGREEMENT_FILE, DECLARED, clusters, implementation, section_clusters, suspects)
from conformance.compare.verdict import Outcome

from .helpers import make_case
from .test_ledger import row

CASE = make_case(id="masked", inputs={"batch": 2, "query_len": 4, "key_len": 6, "seed": 3},
                 mask={"attn_mask": {"random": 0.5}})


def truth(case=CASE, flip: bool = False) -> np.ndarray:
    """The oracle's output; `flip`: with the mask's polarity inverted (a wrong oracle)."""
    data = case_data(case)
    if not flip:
        return attention(case, data).output
    allowed = ~data.inputs.allowed
    allowed[..., 0] = True  # keep every row defined
    inputs = replace(data.inputs, allowed=allowed, fully_masked=~allowed.any(-1))
    return attention(case, replace(data, inputs=inputs)).output


def ran(runner: str, out: np.ndarray, framework: str = "fake"):
    return row(CASE.id, runner, Outcome.PASS, framework=framework,
               output_digest={"agreement": agreement_sample(out, "float32")})


def noisy(out, seed):
    return out + np.random.default_rng(seed).normal(0, 1e-8, out.shape)


ROWS = [ran("torch.mha", noisy(truth(), 1), "torch"),
        ran("keras.jax", noisy(truth(), 2), "keras"),
        ran("keras.torch", noisy(truth(), 3), "keras"),
        ran("flax.linen", noisy(truth(), 4), "flax"),
        ran("onnx.torch-export", noisy(truth(), 5), "onnx")]


def test_every_runner_agrees_with_the_true_reference():
    (found,) = clusters(ROWS, [CASE])
    assert found.clusters == [[r.runner for r in ROWS]]
    assert found.implementations == [["flax", "keras", "torch"]]
    assert found.reference_cluster == 0 and not found.reference_suspect


def test_a_flipped_mask_polarity_in_the_reference_is_flagged():
    (found,) = clusters(ROWS, [CASE], reference=lambda c: agreement_sample(
        truth(c, flip=True), "float32"))
    assert found.reference_cluster is None and found.reference_suspect
    assert suspects([found]) == [found]
    table = section_clusters([found]).table
    assert table.loc["masked", "reference"] == "reference suspect"


def test_systems_not_runners_are_counted():
    """Three Keras backends and a torch export agree on a wrong answer; the flax row and
    the reference agree on the true one: keras + torch (two implementations) outvote flax
    (one) and the reference is suspect; with the Keras rows alone (one implementation)
    it is not."""
    wrong = truth(flip=True)
    rows = [ran("keras.jax", wrong, "keras"), ran("keras.torch", noisy(wrong, 6), "keras"),
            ran("keras.tensorflow", noisy(wrong, 7), "keras"),
            ran("onnx.torch-export", noisy(wrong, 8), "onnx"), ran("flax.nnx", truth(), "flax")]
    (found,) = clusters(rows, [CASE])
    assert found.implementations == [["keras", "torch"], ["flax"]]
    assert found.reference_cluster == 1 and found.reference_suspect
    (alone,) = clusters(rows[:3] + rows[4:], [CASE])
    assert alone.implementations[0] == ["keras"] and not alone.reference_suspect


def test_a_runner_off_by_more_than_the_tolerance_is_its_own_group():
    rows = ROWS + [ran("hf.bert", truth() + 1e-3, "hf")]
    (found,) = clusters(rows, [CASE])
    assert found.clusters[-1] == ["hf.bert"] and found.implementations[-1] == ["transformers"]
    assert found.reference_cluster == 0 and not found.reference_suspect


def test_fully_masked_rows_are_conventions_not_numbers():
    """Where the reference is undefined (a fully masked row), outputs differ by convention
    (NaN, zeros, uniform): those elements are not compared."""
    case = make_case(id="fully", inputs={"batch": 1, "query_len": 3, "key_len": 4},
                     mask={"attn_mask": {"random": 0.5}, "masked_rows": [1]})
    ref = attention(case).output
    zeros = np.nan_to_num(ref)
    rows = [replace(ran("torch.mha", ref, "torch"), case="fully"),
            replace(ran("keras.jax", zeros, "keras"), case="fully"),
            replace(ran("flax.nnx", zeros + 1e-9, "flax"), case="fully")]
    (found,) = clusters(rows, [case])
    assert len(found.clusters) == 1 and not found.reference_suspect


def test_implementations_of_the_registry():
    assert {implementation(n) for n in ("keras.jax", "keras.gqa.torch", "onnx.keras-export")} \
        == {"keras"}
    assert {implementation(n) for n in ("torch.sdpa", "onnx.torch-export.opset23")} == {"torch"}
    assert implementation("onnx.attention-op.reference") == "onnx.reference"
    assert implementation("onnx.contrib-mha.ort") == "onnxruntime"


def test_the_committed_report_has_no_undeclared_reference_suspect():
    path = REPORTS_DIR / AGREEMENT_FILE
    if not path.exists():
        pytest.skip(f"{path} not written yet: run the full matrix")
    data = json.loads(path.read_text())
    flagged = [c for c in data["reference_suspect"] if c not in DECLARED]
    assert not flagged, f"reference suspect: {flagged}"


def test_the_case_page_lists_its_clusters():
    from conformance.report.pages import render_page

    (found,) = clusters(ROWS, [CASE], reference=lambda c: agreement_sample(
        truth(c, flip=True), "float32"))
    page = render_page(CASE, ROWS, [], found)
    assert "## Agreement clusters" in page and "**reference suspect**" in page
    assert "3 implementation(s), flax, keras, torch" in page
    assert "(the reference agrees)" not in page
