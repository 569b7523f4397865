"""hf.deepseek_v3 and mlx_lm.deepseek_v3 against the MLA oracle on the real modules: each
case's output, the softmax scale's mscale^2 under DeepSeek-V3's YaRN (closed form), mlx-lm's
absorbed single-query steps, and the ledger's cells; planted on the real modules: the
softmax scale without mscale^2, the absorbed step with another head's W_uv, kv_b_proj
loaded in halves, each caught."""
from __future__ import annotations

import importlib.util
import math
from dataclasses import replace

import numpy as np
import pytest

from conformance.case.loader import load_file
from conformance.contract.runner import NotExpressible
from conformance.oracle.canonical import case_data
from conformance.oracle.reference import attention
from conformance.paths import CASES_DIR

CASES = {c.id: c for c in load_file(CASES_DIR / "mla_deepseek.yaml")}
MSCALE = 0.1 * math.log(40) + 1  # DeepSeek-V3's yarn_get_mscale(40, 1)


def needs(*modules: str) -> None:
    for m in modules:
        if importlib.util.find_spec(m) is None:
            pytest.skip(f"{m} not installed")


def hf():
    needs("torch", "transformers")
    from conformance.runners.hf.deepseek_v3 import HFDeepseekV3

    return HFDeepseekV3()


def hf_v2():
    needs("torch", "transformers")
    from conformance.runners.hf.deepseek_v2 import HFDeepseekV2

    return HFDeepseekV2()


def mlx():
    needs("mlx", "mlx_lm")
    from conformance.runners.mlx.lm_deepseek_v3 import MlxLmDeepseekV3

    return MlxLmDeepseekV3()


def run(runner, case, data=None):
    t = runner.translate(case)
    assert not isinstance(t, NotExpressible), t
    return runner.run(case, t, data or case_data(case))


def error(runner, case, data=None) -> float:
    data = data or case_data(case)
    return float(np.abs(run(runner, case, data).output - attention(case, data).output).max())


@pytest.mark.parametrize("make", [hf, hf_v2, mlx])
@pytest.mark.parametrize("case_id", sorted(CASES))
def test_each_case_agrees_with_the_oracle(make, case_id):
    """Every MLA case, the half-split one refused in each interleaved-only system's words
    (mlx-lm: traditional=True; DeepSeek-V2: complex pairs)."""
    runner, case = make(), CASES[case_id]
    t = runner.translate(case)
    if isinstance(t, NotExpressible):
        words = {"mlx_lm.deepseek_v3": "traditional=True", "hf.deepseek_v2": "complex pairs"}
        assert words[runner.name] in t.reason and case.attention.rope.style == "half_split"
        return
    assert error(runner, case) < 2e-6


def test_hf_softmax_scale_carries_mscale_squared_and_its_absence_is_caught():
    runner, case = hf(), CASES["mla-deepseek-v3-yarn"]
    from conformance.runners.hf.common import import_torch

    torch = import_torch()
    data = case_data(case)
    module = runner.module_for(torch, case, runner.translate(case).plan, data.weights)
    assert module.scaling / 8 ** -0.5 == pytest.approx(MSCALE ** 2, rel=1e-12)  # 1.8739
    assert runner.rotary(torch, module.config).attention_scaling == 1.0  # cos and sin at 1

    class MscaleMissing(type(runner)):
        def module_for(self, torch, case, plan, weights):
            m = super().module_for(torch, case, plan, weights)
            m.scaling = m.qk_head_dim ** -0.5  # the port leaves mscale^2 out
            return m

    assert error(runner, case, data) < 2e-6
    assert error(MscaleMissing(), case, data) > 1e-2


def test_mlx_scale_carries_mscale_squared():
    runner, case = mlx(), CASES["mla-deepseek-v3-yarn"]
    layer = runner.layer(case)
    assert layer.scale / 8 ** -0.5 == pytest.approx(MSCALE ** 2, rel=1e-6)
    assert layer.rope.mscale == 1.0


def test_mlx_absorbed_steps_with_another_heads_w_uv_are_caught():
    """The decode case's single-query steps take mlx-lm's absorbed path (unembed_out after
    the latent mix): with head 0's and head 1's W_uv swapped the steps part from the
    oracle, the prefill (materialised with the same swap) too."""
    runner, case = mlx(), CASES["mla-deepseek-v3-decode"]
    data = case_data(case)
    assert error(runner, case, data) < 2e-6
    w = data.weights
    swapped = replace(data, weights=replace(w, mla_v_up=w.mla_v_up[::-1].copy()))
    out = run(runner, case, swapped).output
    assert np.abs(out - attention(case, data).output)[:, 4:].max() > 1e-2


