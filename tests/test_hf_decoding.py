"""HF decoder runners of #20 (hf.llama, hf.mistral, hf.gemma2, hf.gpt_oss): the window read
through the model's own mask builder, decoding through DynamicCache, softcap with
query_pre_attn_scalar, sinks; the translations' refusals; the probes with planted
defects (an off-by-one window, a decode without its cache, sinks left out)."""
from __future__ import annotations

import importlib.util
from dataclasses import replace

import numpy as np
import pytest

from conformance.contract.runner import NotExpressible
from conformance.oracle.canonical import case_data
from conformance.oracle.reference import attention
from conformance.runners.hf.decoding import window_limits, window_plan
from conformance.runners.hf.gemma2 import HFGemma2, pre_attn_scalar
from conformance.runners.hf.gpt_neox import HFGptNeox
from conformance.runners.hf.gpt_oss import HFGptOss
from conformance.runners.hf.llama import HFLlama
from conformance.runners.hf.mistral import HFMistral

from .helpers import make_case

needs_hf = pytest.mark.skipif(
    importlib.util.find_spec("transformers") is None or importlib.util.find_spec("torch") is None,
    reason="transformers/torch not installed (pip install -e '.[hf]')")
SELF = {"self_attention": True, "batch": 2, "query_len": 7, "key_len": 7}
NO_BIAS = {"num_heads": 4, "num_kv_heads": 2, "query_features": 16, "bias": False}


def _window(left, right, causal=True, **att):
    mask = {"window": {"left": left, "right": right}, **({"causal": "upper_left"} if causal
                                                          else {})}
    return make_case(attention={**NO_BIAS, **att}, inputs={**SELF, "query_len": 8,
                                                          "key_len": 8}, mask=mask)


def _run(runner, case, data=None):
    t = runner.translate(case)
    assert not isinstance(t, NotExpressible), t
    return runner.run(case, t, data or case_data(case))


def test_window_plan_counts_keys_as_the_builder_does():
    assert window_plan(_window(2, 0)) == {"sliding_window": 3}  # w keys with the query
    assert window_plan(_window(2, 2, causal=False)) == {"sliding_window": 2, "is_causal": False}
    assert window_limits(_window(2, 1, causal=False)) and "symmetric" in window_limits(
        _window(2, 1, causal=False))
    assert window_limits(_window(None, 0)) is not None


@needs_hf
@pytest.mark.parametrize("runner_cls", [HFMistral, HFGemma2, HFGptOss], ids=lambda c: c.name)
@pytest.mark.parametrize("causal", [True, False], ids=["causal", "symmetric"])
def test_window_runs_agree_and_off_by_one_is_caught(runner_cls, causal):
    runner = runner_cls()
    case = _window(2, 0 if causal else 2, causal=causal)
    obs = _run(runner, case)
    expected = attention(case).output
    np.testing.assert_allclose(obs.output, expected, rtol=1e-5, atol=1e-5)
    assert any("sliding_window=" in n for n in obs.notes)

    class OffByOne(runner_cls):  # the planted defect: the window number read as w + 1 keys
        def config_call(self, case):
            call, cfg = super().config_call(case)
            return call, {**cfg, "sliding_window": cfg["sliding_window"] - 1}
    wrong = _run(OffByOne(), case).output
    assert np.max(np.abs(wrong - expected)) > 1e-2


@needs_hf
@pytest.mark.parametrize("runner_cls", [HFLlama, HFMistral, HFGemma2, HFGptOss],
                         ids=lambda c: c.name)
def test_decode_through_the_cache_equals_the_full_forward(runner_cls):
    runner = runner_cls()
    case = make_case(attention={**NO_BIAS, "rope": {"style": "half_split"}}, inputs=SELF,
                     mask={"causal": "upper_left"}, decode={"prefill": 4, "steps": 3})
    obs = _run(runner, case)
    np.testing.assert_allclose(obs.output, attention(case).output, rtol=1e-5, atol=1e-5)
    assert any("DynamicCache" in n and "(2, 2, 7, 4)" in n for n in obs.notes), obs.notes

    class Forgetful(runner_cls):  # the planted defect: each step gets a fresh cache
        def forward(self, module, x, mask, **kw):
            if "cache" in kw and x.shape[1] == 1:
                from transformers import DynamicCache
                kw = {**kw, "cache": DynamicCache()}
                mask = None
            return super().forward(module, x, mask, **kw)
    wrong = _run(Forgetful(), case).output
    assert np.max(np.abs(wrong[:, 4:] - attention(case).output[:, 4:])) > 1e-2

    class Restart(runner_cls):  # the planted defect: each call rotates from position 0
        def embeddings(self, module, x, case, start=0):
            return super().embeddings(module, x, case, 0)
    wrong = _run(Restart(), case).output
    assert np.max(np.abs(wrong[:, 4:] - attention(case).output[:, 4:])) > 1e-2


