"""More witnesses of RoPE frequency scaling: the HF runners whose <Model>RotaryEmbedding
copies Llama's (hf.mistral, hf.gemma2, hf.gpt_oss, hf.qwen3, hf.olmo2, hf.gpt_neox) and
mlx-lm's own rope classes (mlx_lm.rope), each against the float64 oracle, with the defect
each reading exists to catch planted beside it: YaRN's magnitude applied twice, the
magnitude on the other side of a partial rotation, llama3's bands swapped, the ramp edges
untruncated, the short longrope factors; and what each cannot express refused in its words.

Positions reach 16k through ids, so float32 angles round to ~1e-4 rad at worst: agreement
is held at AGREE, each planted defect must land beyond DIFFER.
"""
from __future__ import annotations

import importlib.util
from dataclasses import replace

import numpy as np
import pytest

from conformance.case.expectations import CONDITIONS
from conformance.case.loader import load_file, parse_case
from conformance.case.model import QKNorm
from conformance.contract.runner import NotExpressible
from conformance.oracle.canonical import case_data
from conformance.oracle.reference import attention
from conformance.oracle.rope_scaling import magnitude
from conformance.paths import CASES_DIR
from conformance.runners import all_runners

AGREE, DIFFER = 5e-4, 3e-3
HF = ("hf.mistral", "hf.gemma2", "hf.gpt_oss", "hf.qwen3", "hf.olmo2", "hf.gpt_neox")


def load(name: str):
    """The registered runner called `name`."""
    return next(r for r in all_runners() if r.name == name)


def needs(*modules: str) -> None:
    for m in modules:
        if importlib.util.find_spec(m) is None:
            pytest.skip(f"{m} not installed")


def shipped(case_id: str):
    """A case of cases/rope_scaling_*.yaml by id."""
    for path in sorted(CASES_DIR.glob("rope_scaling_*.yaml")):
        for c in load_file(path):
            if c.id == case_id:
                return c
    raise LookupError(case_id)


def fit(runner, c):
    """`c` as the runner takes it: with the QK-norm the Qwen3 / OLMo2 module always applies
    and without the biases Mistral has no field for (each runner's probe_attention)."""
    extra = dict(getattr(runner, "probe_attention", {}))
    a = c.attention
    if "qk_norm" in extra:
        a = replace(a, qk_norm=QKNorm(extra["qk_norm"]["kind"], extra["qk_norm"]["scope"], 1e-6))
    if "bias" in extra:
        a = replace(a, bias=extra["bias"])
    return replace(c, attention=a)


def output(runner, c):
    t = runner.translate(c)
    assert not isinstance(t, NotExpressible), (runner.name, t)
    return np.asarray(runner.run(c, t, case_data(c)).output, np.float64)


def doubled(c):
    """`c` with YaRN's magnitude applied twice (attention_factor m**2 on cos and sin)."""
    m = magnitude(c.attention.rope)
    return _scaled(c, attention_factor=m * m)


def _scaled(c, **changes):
    r = c.attention.rope
    return replace(c, attention=replace(c.attention, rope=replace(
        r, scaling=replace(r.scaling, **changes))))


@pytest.mark.parametrize("name", HF)
def test_hf_witness_runs_yarn_natively_and_a_doubled_magnitude_is_caught(name):
    needs("torch", "transformers")
    runner = load(name)
    assert "rope_scaling" in runner.features
    c = fit(runner, shipped("rope-scaling-yarn"))
    t = runner.translate(c)
    assert "'rope_type': 'yarn'" in t.call and "max_position_embeddings=16384" in t.call
    got = output(runner, c)
    assert np.abs(got - attention(c).output).max() < AGREE
    assert np.abs(got - attention(doubled(c), case_data(c)).output).max() > DIFFER


@pytest.mark.parametrize("name", HF)
def test_hf_witness_refuses_the_softmax_scale_in_its_words(name):
    """DeepSeek's placement at full rotary width: each module's scaling has no rope term."""
    runner = load(name)
    c = shipped("rope-scaling-yarn-partial-softmax-scale")
    c = replace(c, attention=replace(c.attention, rope=replace(c.attention.rope,
                                                               rotary_dim=16)))
    t = runner.translate(fit(runner, c))
    assert isinstance(t, NotExpressible)
    scaling = "query_pre_attn_scalar" if name == "hf.gemma2" else "head_"
    assert "has no rope term" in t.reason and f".scaling = {scaling}" in t.reason, t.reason


def test_gpt_neox_puts_the_yarn_factor_on_the_rotated_dims_only():
    """rotary_pct 0.5: the factor 1.369 multiplies the 8 rotated dims of q and k; the same
    magnitude squared on the softmax scale (DeepSeek's place) parts from it."""
    needs("torch", "transformers")
    runner = load("hf.gpt_neox")
    c = shipped("rope-scaling-yarn-partial-cos-sin")
    got = output(runner, c)
    on_scale = _scaled(c, magnitude="softmax_scale")
    assert np.abs(got - attention(c).output).max() < AGREE
    assert np.abs(got - attention(on_scale, case_data(c)).output).max() > DIFFER