def test_hf_kv_b_proj_loaded_in_halves_is_caught():
    """A port packing kv_b_proj as [every head's k_nope | every head's v] instead of per
    head [k_nope | v]: DeepseekV3Attention's view per head reads other weights."""
    runner, case = hf(), CASES["mla-deepseek-v3-shape"]

    class Halves(type(runner)):
        def state(self, case, weights):
            s = dict(super().state(case, weights))
            h, d_n, d_v = 2, 4, 6
            per = s["kv_b_proj.weight"].reshape(h, d_n + d_v, -1)
            s["kv_b_proj.weight"] = np.concatenate([per[:, :d_n].reshape(h * d_n, -1),
                                                    per[:, d_n:].reshape(h * d_v, -1)])
            return s

    assert error(Halves(), case) > 1e-2


@pytest.mark.parametrize("make", [hf, hf_v2, mlx])
def test_the_ledger_reads_last_and_choosable(make):
    from conformance.conventions.probes.latent_attention import mla_rope_slice_cell
    from conformance.conventions.probes.rope_magnitude import rope_scaling_magnitude_cell

    runner = make()
    slice_cell = mla_rope_slice_cell(runner)
    assert slice_cell.value == "last", slice_cell.evidence
    magnitude = rope_scaling_magnitude_cell(runner)
    assert magnitude.value == "choosable", magnitude.evidence
    assert "softmax_scale 2." in magnitude.evidence or "softmax_scale 1." in magnitude.evidence


def test_mlx_yarn_table_and_scale_at_deepseek_v3s_published_config():
    """DeepSeek-V3's config (qk_rope_head_dim 64 of qk_head_dim 192, rope_theta 10000, YaRN
    factor 40 over 4096, beta 32 / 1, mscale = mscale_all_dim = 1): mlx-lm's YarnRoPE
    periods are 1 / the oracle's inverse frequencies (float32-bound), nothing on the rotated
    dims, and the attention's scale is 192**-0.5 x 1.8739; with mscale_all_dim left out the
    scale loses mscale^2 and the rotated dims carry m = 1.3689 instead (the other place)."""
    needs("mlx", "mlx_lm")
    from mlx_lm.models import deepseek_v3

    from conformance.case.model import RopeScaling
    from conformance.oracle.rope_scaling import yarn_inv_freq

    yarn = {"type": "yarn", "factor": 40.0, "original_max_position_embeddings": 4096,
            "beta_fast": 32, "beta_slow": 1, "mscale": 1.0, "mscale_all_dim": 1.0}
    args = dict(hidden_size=64, num_attention_heads=1, q_lora_rank=None, kv_lora_rank=8,
                qk_rope_head_dim=64, qk_nope_head_dim=128, v_head_dim=128,
                max_position_embeddings=163840, rope_theta=10000.0)
    layer = deepseek_v3.DeepseekV3Attention(deepseek_v3.ModelArgs(**args, rope_scaling=yarn))
    s = RopeScaling("yarn", 40.0, 4096, 32.0, 1.0, True, 1.0, 1.0)
    want = yarn_inv_freq(64, 10000.0, s)
    got = 1 / np.array(layer.rope._freqs, dtype=np.float64)
    assert np.abs(got / want - 1).max() < 1e-6
    assert layer.scale == pytest.approx(192 ** -0.5 * MSCALE ** 2, rel=1e-6)
    assert layer.rope.mscale == 1.0
    plain = {k: v for k, v in yarn.items() if k != "mscale_all_dim"}
    other = deepseek_v3.DeepseekV3Attention(deepseek_v3.ModelArgs(**args, rope_scaling=plain))
    assert other.scale == pytest.approx(192 ** -0.5, rel=1e-12)
    assert other.rope.mscale == pytest.approx(MSCALE, rel=1e-12)


def test_a_half_split_checkpoint_runs_in_mlx_lm_once_its_rope_rows_are_permuted():
    """mlx-lm rotates interleaved pairs only: the half-split case's weights, their rope rows
    permuted by convert/mla.rope_rows, give the half-split oracle in mlx-lm's module
    (planted: loaded unpermuted they do not), and the permutation round-trips exactly."""
    runner, case = mlx(), CASES["mla-half-split"]
    from conformance.contract.runner import Translation
    from conformance.convert.mla import LatentDims, from_deepseek_v3, rope_rows, to_deepseek_v3

    dims = LatentDims(2, 4, 4, 4)
    data = case_data(case)
    state = to_deepseek_v3(data.weights, "absorbed")
    moved = rope_rows(state, dims, "interleaved")
    back = rope_rows(moved, dims, "half_split")
    assert all(np.array_equal(back[k], state[k]) for k in state)
    assert not np.array_equal(moved["q_b_proj.weight"], state["q_b_proj.weight"])
    permuted = replace(data, weights=from_deepseek_v3(moved, dims))
    want = attention(case, data).output
    out = runner.run(case, Translation("", {}), permuted).output
    assert np.abs(out - want).max() < 2e-6
    unpermuted = runner.run(case, Translation("", {}), data).output
    assert np.abs(unpermuted - want).max() > 1e-2
