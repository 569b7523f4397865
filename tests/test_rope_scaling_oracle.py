"""The oracle's RoPE frequency scaling (oracle/rope_scaling.py) against the systems' own
closed forms at published configurations, with no forward pass: transformers'
ROPE_INIT_FUNCTIONS (transformers/modeling_rope_utils.py) called with a config object,
DeepSeek V3's softmax scale (transformers/models/deepseek_v3/modeling_deepseek_v3.py
yarn_apply_mscale), and keras-hub's RotaryEmbedding (keras_hub/src/layers/modeling/
rotary_embedding.py) as a second witness where it has the type.  Planted ports (llama3
bands swapped, YaRN untruncated where truncation is asked, YaRN's magnitude applied on
cos/sin and on the softmax scale both) must be caught."""
from __future__ import annotations

import json
import math
import os
import subprocess
import sys
import tracemalloc
from dataclasses import replace

import numpy as np
import pytest

from conformance.case.loader import load_file
from conformance.case.model import Rope, RopeScaling, Tolerance
from conformance.compare.agreement import agree
from conformance.oracle import reference, rope_scaling
from conformance.paths import ROOT

# transformers builds every inverse frequency in float32 (`.to(dtype=torch.float)` in each
# ROPE_INIT_FUNCTIONS entry), so a float64 formula meets it to float32 rounding (measured:
# 3.2e-7 at most over these configurations); keras-hub likewise ("float32" throughout).
FREQ_RTOL = 1e-6
FACTOR_RTOL = 1e-12  # the attention factors are Python floats on both sides


def yarn(factor, original, **kw):
    kw = {"beta_fast": 32.0, "beta_slow": 1.0, "truncate": True, "magnitude": "cos_sin", **kw}
    return RopeScaling("yarn", factor, original, **kw)


def llama3(factor, original, low, high):
    return RopeScaling("llama3", factor, original, low_freq_factor=low, high_freq_factor=high)


# name -> (the oracle's Rope, transformers' rope_parameters, head_dim, max_position_embeddings)
PUBLISHED = {
    "llama3.1-8b": (Rope("half_split", 128, 500000.0, llama3(8.0, 8192, 1.0, 4.0)),
                    {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0,
                     "high_freq_factor": 4.0, "original_max_position_embeddings": 8192,
                     "rope_theta": 500000.0}, 128, 131072),
    "qwen2.5-yarn": (Rope("half_split", 128, 1e6, yarn(4.0, 32768)),
                     {"rope_type": "yarn", "factor": 4.0, "rope_theta": 1e6,
                      "original_max_position_embeddings": 32768}, 128, 131072),
    "deepseek-v3": (Rope("half_split", 64, 10000.0, yarn(40.0, 4096, mscale=1.0,
                                                          mscale_all_dim=1.0)),
                    {"rope_type": "yarn", "factor": 40.0, "mscale": 1.0, "mscale_all_dim": 1.0,
                     "beta_fast": 32, "beta_slow": 1, "original_max_position_embeddings": 4096,
                     "rope_theta": 10000.0}, 64, 163840),
    "gemma3-global": (Rope("half_split", 256, 1e6, RopeScaling("linear", 8.0)),
                      {"rope_type": "linear", "factor": 8.0, "rope_theta": 1e6}, 256, 131072),
    # Llama 4 Scout's config.json (meta-llama/Llama-4-Scout-17B-16E-Instruct): low = high = 1;
    # transformers ships no Scout config, the numbers are the published file's.
    "llama4-scout": (Rope("half_split", 128, 500000.0, llama3(16.0, 8192, 1.0, 1.0)),
                     {"rope_type": "llama3", "factor": 16.0, "low_freq_factor": 1.0,
                      "high_freq_factor": 1.0, "original_max_position_embeddings": 8192,
                      "rope_theta": 500000.0}, 128, 10485760),
}


