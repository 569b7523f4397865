"""The ONNX decode paths (#20): the Attention op's own past/present and its external cache
(onnx.attention-op.cache.* / .static-cache.*), onnxruntime's GroupQueryAttention past and
local_window_size.  Each decode must equal the full causal forward, and a planted defect
(a cache that is not fed back) must not."""
from __future__ import annotations

import numpy as np
import pytest

from conformance.case.loader import parse_case
from conformance.contract.runner import NotExpressible
from conformance.oracle.canonical import case_data
from conformance.oracle.reference import attention
from tests.helpers import require

require("onnx", "onnxruntime")

CACHE_RUNNERS = ["onnx.attention-op.cache.ort", "onnx.attention-op.cache.reference",
                 "onnx.attention-op.static-cache.ort", "onnx.attention-op.static-cache.reference",
                 "onnx.contrib-gqa.ort"]


def _case(**mask):
    return parse_case({"id": "onnx-decode", "attention": {
        "num_heads": 4, "num_kv_heads": 2, "query_features": 64,
        "rope": {"style": "half_split"}}, "inputs": {"batch": 2, "query_len": 6,
                                                     "self_attention": True, "seed": 5},
        "mask": {"causal": "upper_left", **mask}, "decode": {"prefill": 3, "steps": 3}},
        "<test>")


def _runner(name):
    from conformance.runners import all_runners

    return next(r for r in all_runners() if r.name == name)


@pytest.mark.parametrize("name", CACHE_RUNNERS)
def test_decode_equals_the_causal_forward(name):
    runner, case = _runner(name), _case()
    out = runner.run(case, runner.translate(case), case_data(case)).output
    assert np.max(np.abs(np.asarray(out) - attention(case).output)) < 1e-5


@pytest.mark.parametrize("cache", ["past", "static"])
def test_a_cache_not_fed_back_is_caught(cache):
    """Planted defect: every run starts from the empty cache, so a step sees only itself."""
    from conformance.runners.onnx import cache_graphs

    runner, case = _runner(f"onnx.attention-op.{'cache' if cache == 'past' else 'static-cache'}"
                           ".reference"), _case()

    def forgetful(model, feed, names):
        return runner.evaluate(model, {**feed, **cache_graphs.empty_caches(case, cache)}, names)

    out = cache_graphs.decode(case, case_data(case), cache, forgetful)[0]
    err = np.abs(out - attention(case).output).max(axis=(0, 2))
    assert err[:3].max() < 1e-5 and err[3:].min() > 1e-3  # the prefill holds, the steps not


def test_gqa_window_reads_keys_counted():
    from conformance.runners.onnx.contrib_gqa import gqa_plan

    assert gqa_plan(_case(window={"left": 2, "right": 0})).local_window_size == 3
    case = parse_case({"id": "sym", "attention": {"num_heads": 2, "query_features": 16},
                       "inputs": {"query_len": 8, "self_attention": True},
                       "mask": {"window": {"left": 2, "right": 2}}}, "<test>")
    assert isinstance(gqa_plan(case), NotExpressible)


def test_static_rows_take_padding_as_lengths_only():
    from conformance.runners.onnx.attention_cache import static_plan

    pad = parse_case({"id": "pad", "attention": {"num_heads": 2, "query_features": 8},
                      "inputs": {"query_len": 3, "key_len": 5},
                      "mask": {"key_padding": [5, 2]}}, "<test>")
    assert static_plan(pad).nonpad == (5, 2) and not static_plan(pad).is_causal
    causal_pad = parse_case({"id": "cpad", "attention": {"num_heads": 2, "query_features": 8},
                             "inputs": {"query_len": 5, "self_attention": True},
                             "mask": {"causal": "upper_left", "key_padding": [5, 2]}}, "<test>")
    assert isinstance(static_plan(causal_pad), NotExpressible)  # the errata's offset differs