def cache_cells(runner):
    """The ledger's two cache cells of `runner`, asked through its own decode."""
    from conformance.conventions.probes.cache import (
        cache_causal_alignment_cell, cache_layout_cell)

    return [cache_causal_alignment_cell(runner), cache_layout_cell(runner)]


@needs_hf
@pytest.mark.parametrize("runner_cls", [HFLlama, HFGptNeox], ids=lambda c: c.name)
def test_cache_probe_reaches_the_rotary_modules(runner_cls):
    """The cache cells of a rotary module: its rotation follows the cache's length, and
    GPT-NeoX takes the cache as layer_past (passed as cache= it is silently dropped).  The
    ledger's cache probes ask them (conventions/probes/cache.py)."""
    align, layout = cache_cells(runner_cls())
    assert align.value == "lower_right" and layout.value.startswith("BNSH"), align.evidence

    class Dropped(HFGptNeox):  # the planted defect: the cache under the wrong keyword
        cache_argument = "cache"
    dropped = cache_cells(Dropped())
    assert [c.value for c in dropped] == ["not_probed", "not_probed"]
    assert "not asked: the prefill left the DynamicCache empty" in dropped[0].evidence
    assert "layer_past" in dropped[0].evidence


@needs_hf
def test_a_module_that_raises_on_the_cache_is_refused():
    """The system's own error is `refused`, its message quoted (not not_applicable)."""
    class Raising(HFLlama):
        def forward(self, module, x, mask, **kw):
            raise ValueError("planted: this module takes no cache")
    cells = cache_cells(Raising())
    assert [c.value for c in cells] == ["refused", "refused"]
    assert "ValueError: planted: this module takes no cache" in cells[0].evidence


@needs_hf
def test_decode_with_a_window_keeps_w_minus_1_keys():
    case = make_case(attention=NO_BIAS, inputs=SELF, decode={"prefill": 4, "steps": 3},
                     mask={"causal": "upper_left", "window": {"left": 2, "right": 0}})
    obs = _run(HFMistral(), case)
    np.testing.assert_allclose(obs.output, attention(case).output, rtol=1e-5, atol=1e-5)
    assert any("DynamicSlidingWindowLayer" in n and "(2, 2, 2, 4)" in n for n in obs.notes)


def test_gemma2_scale_is_an_integer_pre_attn_scalar():
    assert pre_attn_scalar(make_case(attention={"num_heads": 2, "query_features": 8})) == 4
    assert pre_attn_scalar(make_case(attention={"num_heads": 2, "query_features": 8,
                                                "scale": 1.0})) == 1
    odd = make_case(attention={"num_heads": 2, "query_features": 8, "scale": 0.3})
    assert pre_attn_scalar(odd) is None
    assert "int" in HFGemma2().scale_limits(odd)


@needs_hf
def test_gemma2_softcap_and_scale_run():
    case = make_case(attention={"num_heads": 2, "query_features": 8, "softcap": 2.0,
                                "scale": 0.25}, inputs={**SELF, "scale": 3.0},
                     mask={"causal": "upper_left"})
    obs = _run(HFGemma2(), case)
    np.testing.assert_allclose(obs.output, attention(case).output, rtol=1e-5, atol=1e-5)
    uncapped = replace(case, attention=replace(case.attention, softcap=None))
    assert np.max(np.abs(obs.output - attention(uncapped).output)) > 1e-2


@needs_hf
def test_gpt_oss_sinks_loaded_or_neutralised_and_counted():
    runner = HFGptOss()
    sinks = make_case(attention={"num_heads": 4, "query_features": 16, "sinks": True},
                      inputs=SELF, mask={"causal": "upper_left"})
    data = case_data(sinks)
    obs = _run(runner, sinks, data)
    np.testing.assert_allclose(obs.output, attention(sinks).output, rtol=1e-5, atol=1e-5)
    plain = replace(sinks, attention=replace(sinks.attention, sinks=False))
    without = attention(plain, replace(data, weights=replace(data.weights, sinks=None)))
    assert np.max(np.abs(obs.output - without.output)) > 1e-2  # the sinks did something
    neutral = _run(runner, plain)
    np.testing.assert_allclose(neutral.output, attention(plain).output, rtol=1e-5, atol=1e-5)
    assert obs.parameters == neutral.parameters + 4
    assert "sinks" not in neutral.weight_shapes and obs.weight_shapes["sinks"] == (4,)


