"""HuggingFace Qwen2-VL's vision attention: `VisionAttention`, 2-D rope over patches with one
frequency ladder for rows and columns.

Qwen2VLVisionRotaryEmbedding (modeling_qwen2_vl.py#L195-L250) computes the inverse
frequencies of a rope head_dim / 2 wide (compute_axial_rope_parameters, #L228-L231:
spatial_dim = dim // 2) and lays them twice, the first copy turned by the patch's row and
the second by its column (recomposition_frequencies, #L244-L250: cat([freq_h, freq_w]))
before the half-split `rotate_half` (apply_rotary_pos_emb_vision, #L181-L192, in float32).
The vision transformer hands it (N, 2) (row, column) ids (#L689-L693) and VisionAttention
one (N, embed_dim) sequence of every image's patches with `cu_seqlens` marking where each
image ends; each image attends to its own patches only, with no mask and no causal flag
(#L358-L424).  The runner hands it the case's grid the same way, its batch items as images
one after another (cu_seqlens = 0, N, 2N, ...), and reads the output back per item.
VisionAttention packs q, k and v into one `qkv` nn.Linear(embed_dim, 3 embed_dim,
bias=True), rows [q | k | v] head by head (reshape(seq, 3, num_heads, -1)), with an
output `proj` nn.Linear(embed_dim, embed_dim) (bias on): a case without biases, a mask or
grouped heads is not expressible.  Its scale is head_dim**-0.5, head_dim = embed_dim //
num_heads.
"""
from __future__ import annotations

import numpy as np

from conformance.runners.hf.common import SOURCE, SizeFacts, out_in, out_proj
from conformance.runners.hf.declared import self_attention_refusals
from conformance.runners.hf.multi_axis import grid_position_ids, multi_axis_limits
from conformance.runners.hf.rotary import ROTATE_HALF, RotaryHFRunner, rope_limits, rope_theta

SRC = SOURCE + "qwen2_vl/modeling_qwen2_vl.py"
LAYOUT_WHY = ("Qwen2VLVisionRotaryEmbedding lays one ladder of a head_dim / 2 rope at the "
              f"row and again at the column ({SRC}#L228-L250); no setting alternates them")