def hf_rope(params: dict, head_dim: int, max_positions: int, seq_len: int | None = None,
            rotary_dim: int | None = None) -> tuple[np.ndarray, float]:
    """transformers' own (inv_freq, attention_factor) for `params`, from a config object."""
    pytest.importorskip("transformers", reason="transformers not installed")
    import torch
    from transformers import LlamaConfig
    from transformers.modeling_rope_utils import ROPE_INIT_FUNCTIONS

    params = dict(params)
    if rotary_dim is not None and rotary_dim != head_dim:
        params["partial_rotary_factor"] = rotary_dim / head_dim
    config = LlamaConfig(hidden_size=2 * head_dim, num_attention_heads=2, head_dim=head_dim,
                         max_position_embeddings=max_positions, rope_parameters=params)
    length = None if seq_len is None else torch.tensor(seq_len)
    freq, factor = ROPE_INIT_FUNCTIONS[params["rope_type"]](config, "cpu", seq_len=length)
    return freq.double().numpy(), float(factor)


def freq_gap(oracle: np.ndarray, system: np.ndarray) -> float:
    """Largest relative difference between two inverse-frequency vectors (inf on shape)."""
    if oracle.shape != system.shape:
        return math.inf
    return float(np.max(np.abs(system - oracle) / np.abs(oracle)))


@pytest.mark.parametrize("name", sorted(PUBLISHED))
def test_published_configurations_match_transformers(name):
    rope, params, head_dim, max_positions = PUBLISHED[name]
    freq, factor = hf_rope(params, head_dim, max_positions)
    assert freq_gap(rope_scaling.inv_freq(rope, [0]), freq) <= FREQ_RTOL
    assert rope_scaling.magnitude(rope) == pytest.approx(factor, rel=FACTOR_RTOL)


@pytest.mark.parametrize("position, kind", [(4000, "short"), (4095, "short"),
                                            (4096, "long"), (16383, "long")])
def test_longrope_switches_where_transformers_does(position, kind):
    short, long = (1.0, 1.02, 1.05, 1.1, 1.2, 1.4, 1.7, 2.0), tuple(range(1, 9))
    rope = Rope("half_split", 16, 10000.0, RopeScaling(
        "longrope", 16.0, 4096, short_factor=short, long_factor=tuple(map(float, long)),
        magnitude="cos_sin"))
    params = {"rope_type": "longrope", "factor": 16.0, "rope_theta": 10000.0,
              "original_max_position_embeddings": 4096, "short_factor": list(short),
              "long_factor": list(long)}
    freq, factor = hf_rope(params, 16, 65536, seq_len=position + 1)
    ours = rope_scaling.inv_freq(rope, [position])
    assert freq_gap(ours, freq) <= FREQ_RTOL
    other = rope_scaling.inv_freq(rope, [20000 if kind == "short" else 100])  # other side
    assert freq_gap(other, freq) > 0.01, kind
    assert factor == pytest.approx(math.sqrt(4 / 3), rel=FACTOR_RTOL)
    assert rope_scaling.magnitude(rope) == pytest.approx(factor, rel=FACTOR_RTOL)


@pytest.mark.parametrize("position", [100, 4095, 16383, 32767])
def test_dynamic_ntk_follows_the_largest_position(position):
    rope = Rope("half_split", 16, 10000.0, RopeScaling("dynamic", 2.0, 4096))
    freq, _ = hf_rope({"rope_type": "dynamic", "factor": 2.0, "rope_theta": 10000.0}, 16,
                      4096, seq_len=position + 1)
    assert freq_gap(rope_scaling.inv_freq(rope, [3, position]), freq) <= FREQ_RTOL


