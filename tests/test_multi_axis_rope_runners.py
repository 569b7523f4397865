"""The multi-axis rope of each system against the oracle: closed-form cos / sin tables of
transformers' rotary modules at published configurations (Qwen2-VL-7B's mrope_section
[16, 24, 24], Qwen3-VL's [24, 20, 20] interleaved, Pixtral-12B's and Qwen2-VL's vision
heads) with no forward pass, each with the other layout planted and caught; the ledger's
cells of the registered runners (hf.qwen2_vl contiguous, hf.qwen3_vl interleaved, hf.pixtral
alternating, hf.qwen2_vl_vision shared, mlx-lm's one_axis), a real module given swapped
sections read as other, and the matrix rows of the multi-axis cases."""
from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest

from conformance.case.loader import load_file
from conformance.case.multi_axis_rope import MultiAxisRope
from conformance.conventions.probes import multi_axis as probe
from conformance.oracle import multi_axis_rope as oracle
from conformance.paths import CASES_DIR

from .helpers import require

require("torch", "transformers")

# Qwen2VLModel.get_rope_index's positions for 10 text tokens, a 4 x 6 image (t 10, rows
# 10..13, columns 10..15) and 4 text tokens from 16
TEXT, ROWS, COLS = list(range(10)), 4, 6
IMAGE = [(10, 10 + r, 10 + c) for r in range(ROWS) for c in range(COLS)]
AFTER = list(range(16, 20))
T_H_W = tuple(tuple(p) for p in np.array([(p, p, p) for p in TEXT] + IMAGE
                                         + [(p, p, p) for p in AFTER]).T.tolist())
FLOAT32 = 1e-5  # cos / sin of float32 angles below 20 rad


def mrope(sections, layout) -> MultiAxisRope:
    return MultiAxisRope("mrope", layout, T_H_W, T_H_W, sections=tuple(sections))


def table(multi, d, base):
    """The oracle's (L, d) cos and sin in the half-split order transformers uses."""
    theta = oracle.angles(multi, multi.positions, d, base)
    return (np.concatenate([np.cos(theta)] * 2, -1), np.concatenate([np.sin(theta)] * 2, -1))


def hf_mrope(rotary_cls, config_cls, sections, base, **extra):
    import torch

    cfg = config_cls(hidden_size=256, num_attention_heads=2, head_dim=128, rope_parameters={
        "rope_type": "default", "rope_theta": base, "mrope_section": list(sections), **extra})
    cos, sin = rotary_cls(cfg)(torch.zeros(1, len(T_H_W[0]), 128),
                               torch.tensor(T_H_W)[:, None, :])
    return cos[0].double().numpy(), sin[0].double().numpy()


def test_qwen2_vl_7b_tables_are_the_contiguous_oracle_and_swapped_sections_are_caught():
    from transformers import Qwen2VLTextConfig
    from transformers.models.qwen2_vl.modeling_qwen2_vl import Qwen2VLRotaryEmbedding

    cos, sin = hf_mrope(Qwen2VLRotaryEmbedding, Qwen2VLTextConfig, (16, 24, 24), 1e6)
    want = table(mrope((16, 24, 24), "contiguous"), 128, 1e6)
    assert np.abs(cos - want[0]).max() < FLOAT32 and np.abs(sin - want[1]).max() < FLOAT32
    swapped = table(replace(mrope((24, 16, 24), "contiguous"),
                            positions=(T_H_W[1], T_H_W[0], T_H_W[2])), 128, 1e6)
    assert np.abs(cos - swapped[0]).max() > 0.1
    interleaved = table(mrope((16, 24, 24), "interleaved"), 128, 1e6)
    assert np.abs(cos - interleaved[0]).max() > 0.1


def test_qwen3_vl_tables_are_the_interleaved_oracle_and_contiguous_is_caught():
    from transformers import Qwen3VLTextConfig
    from transformers.models.qwen3_vl.modeling_qwen3_vl import Qwen3VLTextRotaryEmbedding

    cos, sin = hf_mrope(Qwen3VLTextRotaryEmbedding, Qwen3VLTextConfig, (24, 20, 20), 5e6,
                        mrope_interleaved=True)
    want = table(mrope((24, 20, 20), "interleaved"), 128, 5e6)
    assert np.abs(cos - want[0]).max() < FLOAT32 and np.abs(sin - want[1]).max() < FLOAT32
    assert np.abs(cos - table(mrope((24, 20, 20), "contiguous"), 128, 5e6)[0]).max() > 0.1


