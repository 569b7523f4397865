"""attention.scale: the loader's validation, the schema, the oracle, and the matrix's
capability gate (Runner.sets_scale)."""
from __future__ import annotations

import json

import numpy as np
import pytest

from conformance.case.loader import CaseError, load_cases, parse_case
from conformance.case.model import MAX_MESSAGE
from conformance.contract.runner import Runner
from conformance.run.evaluate import evaluate
from conformance.paths import ROOT
from conformance.oracle.reference import attention

from .helpers import make_case


def raw(scale) -> dict:
    return {"id": "s", "attention": {"num_heads": 2, "query_features": 8, "scale": scale}}


@pytest.mark.parametrize("scale", [0, -1.0, float("nan"), float("inf"), "big", True, [1],
                                   "x" * 5000])
def test_bad_scales_name_file_case_and_field(scale):
    with pytest.raises(CaseError) as err:
        parse_case(raw(scale), "cases/x.yaml")
    text = str(err.value)
    assert "cases/x.yaml" in text and "case 's'" in text and "attention.scale" in text
    assert "> 0" in text and len(text) <= MAX_MESSAGE


def test_good_scales():
    assert parse_case(raw(0.125), "<t>").attention.scale == 0.125
    assert parse_case(raw(1), "<t>").attention.scale == 1.0
    assert parse_case(raw("1e-3"), "<t>").attention.scale == 1e-3  # YAML 1.1 reads it as text
    assert parse_case(raw(None), "<t>").attention.scale is None
    assert make_case().attention.scale is None


def test_schema_knows_the_field():
    schema = json.loads((ROOT / "conformance" / "case" / "case.schema.json").read_text())
    prop = schema["$defs"]["case"]["properties"]["attention"]["properties"]["scale"]
    assert prop["exclusiveMinimum"] == 0


def test_default_is_the_old_arithmetic_and_fingerprint():
    """An unset scale keeps scores / sqrt(d) bit for bit, and the case's cache keys."""
    case = make_case()
    explicit = attention(case, scale=None).output
    assert np.array_equal(attention(case).output, explicit)
    same = make_case(attention={"num_heads": 2, "query_features": 8, "scale": 0.5})
    assert same.fingerprint() != case.fingerprint()
    assert "scale" not in repr(case.attention)  # the repr the fingerprints hash is unchanged


def test_reference_uses_the_case_scale():
    plain = make_case(attention={"num_heads": 2, "query_features": 8})
    scaled = make_case(attention={"num_heads": 2, "query_features": 8, "scale": 1.0})
    np.testing.assert_array_equal(attention(scaled).output, attention(plain, scale=1.0).output)
    assert not np.allclose(attention(scaled).output, attention(plain).output)


class NoScale(Runner):
    name, system = "fake.noscale", "fake.Attention"

    def translate(self, case):
        raise AssertionError("the matrix must refuse before translate")


def test_runner_without_a_scale_setting_is_not_expressible():
    case = make_case(attention={"num_heads": 2, "query_features": 8, "scale": 0.25})
    row = evaluate(case, NoScale())
    assert row.outcome == "not_expressible"
    assert row.reason == ("fake.Attention has no softmax-scale setting: it always scales by "
                          "1/sqrt(d_k) (the case asks for scale=0.25)")


def test_t5_no_scale_case():
    from conformance.runners import all_runners

    case = {c.id: c for c in load_cases(ROOT / "cases")}["t5-no-scale"]
    assert case.attention.scale == 1.0
    setters = {r.name for r in all_runners() if r.sets_scale}
    assert {"torch.sdpa", "onnx.attention-op.ort", "onnx.attention-op.reference", "hf.t5",
            "flax.linen", "flax.nnx"} <= setters
    assert not {"hf.llama", "hf.bert", "torch.mha", "marian.cpp"} & setters


def test_sdpa_and_onnx_plans_carry_the_scale_only_when_set():
    from conformance.runners.onnx.attention_op import attention_plan
    from conformance.runners.torch.sdpa import TorchSDPA

    plain = make_case()
    scaled = make_case(attention={"num_heads": 2, "query_features": 8, "scale": 1.0})
    assert "scale=" not in TorchSDPA().translate(plain).call
    assert TorchSDPA().translate(scaled).call.endswith("scale=1.0)")
    assert "scale" not in attention_plan(plain).attributes()
    assert attention_plan(scaled).attributes()["scale"] == 1.0
