"""The runners of RoPE frequency scaling against the float64 oracle (oracle/rope_scaling.py):
each system's own scaled table (transformers' LlamaRotaryEmbedding and DeepSeek V3's
attention, keras_hub's RotaryEmbedding, mx.fast.rope's scale=) at published configurations
and at positions past the pretraining length, with the defects ports make planted beside
them (llama3's bands swapped, YaRN's magnitude applied twice, a linear factor passed
where its inverse belongs), and what each system cannot express refused in its words.

Positions reach 8k through ids, so float32 angles (position x inv_freq) round to ~1e-5:
agreement is held at AGREE, each planted defect must land beyond DIFFER.
"""
from __future__ import annotations

import importlib.util
import math
from dataclasses import replace

import numpy as np
import pytest

from conformance.case.loader import parse_case
from conformance.contract.runner import NotExpressible
from conformance.oracle.canonical import case_data
from conformance.oracle.reference import attention
from conformance.oracle.rope_scaling import inv_freq, magnitude

AGREE, DIFFER = 1e-4, 1e-3
REL = 1e-6  # float32 inverse frequencies against float64 ones
LONG = [1.0, 1.5, 2.0, 3.0, 5.0, 8.0, 13.0, 21.0]  # per pair of a 16-dim rotation
SHORT = [1.0, 1.0, 1.05, 1.1, 1.1, 1.2, 1.3, 1.4]


def case(scaling: dict | None, *, head_dim: int = 8, base: float = 10000.0, offset: int = 8190,
         **inputs):
    rope = {"style": "half_split", "base": base, **({"scaling": scaling} if scaling else {})}
    return parse_case({"id": "rope-scaling-runner", "attention": {
        "num_heads": 2, "query_features": 2 * head_dim, "rope": rope},
        "inputs": {"batch": 1, "query_len": 4, "self_attention": True,
                   "position_offset": offset, **inputs}}, "<test>")


def needs(*modules: str) -> None:
    for m in modules:
        if importlib.util.find_spec(m) is None:
            pytest.skip(f"{m} not installed")


def positions(c) -> list[int]:
    p0 = c.inputs.position_offset
    return list(range(p0, p0 + c.inputs.query_len))


# Published configurations: Llama 3.1 8B (llama3 bands), Qwen2.5 with YaRN (factor 4 over
# 32768), DeepSeek-V3's YaRN (factor 40 over 4096, rope dim 64), a Phi-3 style longrope
PUBLISHED = {
    "llama3.1-8b": (dict(type="llama3", factor=8, original_max_positions=8192,
                         low_freq_factor=1, high_freq_factor=4), 128, 500000.0, 8190),
    "qwen2.5-yarn": (dict(type="yarn", factor=4, original_max_positions=32768), 128, 1e6,
                     40000),
    "deepseek-v3-yarn": (dict(type="yarn", factor=40, original_max_positions=4096, mscale=1,
                              mscale_all_dim=1), 64, 10000.0, 8190),
    "longrope-long": (dict(type="longrope", factor=4, original_max_positions=4096,
                           short_factor=SHORT, long_factor=LONG), 16, 10000.0, 8190),
    "longrope-short": (dict(type="longrope", factor=4, original_max_positions=4096,
                            short_factor=SHORT, long_factor=LONG), 16, 10000.0, 100),
    "dynamic-32k": (dict(type="dynamic", factor=4, original_max_positions=4096), 16, 10000.0,
                    32760),
    "linear": (dict(type="linear", factor=4), 16, 10000.0, 8190),
}


def llama_rotary(c, **override):
    """LlamaRotaryEmbedding built from hf.llama's translation of `c` (rope_parameters keys
    replaced by `override`), called at the case's positions: (inv_freq, attention_scaling)."""
    from conformance.runners.hf.common import import_torch
    from conformance.runners.hf.llama import HFLlama

    runner = HFLlama()
    t = runner.translate(c)
    assert not isinstance(t, NotExpressible), t
    torch = import_torch()
    plan = {**t.plan, "rope_scaling": {**t.plan["rope_scaling"], **override}}
    rot = runner.rotary(torch, runner.build(torch, plan).config)
    x = torch.zeros(1, c.inputs.query_len, c.attention.query_features)
    rot(x, torch.tensor([positions(c)]))  # dynamic and longrope choose their table here
    return rot.inv_freq.double().numpy(), float(rot.attention_scaling)