def test_text_only_position_ids_give_1d_rope_in_transformers():
    """Qwen2VLTextModel expands (B, T) ids to three equal rows: every layout is 1-D there."""
    import torch
    from transformers import Qwen2VLTextConfig
    from transformers.models.qwen2_vl.modeling_qwen2_vl import Qwen2VLRotaryEmbedding

    cfg = Qwen2VLTextConfig(hidden_size=256, num_attention_heads=2, rope_parameters={
        "rope_type": "default", "rope_theta": 1e6, "mrope_section": [16, 24, 24]})
    cos, _ = Qwen2VLRotaryEmbedding(cfg)(torch.zeros(1, 8, 128), torch.arange(8)[None])
    inv = 1e6 ** (-np.arange(0, 128, 2) / 128)
    assert np.abs(cos[0, :, :64].double().numpy() - np.cos(np.arange(8)[:, None] * inv)).max(
    ) < FLOAT32


def grid(layout, rows, cols):
    idx = range(rows * cols)
    pos = (tuple(i // cols for i in idx), tuple(i % cols for i in idx))
    return MultiAxisRope("grid_2d", layout, pos, pos, grid=(rows, cols))


def test_pixtral_and_qwen2_vl_vision_tables_part_where_the_oracle_says():
    """Pixtral-12B's vision head 64 and Qwen2-VL's vision head 80 (1280 / 16), theta 1e4, on
    a 4 x 5 grid: each module's table is its own layout's, and not the other's."""
    import torch
    from transformers import PixtralVisionConfig
    from transformers.models.pixtral.modeling_pixtral import PixtralVisionRotaryEmbedding
    from transformers.models.qwen2_vl.configuration_qwen2_vl import Qwen2VLVisionConfig
    from transformers.models.qwen2_vl.modeling_qwen2_vl import Qwen2VLVisionRotaryEmbedding

    axial = {"rope_type": "axial", "rope_theta": 1e4}
    ids = torch.tensor(grid("shared", 4, 5).positions).T
    pix = PixtralVisionRotaryEmbedding(PixtralVisionConfig(
        hidden_size=1024, num_attention_heads=16, head_dim=64, rope_parameters=axial))
    qv = Qwen2VLVisionRotaryEmbedding(Qwen2VLVisionConfig(embed_dim=1280, num_heads=16,
                                                          rope_parameters=axial))
    for module, d, layout, other in ((pix, 64, "alternating", "shared"),
                                     (qv, 80, "shared", "alternating")):
        cos, sin = (t.double().numpy().reshape(20, d) for t in module(torch.zeros(20, d), ids))
        want = table(grid(layout, 4, 5), d, 1e4)
        assert np.abs(cos - want[0]).max() < FLOAT32 and np.abs(sin - want[1]).max() < FLOAT32
        assert np.abs(cos - table(grid(other, 4, 5), d, 1e4)[0]).max() > 0.1, layout


TARGETS = {"hf.qwen2_vl": "hf.qwen2_vl:HFQwen2VL", "hf.qwen3_vl": "hf.qwen3_vl:HFQwen3VL",
           "hf.pixtral": "hf.pixtral:HFPixtral",
           "hf.qwen2_vl_vision": "hf.qwen2_vl_vision:HFQwen2VLVision",
           "mlx_lm.qwen2_vl": "mlx.lm_vl:MlxLmQwen2VL", "mlx_lm.qwen3_vl": "mlx.lm_vl:MlxLmQwen3VL",
           "keras_hub.qwen3_5.mrope": "keras.hub_qwen3_5_mrope:KerasHubQwen35MRoPE",
           "keras_hub.qwen3_5_vision": "keras.hub_qwen3_5_vision:KerasHubQwen35Vision"}


def runner(name):
    """The registered runner, loaded with its target (a worker runner runs in its worker)."""
    from conformance.runners import load, registry

    target = f"conformance.runners.{TARGETS[name]}"
    assert (target, {}) in registry(), target
    return load(target, {})


@pytest.mark.parametrize("name, axis, word", [
    ("hf.qwen2_vl", "mrope_layout", "contiguous"),
    ("hf.qwen3_vl", "mrope_layout", "interleaved"),
    ("hf.pixtral", "vision_rope_layout", "alternating"),
    ("hf.qwen2_vl_vision", "vision_rope_layout", "shared"),
])
def test_the_ledger_reads_each_hf_module(name, axis, word):
    cell = getattr(probe, f"{axis}_cell")(runner(name))
    assert cell.value == word, cell.evidence


def test_a_real_module_given_swapped_sections_reads_other():
    """hf.qwen2_vl with t and h sections swapped in the config it builds: caught."""
    from conformance.runners.hf.qwen2_vl import HFQwen2VL

    class Swapped(HFQwen2VL):
        name = "hf.qwen2_vl.swapped"

        def build(self, torch, plan):  # the rotary module reads the built config
            t, h, w = plan["mrope_section"]
            return super().build(torch, {**plan, "mrope_section": [h, t, w]})

    cell = probe.mrope_layout_cell(Swapped())
    assert cell.value == "other", cell.evidence


def test_keras_hub_qwen3_5_interleaves_its_sections():
    """keras_hub's Qwen3_5Attention given mrope_section and (B, 4, T) ids: interleaved, as
    transformers' Qwen3-VL; its case (gate, QK-norm, 8 of 16 dims rotating) passes."""
    require("keras", "keras_hub", "jax")
    from conformance.run.evaluate import evaluate

    r = runner("keras_hub.qwen3_5.mrope")
    cell = probe.mrope_layout_cell(r)
    assert cell.value == "interleaved", cell.evidence
    case = load_file(CASES_DIR / "multi_axis_rope_qwen3_5.yaml")[0]
    assert evaluate(case, r).outcome.value == "pass"


def test_keras_hub_qwen3_5_vision_shares_one_ladder():
    """keras_hub's Qwen3.5 vision attention with its encoder's _rot_pos_emb: shared, as
    Qwen2-VL's vision tower in transformers (a second framework on vision_rope_layout)."""
    require("keras", "keras_hub", "jax")
    from conformance.run.evaluate import evaluate

    r = runner("keras_hub.qwen3_5_vision")
    cell = probe.vision_rope_layout_cell(r)
    assert cell.value == "shared", cell.evidence
    grid = {c.id: c for c in load_file(CASES_DIR / "multi_axis_rope_grid.yaml")}
    assert evaluate(grid["multi-axis-rope-grid-shared"], r).outcome.value == "pass"


def test_qwen3_vl_rotated_by_qwen2_vl_tables_reads_contiguous():
    """Qwen3VLTextAttention handed Qwen2VLRotaryEmbedding's (contiguous) cos / sin: the
    interleaved ask reads contiguous, not interleaved (a port reading the sections the
    other family's way is caught)."""
    from transformers import Qwen2VLTextConfig
    from transformers.models.qwen2_vl.modeling_qwen2_vl import Qwen2VLRotaryEmbedding

    from conformance.runners.hf.qwen3_vl import HFQwen3VL

    class ContiguousPort(HFQwen3VL):
        name = "hf.qwen3_vl.contiguous_port"

        def rotary(self, torch, config):
            c = config
            return Qwen2VLRotaryEmbedding(Qwen2VLTextConfig(
                hidden_size=c.num_attention_heads * c.head_dim,
                num_attention_heads=c.num_attention_heads,
                rope_parameters=dict(c.rope_parameters)))

    cell = probe.mrope_layout_cell(ContiguousPort())
    assert cell.value == "contiguous", cell.evidence


@pytest.mark.parametrize("name", ["mlx_lm.qwen2_vl", "mlx_lm.qwen3_vl"])
def test_mlx_lm_rotates_at_the_sequence_positions(name):
    require("mlx", "mlx_lm")
    cell = probe.mrope_layout_cell(runner(name))
    assert cell.value == "one_axis", cell.evidence
    assert "rope_utils.py#L366-L371" in cell.evidence
    grid_cell = probe.vision_rope_layout_cell(runner(name))  # a text model: said, not raised
    assert grid_cell.value == "not_probed" and "vision tower" in grid_cell.evidence


@pytest.mark.parametrize("name, passing", [
    ("hf.qwen2_vl", {"multi-axis-rope-mrope-contiguous", "multi-axis-rope-mrope-far",
                     "multi-axis-rope-mrope-batch"}),
    ("hf.qwen3_vl", {"multi-axis-rope-mrope-interleaved"}),
    ("hf.pixtral", {"multi-axis-rope-grid-alternating"}),
    ("hf.qwen2_vl_vision", {"multi-axis-rope-grid-shared"}),
])
def test_the_multi_axis_cases_pass_where_the_layout_is_the_systems(name, passing):
    from conformance.run.evaluate import evaluate

    cases = [c for f in ("multi_axis_rope_mrope.yaml", "multi_axis_rope_grid.yaml")
             for c in load_file(CASES_DIR / f)]
    rows = {c.id: evaluate(c, runner(name)) for c in cases}
    assert {i for i, r in rows.items() if r.outcome.value == "pass"} == passing, {
        i: (r.outcome.value, r.reason[:120]) for i, r in rows.items()}