@needs_hf
def test_window_probe_reads_each_builder_and_catches_a_wrong_reading():
    from conformance.conventions.probes.window_settings import (
        window_settings_cell as window_width)

    cell = window_width(HFMistral())  # w keys under the causal builder, 2w + 1 bidirectional
    assert cell.value == "depends", cell.evidence
    assert "w_keys: MistralConfig(sliding_window=3), create_sliding_window" in cell.evidence
    assert "2w_plus_1_keys: MistralConfig(sliding_window=3, is_causal=False)" in cell.evidence

    class Plus1(HFMistral):  # the planted defect: the builder fed w + 1
        def built_mask(self, torch, case, module, x, cache=None):
            module.config.sliding_window += 1
            try:
                return super().built_mask(torch, case, module, x, cache)
            finally:
                module.config.sliding_window -= 1
    assert "w_plus_1_keys: MistralConfig(sliding_window=3)," in window_width(Plus1()).evidence

    class Dropped(HFMistral):  # the planted defect: the window never reaches the mask
        def mask_builder(self, config):
            from transformers.masking_utils import create_causal_mask
            return create_causal_mask
    assert window_width(Dropped()).value == "ignored"


@needs_hf
def test_qwen3_window_goes_through_its_mask_builder():
    """Qwen3Config keeps sliding_window only with use_sliding_window=True, and layer 0 is a
    sliding layer only by layer_types (max_window_layers defaults to 28)."""
    from conformance.conventions.probes.window_settings import (
        window_settings_cell as window_width)
    from conformance.runners.hf.qwen3 import HFQwen3

    cell = window_width(HFQwen3())
    assert cell.value == "depends", cell.evidence
    assert ("w_keys: Qwen3Config(use_sliding_window=True, sliding_window=3, layer_types="
            "['sliding_attention']), create_sliding_window_causal_mask") in cell.evidence
    assert ("ignored: Qwen3Config(use_sliding_window=True, sliding_window=3, "
            "max_window_layers=28), create_causal_mask") in cell.evidence

    class FullLayer(HFQwen3):  # the planted defect: layer 0 left a full_attention layer
        def config_kwargs(self, plan):
            return {**super().config_kwargs(plan), "layer_types": ["full_attention"]}
    assert window_width(FullLayer()).value == "ignored"


@needs_hf
def test_sinks_and_softcap_probes():
    from conformance.conventions.probes.capped import softcap_cell as softcap
    from conformance.conventions.probes.scores import sinks_cell as sinks
    from conformance.conventions.probes.softcap import softcap_order_cell as softcap_order

    assert sinks(HFGptOss()).value == "applied"
    assert softcap(HFGemma2()).value == "applied"
    assert softcap_order(HFGemma2()).value == "before_mask"

    class NoSinks(HFGptOss):  # the planted defect: the sink logits never loaded
        def state(self, case, weights):
            return {**super().state(case, weights),
                    "sinks": np.full(case.attention.num_heads, -np.inf)}
    assert sinks(NoSinks()).value == "ignored"


@pytest.mark.parametrize("runner_cls, att, mask, words", [
    (HFMistral, {"bias": True}, {}, "bias=False"),
    (HFMistral, {"bias": False}, {"window": {"left": 2, "right": 0},
                                  "key_padding": [7, 5]}, "another mask"),
    (HFGemma2, {"scale": 0.3}, {}, "not an integer"),
    (HFGptOss, {"rope": {"style": "interleaved"}}, {}, "torch.chunk"),
])
def test_refusals_quote_the_system(runner_cls, att, mask, words):
    case = make_case(attention={"num_heads": 2, "query_features": 8, **att}, inputs=SELF,
                     mask={"causal": "upper_left", **mask})
    t = runner_cls().translate(case)
    assert isinstance(t, NotExpressible) and words in t.reason, t


def test_decode_beside_another_mask_is_refused():
    case = make_case(attention=NO_BIAS, inputs=SELF, decode={"prefill": 4, "steps": 3},
                     mask={"causal": "upper_left", "key_padding": [7, 5]})
    t = HFLlama().translate(case)
    assert isinstance(t, NotExpressible) and "beside the causal one" in t.reason, t


@needs_hf
def test_scale_config_fields_read_configurable():
    """Gemma2's query_pre_attn_scalar (an int: 1/scale**2 = 9) and MPT's softmax_scale set
    the scale the ledger's generic softmax_scale probe asks; a planted field that never
    reaches the module reads ignored."""
    from conformance.conventions.probes.scores import softmax_scale_cell
    from conformance.runners.hf.mpt import HFMpt

    cell = softmax_scale_cell(HFGemma2())
    assert cell.value == "configurable" and "query_pre_attn_scalar=9" in cell.evidence, \
        cell.evidence
    assert softmax_scale_cell(HFMpt()).value == "configurable"
    assert softmax_scale_cell(HFLlama()).value == "inv_sqrt_head_dim"

    class Fixed(HFGemma2):  # the planted defect: the field pinned at head_dim
        def config_kwargs(self, plan):
            return {**super().config_kwargs(plan), "query_pre_attn_scalar": 4}
    assert softmax_scale_cell(Fixed()).value == "ignored"
