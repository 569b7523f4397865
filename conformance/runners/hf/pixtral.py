"""HuggingFace Pixtral's vision attention: `PixtralAttention`, 2-D rope over a patch grid.

PixtralVisionRotaryEmbedding (modeling_pixtral.py#L37-L95) computes the inverse
frequencies of a rope head_dim wide and keeps them as cat([inv_freq[0::2], inv_freq[1::2]])
(#L73), turns them by each patch's (row, column) ids, and lays the first half (the even
frequencies) at the row and the second half (the odd ones) at the column
(recomposition_frequencies, #L87-L95: "block-concat grids as H-W-H-W"), then the
half-split `rotate_half`.  PixtralTransformer hands it (N, 2) ids of row-major patches
(#L427-L435); the runner hands it the case's grid the same way and the module's forward
the (cos, sin), broadcast over batch and heads (`unsqueeze_dim=0`, #L200); with no
attention.rope the identity rotation (cos = 1, sin = 0).  The rotation is 2-D only: a
1-D rope case is not expressible.  PixtralAttention has no biases and no grouped heads
(q, k, v, o_proj are nn.Linear(hidden, hidden, bias=False), #L175-L178), head_dim =
hidden_size // num_attention_heads (#L167), scale head_dim**-0.5, and no causal mask of
its own (is_causal = False): a causal case goes in through attention_mask.
"""
from __future__ import annotations

from conformance.runners.hf.common import SOURCE, SizeFacts
from conformance.runners.hf.declared import self_attention_refusals
from conformance.runners.hf.multi_axis import grid_position_ids, multi_axis_limits
from conformance.runners.hf.rotary import ROTATE_HALF, RotaryHFRunner, rope_limits, rope_theta

PIXTRAL_SOURCE = SOURCE + "pixtral/modeling_pixtral.py"
LAYOUT_WHY = ("PixtralVisionRotaryEmbedding gives the row the even and the column the odd "
              f"frequencies of one ladder ({PIXTRAL_SOURCE}#L73); no setting shares them")


class HFPixtral(RotaryHFRunner):
    name = "hf.pixtral"
    system = "transformers.models.pixtral.modeling_pixtral.PixtralAttention"
    path = "rotary from PixtralVisionRotaryEmbedding at (N, 2) patch ids, or neutralised"
    backend = "eager"
    typed_system = "hf.pixtral"  # PixtralVisionConfig's own words
    harness_choices = {"attn_implementation": ("eager", "sdpa")}
    description = "`PixtralAttention` (2-D rope over patches: rows even, columns odd frequencies)"
    features = RotaryHFRunner.features - {"position_offset"} | {"multi_axis_rope"}
    probe_takes = frozenset({"float64", "masked_rows"})  # no cache: a vision encoder
    rope_source = f"{PIXTRAL_SOURCE}#L98"
    probe_attention = {"bias": False}  # no projection has a bias
    refusals = self_attention_refusals(
        "PixtralAttention", scaling="scaling = head_dim**-0.5",
        head_dim="hidden_size // num_attention_heads",
        fixed_bias=(False, f"q_proj, k_proj, v_proj and o_proj have no bias ({PIXTRAL_SOURCE}"
                    "#L175-L178)"))
    config_fields = {"hidden_size": "query_features", "num_attention_heads": "num_heads"}
    call_template = "PixtralAttention(PixtralVisionConfig({args}))"
    linear_names = ("q_proj", "k_proj", "v_proj", "o_proj")

    def model_limits(self, case):
        r = case.attention.rope
        if r is not None and r.multi_axis is None:
            return (f"a 1-D rope: PixtralVisionRotaryEmbedding turns (N, 2) patch ids (row, "
                    f"column) only ({PIXTRAL_SOURCE}#L78)")
        return rope_limits(case, style="half_split", why_style=f"PixtralAttention: {ROTATE_HALF}",
                           partial=False, why_partial="PixtralVisionRotaryEmbedding rotates the "
                           "whole head_dim") or multi_axis_limits(
            case, kind="grid_2d", layout="alternating", module="PixtralAttention",
            why=LAYOUT_WHY if r is None or r.multi_axis.kind == "grid_2d" else
            "takes (N, 2) patch ids (row, column); M-RoPE's three axes are a text model's")

    def config_call(self, case):
        call, cfg = super().config_call(case)
        theta = rope_theta(case)
        call = call.replace("))", f", rope_parameters={{'rope_type': 'axial', 'rope_theta': "
                            f"{theta:g}}}))", 1)
        return call, {**cfg, "rope_theta": theta}

    def build(self, torch, plan):
        from transformers import PixtralVisionConfig
        from transformers.models.pixtral.modeling_pixtral import PixtralAttention

        config = PixtralVisionConfig(
            hidden_size=plan["hidden_size"], num_attention_heads=plan["num_attention_heads"],
            head_dim=plan["hidden_size"] // plan["num_attention_heads"],
            attention_dropout=plan["dropout"], rope_parameters={
                "rope_type": "axial", "rope_theta": plan.get("rope_theta", 10000.0)})
        config._attn_implementation = plan["attn_implementation"]
        return PixtralAttention(config)

    def rotary(self, torch, config):
        from transformers.models.pixtral.modeling_pixtral import PixtralVisionRotaryEmbedding

        return PixtralVisionRotaryEmbedding(config)

    def embeddings(self, module, x, case, start: int = 0):
        """(cos, sin) of shape (N, head_dim): the identity without a rope, else the model's
        rotary module at the case's (row, column) patch ids."""
        import torch

        d = module.head_dim
        if case.attention.rope is None:
            n = x.shape[-2]
            return (torch.ones((n, d), dtype=x.dtype), torch.zeros((n, d), dtype=x.dtype))
        rot = self.rotary(torch, module.config)
        with torch.no_grad():
            cos, sin = rot(x, grid_position_ids(torch, case))
        return cos.to(x.dtype), sin.to(x.dtype)

    def forward(self, module, x, mask, **kw):
        pe = self.embeddings(module, x, module.conformance_case)
        return module(x, attention_mask=mask, position_embeddings=pe, **kw)[:2]

    def notes(self, case, module):
        r = case.attention.rope
        if r is None:
            return ["rotary embedding neutralised: position_embeddings = the identity rotation "
                    "(cos=1, sin=0); the vision transformer would rotate q and k by patch"]
        return [f"PixtralVisionRotaryEmbedding(rope_theta {r.base:g}) at (row, column) ids of "
                f"a {r.multi_axis.grid[0]}x{r.multi_axis.grid[1]} grid, row-major"]

    sizes = SizeFacts("derived_from_width", f"{PIXTRAL_SOURCE}#L167", "q_proj.weight",
                      "out x in (nn.Linear)",
                      "q_proj, k_proj, v_proj, o_proj are nn.Linear: (out, in)",
                      "4 E^2 (no biases)", "probe E=8, H=2, d=4: {n}")

    def size_evidence(self, case, module, shape):
        return (f"PixtralVisionConfig(hidden_size=8, num_attention_heads=2): head_dim "
                f"{module.head_dim}, q_proj.weight {shape}; no head-size field")