def test_partial_rotary_yarn_uses_the_rotary_width():
    rope = Rope("half_split", 8, 10000.0, yarn(40.0, 4096))
    freq, factor = hf_rope({"rope_type": "yarn", "factor": 40.0, "rope_theta": 10000.0,
                            "original_max_position_embeddings": 4096}, 16, 163840,
                           rotary_dim=8)
    assert freq_gap(rope_scaling.inv_freq(rope, [0]), freq) <= FREQ_RTOL
    assert rope_scaling.magnitude(rope) == pytest.approx(factor, rel=FACTOR_RTOL)
    assert factor == pytest.approx(0.1 * math.log(40) + 1, rel=FACTOR_RTOL)  # 1.3689


def test_deepseek_v3_folds_mscale_squared_into_the_softmax_scale():
    pytest.importorskip("transformers", reason="transformers not installed")
    from transformers import DeepseekV3Config
    from transformers.models.deepseek_v3.modeling_deepseek_v3 import DeepseekV3Attention

    _, params, _, _ = PUBLISHED["deepseek-v3"]
    config = DeepseekV3Config(hidden_size=32, num_attention_heads=2, num_key_value_heads=2,
                              q_lora_rank=None, kv_lora_rank=8, qk_rope_head_dim=8,
                              qk_nope_head_dim=8, v_head_dim=16, num_hidden_layers=1,
                              max_position_embeddings=163840, rope_parameters=dict(params))
    ratio = DeepseekV3Attention(config, layer_idx=0).scaling / 16 ** -0.5
    rope = Rope("half_split", 8, 10000.0, yarn(40.0, 4096, mscale=1.0, mscale_all_dim=1.0,
                                                 magnitude="softmax_scale"))
    assert rope_scaling.placement(rope) == "softmax_scale"
    assert rope_scaling.magnitude(rope) ** 2 == pytest.approx(ratio, rel=FACTOR_RTOL)
    assert ratio == pytest.approx(1.8739, abs=1e-4)  # the number for factor 40
    # the same parameters on cos/sin: transformers' yarn gives them mscale / mscale_all_dim
    _, on_cos_sin = hf_rope(params, 8, 163840)
    assert rope_scaling.magnitude(replace(rope, scaling=replace(
        rope.scaling, magnitude="cos_sin"))) == pytest.approx(on_cos_sin, rel=FACTOR_RTOL)


_KERAS_WITNESS = """
import json, numpy as np
from keras_hub.layers import RotaryEmbedding
out = {}
for name, kw, dim in [("gemma3-global", dict(max_wavelength=1e6, scaling_factor=8.0), 256),
                      ("qwen2.5-yarn", dict(max_wavelength=1e6, scaling_factor=4.0,
                       rope_type="yarn", original_max_position_embeddings=32768), 128)]:
    layer = RotaryEmbedding(**kw)
    ones = np.ones((1, 1, dim), dtype="float32")
    out[name] = [np.asarray(layer._get_inverse_freq(dim), dtype=np.float64).tolist(),
                 float(np.asarray(layer(ones, positions=np.array([0])))[0, 0, 0])]
print(json.dumps(out))
"""


def test_keras_hub_is_a_second_witness_for_linear_and_yarn():
    """keras-hub's RotaryEmbedding in a fresh process on the numpy backend (Keras fixes
    its backend at import): its inverse frequencies, and at position 0 (cos 1, sin 0) the
    factor its YaRN puts on cos and sin."""
    pytest.importorskip("keras_hub", reason="keras-hub not installed")
    env = {**os.environ, "KERAS_BACKEND": "numpy", "TF_CPP_MIN_LOG_LEVEL": "3"}
    done = subprocess.run([sys.executable, "-c", _KERAS_WITNESS], env=env, capture_output=True,
                          text=True, timeout=240, check=True)
    seen = json.loads(done.stdout.strip().splitlines()[-1])
    for name, (freq, at_zero) in seen.items():
        rope = PUBLISHED[name][0]
        assert freq_gap(rope_scaling.inv_freq(rope, [0]), np.asarray(freq)) <= FREQ_RTOL
        assert at_zero == pytest.approx(rope_scaling.magnitude(rope), rel=FREQ_RTOL)