@pytest.mark.parametrize("name", sorted(PUBLISHED))
def test_llama_rotary_tables_match_the_oracle_at_published_configs(name):
    needs("torch", "transformers")
    scaling, d, base, p0 = PUBLISHED[name]
    c = case(scaling, head_dim=d, base=base, offset=p0)
    got, factor = llama_rotary(c)
    want = inv_freq(c.attention.rope, positions(c))
    assert np.max(np.abs(got - want) / want) < REL
    assert factor == pytest.approx(magnitude(c.attention.rope), rel=1e-12)


def test_llama3_bands_swapped_is_caught():
    """A port with low_freq_factor and high_freq_factor swapped (1 <-> 4) moves the middle
    band: its table is off the oracle's by far more than float32 rounding."""
    needs("torch", "transformers")
    scaling, d, base, p0 = PUBLISHED["llama3.1-8b"]
    c = case(scaling, head_dim=d, base=base, offset=p0)
    swapped, _ = llama_rotary(c, low_freq_factor=4.0, high_freq_factor=1.0)
    want = inv_freq(c.attention.rope, positions(c))
    assert np.max(np.abs(swapped - want) / want) > 0.1


def run_output(runner, c, data=None):
    t = runner.translate(c)
    assert not isinstance(t, NotExpressible), t
    return np.asarray(runner.run(c, t, data or case_data(c)).output, np.float64)


def test_llama_yarn_rows_agree_and_a_doubled_magnitude_does_not():
    """hf.llama on YaRN factor 4 at positions 8190..8193 agrees with the oracle; the oracle
    with the magnitude applied twice (attention_factor m**2 on cos and sin) does not."""
    needs("torch", "transformers")
    from conformance.runners.hf.llama import HFLlama

    c = case({"type": "yarn", "factor": 4, "original_max_positions": 2048})
    got = run_output(HFLlama(), c)
    m = magnitude(c.attention.rope)
    assert m == pytest.approx(0.1 * math.log(4) + 1)
    twice = replace(c.attention.rope, scaling=replace(c.attention.rope.scaling,
                                                      attention_factor=m * m))
    doubled = replace(c, attention=replace(c.attention, rope=twice))
    assert np.max(np.abs(got - attention(c).output)) < AGREE
    assert np.max(np.abs(got - attention(doubled, case_data(c)).output)) > DIFFER


def test_llama_dynamic_reads_the_original_length_from_max_position_embeddings():
    """transformers' dynamic NTK has no original_max_position_embeddings key: the config's
    max_position_embeddings is the pretraining length, so the translation sets it."""
    needs("torch", "transformers")
    from conformance.runners.hf.llama import HFLlama

    c = case({"type": "dynamic", "factor": 4, "original_max_positions": 2048})
    t = HFLlama().translate(c)
    assert t.plan["max_position_embeddings"] == 2048
    assert "original_max_position_embeddings" not in t.plan["rope_scaling"]
    assert np.max(np.abs(run_output(HFLlama(), c) - attention(c).output)) < AGREE


def test_llama_refuses_the_softmax_scale_placement():
    from conformance.runners.hf.llama import HFLlama

    c = case({"type": "yarn", "factor": 40, "original_max_positions": 4096, "mscale": 1,
              "mscale_all_dim": 1, "magnitude": "softmax_scale"})
    t = HFLlama().translate(c)
    assert isinstance(t, NotExpressible) and "attention_scaling" in t.reason
    assert "rope_scaling" in HFLlama.features


def deepseek(rope_parameters: dict):
    """DeepseekV3Attention and DeepseekV3RotaryEmbedding at tiny widths (qk_rope_head_dim 4,
    qk_nope_head_dim 4), built from the config object."""
    import transformers
    from transformers.models.deepseek_v3 import modeling_deepseek_v3 as ds

    from conformance.runners.hf.common import import_torch

    import_torch()
    cfg = transformers.DeepseekV3Config(
        hidden_size=16, num_attention_heads=2, num_key_value_heads=2, q_lora_rank=None,
        kv_lora_rank=4, qk_rope_head_dim=4, qk_nope_head_dim=4, v_head_dim=4,
        max_position_embeddings=163840, rope_parameters=rope_parameters, n_routed_experts=2,
        num_experts_per_tok=1, moe_intermediate_size=8, intermediate_size=8,
        num_hidden_layers=1, n_group=1, topk_group=1)
    return ds.DeepseekV3Attention(cfg, 0), ds.DeepseekV3RotaryEmbedding(cfg)


