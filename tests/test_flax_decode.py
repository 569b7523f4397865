"""flax.nnx.decode: prefill and steps through nnx's own cache (one position per call) equal
the full causal forward; the same steps with is_causal=True see key 0 only
(google/flax#5591), which the comparison catches."""
from __future__ import annotations

import numpy as np

from conformance.case.loader import parse_case
from conformance.contract.runner import NotExpressible
from conformance.oracle.canonical import case_data
from conformance.oracle.reference import attention
from conformance.runners.flax.nnx import FlaxNnx
from tests.helpers import require

require("flax")

CASE = {"id": "t-nnx-decode", "attention": {"num_heads": 4, "num_kv_heads": 2,
                                            "query_features": 16},
        "inputs": {"batch": 2, "query_len": 5, "self_attention": True},
        "mask": {"causal": "upper_left"}, "decode": {"prefill": 3, "steps": 2}}


def _run(case):
    r = FlaxNnx(decode=True)
    return r.run(case, r.translate(case), case_data(case)).output


def test_decode_equals_the_full_causal_forward():
    case = parse_case(CASE, "<test>")
    assert np.max(np.abs(_run(case) - attention(case).output)) < 1e-5


def test_steps_with_is_causal_see_key_0_only(monkeypatch):
    """The planted defect is flax's own (google/flax#5591): each one-position call passes
    is_causal=True, whose tril(ones((1, max_length))) leaves key 0."""
    from flax import nnx

    from conformance.conventions.probes.probing import output_with
    from conformance.runners.flax import common

    monkeypatch.setattr(common, "_JITTED", {})  # trace the patched call afresh
    call = nnx.MultiHeadAttention.__call__
    monkeypatch.setattr(nnx.MultiHeadAttention, "__call__",
                        lambda self, *a, **kw: call(self, *a, **{**kw, "is_causal": True}))
    case = parse_case({**CASE, "id": "t-nnx-decode-causal"}, "<test>")
    out = _run(case)
    assert np.max(np.abs(out - attention(case).output)) > 1e-2
    first = np.zeros((5, 5), bool)
    first[:, 0] = True
    assert np.max(np.abs(out - output_with(case, first))) < 1e-5


def test_only_decode_cases_are_expressible():
    plain = parse_case({k: v for k, v in CASE.items() if k != "decode"}, "<test>")
    assert "decode" in FlaxNnx(decode=True).translate(plain).reason
    padded = parse_case({**CASE, "mask": {"causal": "upper_left", "key_padding": [5, 3]}},
                        "<test>")
    assert isinstance(FlaxNnx(decode=True).translate(padded), NotExpressible)
    assert FlaxNnx(decode=True).name == "flax.nnx.decode"
    assert "decode" not in FlaxNnx().features