def test_a_port_with_the_llama3_bands_swapped_is_caught():
    rope, params, head_dim, max_positions = PUBLISHED["llama3.1-8b"]
    swapped = {**params, "low_freq_factor": 4.0, "high_freq_factor": 1.0}
    port, _ = hf_rope(swapped, head_dim, max_positions)  # transformers warns, computes
    assert freq_gap(rope_scaling.inv_freq(rope, [0]), port) > 100 * FREQ_RTOL
    case = _case("rope-scaling-llama3-far-keys")
    wrong = replace(case.attention.rope.scaling, low_freq_factor=4.0, high_freq_factor=1.0)
    assert not _agrees(case, _with_scaling(case, wrong))


def test_a_port_without_truncation_where_it_is_asked_is_caught():
    rope, params, head_dim, max_positions = PUBLISHED["qwen2.5-yarn"]
    port, _ = hf_rope({**params, "truncate": False}, head_dim, max_positions)
    assert freq_gap(rope_scaling.inv_freq(rope, [0]), port) > 100 * FREQ_RTOL
    case = _case("rope-scaling-yarn")
    assert not _agrees(case, _with_scaling(case, replace(case.attention.rope.scaling,
                                                         truncate=False)))


def test_yarns_magnitude_applied_twice_is_caught():
    """A port that multiplies cos and sin by the factor and also the softmax scale by its
    square: the cos_sin case's own scale override carries the second application."""
    case = _case("rope-scaling-yarn-partial-cos-sin")
    m = rope_scaling.magnitude(case.attention.rope)
    twice = reference.attention(case, scale=m * m / math.sqrt(case.attention.qk_head_dim))
    expected = reference.attention(case).output
    assert not agree(expected, twice.output, case.expect.tolerance["float32"]).ok
    # with the whole head rotated the two single placements are one (a stated tie) ...
    full = _case("rope-scaling-yarn")
    other = replace(full.attention.rope.scaling, magnitude="softmax_scale")
    assert _agrees(full, _with_scaling(full, other), Tolerance(1e-12, 1e-12))
    # ... and a partial rotary parts them
    other = replace(case.attention.rope.scaling, magnitude="softmax_scale")
    assert not _agrees(case, _with_scaling(case, other))


def test_every_scaling_case_parts_from_the_unscaled_rope_but_the_dynamic_within():
    for case in _cases():
        unscaled = replace(case, attention=replace(case.attention, rope=replace(
            case.attention.rope, scaling=None)))
        expect_tie = case.id == "rope-scaling-dynamic-within"  # below the original context
        assert _agrees(case, unscaled, Tolerance(1e-12, 1e-12)) == expect_tie, case.id


def test_a_position_of_32k_costs_what_a_position_of_8_costs():
    case = _case("rope-scaling-llama3-scout-far-keys")
    near = replace(case, inputs=replace(case.inputs, position_offset=8, key_position_offset=0))

    def peak(c) -> int:
        reference.attention(c)  # warm: imports and caches out of the measure
        tracemalloc.start()
        reference.attention(c)
        used = tracemalloc.get_traced_memory()[1]
        tracemalloc.stop()
        return used

    assert peak(case) <= 1.1 * peak(near) + 4096


def _cases():
    return [c for f in sorted((ROOT / "cases").glob("rope_scaling_*.yaml")) for c in load_file(f)]


def _case(case_id: str):
    return next(c for c in _cases() if c.id == case_id)


def _with_scaling(case, scaling):
    return replace(case, attention=replace(case.attention, rope=replace(
        case.attention.rope, scaling=scaling)))


def _agrees(case, port, tol: Tolerance | None = None) -> bool:
    """Whether `port`'s oracle output passes `case`'s float32 tolerance against `case`'s."""
    tol = tol or case.expect.tolerance["float32"]
    return agree(reference.attention(case).output, reference.attention(port).output, tol).ok