def test_deepseek_v3_puts_yarn_magnitude_squared_on_the_softmax_scale():
    """DeepSeek-V3's YaRN (factor 40, mscale = mscale_all_dim = 1): the attention's scaling
    is qk_head_dim**-0.5 times the oracle's magnitude squared (1.8739) and the rotary
    embedding leaves cos and sin at 1, so it does not apply the magnitude twice; its
    frequencies are the oracle's over qk_rope_head_dim.  Without mscale_all_dim the same
    module puts the magnitude (1.3689) on cos and sin instead."""
    needs("torch", "transformers")
    rp = {"rope_type": "yarn", "rope_theta": 10000.0, "factor": 40.0,
          "original_max_position_embeddings": 4096, "beta_fast": 32, "beta_slow": 1}
    soft = case({"type": "yarn", "factor": 40, "original_max_positions": 4096, "mscale": 1,
                 "mscale_all_dim": 1, "magnitude": "softmax_scale"}, head_dim=4)
    attn, rot = deepseek({**rp, "mscale": 1.0, "mscale_all_dim": 1.0})
    m = magnitude(soft.attention.rope)
    assert m * m == pytest.approx(1.8738542, abs=1e-6)
    assert attn.scaling / 8 ** -0.5 == pytest.approx(m * m, rel=1e-12)
    assert rot.attention_scaling == 1.0
    want = inv_freq(soft.attention.rope, [8190])
    assert np.max(np.abs(rot.inv_freq.double().numpy() - want) / want) < REL
    plain = case({"type": "yarn", "factor": 40, "original_max_positions": 4096}, head_dim=4)
    attn, rot = deepseek(rp)
    assert attn.scaling == 8 ** -0.5
    assert rot.attention_scaling == pytest.approx(magnitude(plain.attention.rope), rel=1e-12)


KERAS_TYPES = {"linear": {"type": "linear", "factor": 4},
               "yarn": {"type": "yarn", "factor": 4, "original_max_positions": 2048},
               "yarn_untruncated": {"type": "yarn", "factor": 4, "original_max_positions": 2048,
                                    "truncate": False},
               "dynamic": {"type": "dynamic", "factor": 4, "original_max_positions": 2048}}


def keras_tables() -> dict[str, list]:
    """In a Keras worker: per type, (RotaryEmbedding's inverse frequencies, the factor on its
    cos) built with the keywords keras.rope translates the case to, at rotary_dim 8."""
    import keras
    import keras_hub

    from conformance.runners.keras.rope import scaling_kwargs

    out = {}
    for name, scaling in KERAS_TYPES.items():
        c = case(scaling)
        layer = keras_hub.layers.RotaryEmbedding(max_wavelength=c.attention.rope.base,
                                                 dtype="float32", **dict(scaling_kwargs(c)))
        inv = keras.ops.convert_to_numpy(layer._get_inverse_freq(8))
        cos, _ = layer._compute_cos_sin_embedding(keras.ops.zeros((1, 1, 8)), start_index=0)
        out[name] = [np.asarray(inv, np.float64).tolist(),
                     float(keras.ops.convert_to_numpy(cos)[0, 0, 0])]
    return out


def test_keras_hub_tables_against_the_oracle():
    """keras_hub's linear and YaRN (both ramp edges) are the oracle's, YaRN's factor on cos;
    its "dynamic" divides every frequency by factor ** (d / (d - 2)) with no pretraining
    length, which is not transformers' dynamic NTK at 8k: far from the oracle's table."""
    needs("keras_hub", "torch")
    from conformance.run.workers import call_in_worker
    from conformance.runners import load

    runner = load("conformance.runners.keras.rope:KerasRope", {"backend": "torch"})
    found = call_in_worker(runner, "tests.test_rope_scaling_runners:keras_tables")
    for name in ("linear", "yarn", "yarn_untruncated"):
        rope = case(KERAS_TYPES[name]).attention.rope
        want = inv_freq(rope, [8193])
        got, on_cos = np.asarray(found[name][0]), found[name][1]
        assert np.max(np.abs(got - want) / want) < REL, name
        assert on_cos == pytest.approx(magnitude(rope), rel=1e-6), name
    dyn = case(KERAS_TYPES["dynamic"]).attention.rope
    got = np.asarray(found["dynamic"][0])
    plain = inv_freq(replace(dyn, scaling=None), [0])
    assert np.max(np.abs(got - plain / 4 ** (8 / 6)) / got) < REL
    assert np.max(np.abs(got - inv_freq(dyn, [8193])) / got) > 0.1