class HFQwen2VLVision(RotaryHFRunner):
    name = "hf.qwen2_vl_vision"
    system = "transformers.models.qwen2_vl.modeling_qwen2_vl.VisionAttention"
    path = "rotary from Qwen2VLVisionRotaryEmbedding at (N, 2) patch ids, items as cu_seqlens"
    backend = "eager"
    typed_system = "torch"  # Qwen2VLVisionConfig(embed_dim, num_heads): nn.MultiheadAttention's
    description = ("Qwen2-VL's `VisionAttention` (fused qkv, 2-D rope: rows and columns on "
                   "one ladder, images packed by cu_seqlens)")
    features = RotaryHFRunner.features - {"position_offset"} | {"multi_axis_rope"}
    probe_takes = frozenset({"float64"})  # no cache, no mask: a vision encoder
    rope_source = f"{SRC}#L181"
    refusals = self_attention_refusals(
        "VisionAttention", scaling="scaling = head_dim**-0.5",
        head_dim="embed_dim // num_heads",
        fixed_bias=(True, f"qkv and proj are nn.Linear with their default bias=True "
                    f"({SRC}#L351-L352)"))
    config_fields = {"embed_dim": "query_features", "num_heads": "num_heads"}
    call_template = "VisionAttention(Qwen2VLVisionConfig({args}))"

    def model_limits(self, case):
        r, m = case.attention.rope, case.mask
        if r is not None and r.multi_axis is not None and r.multi_axis.kind != "grid_2d":
            return (f"rope.multi_axis.kind={r.multi_axis.kind}: VisionAttention takes (N, 2) "
                    "patch ids (row, column); M-RoPE's three axes are the text model's")
        if case.has_non_causal_mask or m.causal != "none" or m.window is not None:
            return ("a mask or causal flag: VisionAttention passes attention_mask=None and "
                    f"is_causal=False ({SRC}#L389-L415); an image attends to all its patches")
        if r is not None and r.multi_axis is None:
            return (f"a 1-D rope: Qwen2VLVisionRotaryEmbedding turns (N, 2) patch ids (row, "
                    f"column) only ({SRC}#L234-L242)")
        return rope_limits(case, style="half_split", why_style=f"VisionAttention: {ROTATE_HALF}",
                           partial=False, why_partial="the vision rope rotates the whole "
                           "head_dim") or multi_axis_limits(
            case, kind="grid_2d", layout="shared", module="VisionAttention", why=LAYOUT_WHY)

    def config_call(self, case):
        call, cfg = super().config_call(case)
        theta = rope_theta(case)
        call = call.replace("))", f", rope_parameters={{'rope_type': 'axial', 'rope_theta': "
                            f"{theta:g}}}))", 1)
        return call, {**cfg, "rope_theta": theta}

    def build(self, torch, plan):
        from transformers.models.qwen2_vl.configuration_qwen2_vl import Qwen2VLVisionConfig
        from transformers.models.qwen2_vl.modeling_qwen2_vl import VisionAttention

        config = Qwen2VLVisionConfig(embed_dim=plan["embed_dim"], num_heads=plan["num_heads"],
                                     rope_parameters={"rope_type": "axial",
                                                      "rope_theta": plan.get("rope_theta",
                                                                             10000.0)})
        config._attn_implementation = plan["attn_implementation"]
        return VisionAttention(config)

    def state(self, case, weights):
        w = weights
        return {"qkv.weight": np.concatenate([out_in(w.wq), out_in(w.wk), out_in(w.wv)]),
                "qkv.bias": np.concatenate([w.bq.ravel(), w.bk.ravel(), w.bv.ravel()]),
                "proj.weight": out_proj(w.wo), "proj.bias": w.bo}

    def rotary(self, torch, config):
        from transformers.models.qwen2_vl.modeling_qwen2_vl import Qwen2VLVisionRotaryEmbedding

        return Qwen2VLVisionRotaryEmbedding(config)

    def forward(self, module, x, mask, **kw):
        """The B items as B images of one packed sequence (cu_seqlens), as the vision
        transformer calls its blocks; (B, N, E) back."""
        import torch

        case = module.conformance_case
        b, n, e = x.shape
        d = e // module.num_heads
        if case.attention.rope is None:
            cos, sin = torch.ones((n, d), dtype=x.dtype), torch.zeros((n, d), dtype=x.dtype)
        else:
            with torch.no_grad():
                cos, sin = self.rotary(torch, module.config)(x, grid_position_ids(torch, case))
        pe = (cos.repeat(b, 1), sin.repeat(b, 1))
        cu = torch.arange(0, (b + 1) * n, n, dtype=torch.int32)
        out = module(x.reshape(b * n, e), cu_seqlens=cu, position_embeddings=pe, **kw)
        return out.reshape(b, n, e), None

    def notes(self, case, module):
        r = case.attention.rope
        grid = "" if r is None else (f" at (row, column) ids of a {r.multi_axis.grid[0]}x"
                                     f"{r.multi_axis.grid[1]} grid")
        return [f"Qwen2VLVisionRotaryEmbedding{grid}" if r else "rotary neutralised (cos=1, "
                "sin=0)", f"{case.inputs.batch} items packed as images: cu_seqlens"]

    sizes = SizeFacts("derived_from_width", f"{SRC}#L349", "qkv.weight",
                      "out x in (nn.Linear), rows [q | k | v]",
                      "qkv and proj are nn.Linear: (out, in); q, k, v packed in one",
                      "4 E^2 + 4 E", "probe E=8, H=2, d=4: {n}")

    def size_evidence(self, case, module, shape):
        return (f"Qwen2VLVisionConfig(embed_dim=8, num_heads=2): head_dim {module.head_dim}, "
                f"qkv.weight {shape}; no head-size field")