def mlx_lm():
    needs("mlx", "mlx_lm")
    return load("mlx_lm.rope")


@pytest.mark.parametrize("case_id", [
    "rope-scaling-linear", "rope-scaling-dynamic-beyond", "rope-scaling-dynamic-within",
    "rope-scaling-yarn", "rope-scaling-longrope-long", "rope-scaling-llama3",
    "rope-scaling-llama3-far-keys", "rope-scaling-llama3-scout-far-keys",
    "rope-scaling-yarn-partial-cos-sin", "rope-scaling-yarn-partial-softmax-scale"])
def test_mlx_lm_rope_classes_agree_with_the_oracle(case_id):
    c = shipped(case_id)
    assert np.abs(output(mlx_lm(), c) - attention(c).output).max() < AGREE


def test_mlx_lm_llama3_far_keys_catch_the_bands_swapped():
    """Llama 3.1's bands with low_freq_factor and high_freq_factor swapped (a port's slip):
    over 16k positions between queries and keys the swapped table parts from Llama3RoPE's."""
    c = shipped("rope-scaling-llama3-far-keys")
    got = output(mlx_lm(), c)
    swapped = _scaled(c, low_freq_factor=4.0, high_freq_factor=1.0)
    assert np.abs(got - attention(swapped, case_data(c)).output).max() > DIFFER
    assert np.abs(got - attention(c).output).max() < AGREE


def test_mlx_lm_yarn_ignores_truncate_and_longrope_the_short_factors():
    """YarnRoPE floors and ceils its ramp edges whatever the config's truncate says, and
    SuScaledRoPE divides by the long factors inside the original context: the rows read
    the truncated and the long tables, not the ones asked (the two known mismatches)."""
    r = mlx_lm()
    untruncated = shipped("rope-scaling-yarn-untruncated")
    got = output(r, untruncated)
    truncated = _scaled(untruncated, truncate=True)
    assert np.abs(got - attention(truncated, case_data(untruncated)).output).max() < AGREE
    assert np.abs(got - attention(untruncated).output).max() > DIFFER
    short = shipped("rope-scaling-longrope-short")
    got = output(r, short)
    long = _scaled(short, short_factor=short.attention.rope.scaling.long_factor)
    assert np.abs(got - attention(long, case_data(short)).output).max() < AGREE
    assert np.abs(got - attention(short).output).max() > DIFFER


def test_mlx_lm_softmax_scale_row_is_not_the_cos_sin_one():
    """DeepSeek's mscale = mscale_all_dim = 1: YarnRoPE's ratio is 1 and apply_yarn_mscale
    multiplies the scale by 1.874; the factor on the 8 rotated dims instead parts."""
    c = shipped("rope-scaling-yarn-partial-softmax-scale")
    got = output(mlx_lm(), c)
    on_cos_sin = _scaled(c, magnitude="cos_sin", mscale=None, mscale_all_dim=None)
    assert np.abs(got - attention(on_cos_sin, case_data(c)).output).max() > DIFFER


def test_mlx_lm_refusals_are_in_mlx_lm_s_words():
    needs("mlx", "mlx_lm")
    r = load("mlx_lm.rope")
    far = shipped("rope-scaling-llama3-far-keys")
    dyn = replace(far, attention=replace(far.attention, rope=replace(
        far.attention.rope, scaling=shipped("rope-scaling-dynamic-beyond").attention.rope
        .scaling)))
    t = r.translate(dyn)
    assert isinstance(t, NotExpressible) and "DynamicNTKScalingRoPE" in t.reason
    no_all_dim = _scaled(shipped("rope-scaling-yarn-partial-softmax-scale"), mscale=None,
                         mscale_all_dim=None)
    t = r.translate(no_all_dim)
    assert isinstance(t, NotExpressible) and "apply_yarn_mscale" in t.reason
    plain = parse_case(
        {"id": "no-rope", "attention": {"num_heads": 2, "query_features": 8},
         "inputs": {"batch": 1, "query_len": 2, "self_attention": True}}, "<test>")
    t = r.translate(plain)
    assert isinstance(t, NotExpressible) and t.reason.startswith("harness limit")


def test_rope_scaling_table_condition_keys_the_two_mlx_lm_mismatches():
    read = CONDITIONS["rope_scaling_table"].read
    assert read(shipped("rope-scaling-yarn-untruncated")) == "yarn_untruncated"
    assert read(shipped("rope-scaling-yarn")) == "yarn"
    assert read(shipped("rope-scaling-longrope-short")) == "longrope_short"
    assert read(shipped("rope-scaling-longrope-long")) == "longrope_long"
    past = shipped("rope-scaling-longrope-short")  # planted: the same layer past 4096
    past = replace(past, inputs=replace(past.inputs, position_offset=4090))
    assert read(past) == "longrope_long"
    assert read(shipped("rope-scaling-llama3")) == "llama3"