def test_keras_refuses_what_rotary_embedding_lacks():
    from conformance.runners.keras.rope import KerasRope

    runner = KerasRope(backend="torch")
    ok = runner.translate(case(KERAS_TYPES["yarn"]))
    assert dict(ok.plan["rope_kwargs"])["original_max_position_embeddings"] == 2048
    assert "rope_type='yarn'" in ok.call
    for scaling, words in (
            ({"type": "llama3", "factor": 8, "original_max_positions": 2048}, "takes linear"),
            ({"type": "longrope", "factor": 4, "original_max_positions": 2048,
              "short_factor": [1] * 4, "long_factor": [2] * 4}, "takes linear"),
            ({"type": "yarn", "factor": 4, "original_max_positions": 2048,
              "attention_factor": 1.5}, "attention_factor"),
            ({"type": "yarn", "factor": 40, "original_max_positions": 4096, "mscale": 1,
              "mscale_all_dim": 1, "magnitude": "softmax_scale"}, "softmax scale")):
        t = runner.translate(case(scaling))
        assert isinstance(t, NotExpressible) and words in t.reason, scaling


def test_mlx_linear_scaling_is_its_position_scale():
    """mlx.sdpa passes a linear factor as fast.rope's scale=1/factor and agrees with the
    oracle at 8k; the factor itself as scale= (the inverse mistaken) is far off.  The other
    types are not expressible."""
    needs("mlx")
    from conformance.runners.mlx.sdpa import MlxSDPA

    runner = MlxSDPA()
    c = case({"type": "linear", "factor": 4})
    t = runner.translate(c)
    assert t.plan.rope_scale == 0.25 and "scale=0.25" in t.call
    want = attention(c).output
    assert np.max(np.abs(run_output(runner, c) - want)) < AGREE
    from conformance.contract.runner import Translation

    wrong = Translation(t.call, replace(t.plan, rope_scale=4.0))
    got = np.asarray(runner.run(c, wrong, case_data(c)).output, np.float64)
    assert np.max(np.abs(got - want)) > DIFFER
    yarn = runner.translate(case(KERAS_TYPES["yarn"]))
    assert isinstance(yarn, NotExpressible) and "computes no yarn" in yarn.reason


def test_mlx_cache_probe_calls_refuse_what_fast_rope_lacks():
    """mlx.sdpa.cache answers the ledger's single-call probes with mlx.sdpa's op: a YaRN probe
    must be refused there too, not run unscaled (which the ledger would read as ignored)."""
    needs("mlx")
    from conformance.runners.mlx.sdpa_cache import MlxSDPACache

    runner = MlxSDPACache()
    yarn = runner.probe_translate(case(KERAS_TYPES["yarn"]))
    assert isinstance(yarn, NotExpressible) and "computes no yarn" in yarn.reason
    linear = runner.probe_translate(case(KERAS_TYPES["linear"]))
    assert linear.plan.rope_scale == 0.25


def test_keras_dynamic_mismatch_is_keyed_by_the_scaling_type():
    """The rope_scaling when-word reads the case's type (None without scaling), and each
    keras.rope file's known mismatch matches the dynamic cases only: a linear or YaRN row
    of keras_hub that drifted would still fail."""
    from conformance.case.expectations import CONDITIONS
    from conformance.conventions.expectations import load_file
    from conformance.paths import ROOT

    read = CONDITIONS["rope_scaling"].read
    assert read(case(KERAS_TYPES["dynamic"])) == "dynamic"
    assert not read(case(None))
    for backend in ("tensorflow", "jax", "torch"):
        name = f"keras.rope.{backend}"
        known = load_file(ROOT / "expectations" / f"{name}.yaml", name).known_mismatches
        assert [k for k in known if k.matches(case(KERAS_TYPES["dynamic"]))], backend
        for other in ("linear", "yarn"):
            assert not [k for k in known if k.matches(case(KERAS_TYPES[other]))], other
