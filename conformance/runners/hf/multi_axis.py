"""What the HF runners of multi-axis rotary embeddings share: position ids with an axis
dimension, built from attention.rope.multi_axis as each model builds them, handed to the
model's own rotary module, and the limits of each system's layout.

Qwen2VLTextModel and Qwen3VLTextModel hand their rotary module (3, B, T) position ids
(t, h, w rows; a text-only (B, T) is expanded to three equal rows: modeling_qwen2_vl.py
Qwen2VLTextModel.forward, `position_ids[None, ...].expand(3, ...)`); Pixtral's vision
transformer hands (N, 2) (row, column) ids of its patches
(modeling_pixtral.py PixtralTransformer: stack([hpos_ids, wpos_ids], dim=-1)).  The runner
passes the case's per-axis positions there and nothing else: which pair takes which axis
is the module's.  torch is imported inside functions only.
"""
from __future__ import annotations

MROPE_WHY = ("takes (3, B, T) position ids and an mrope_section; a 2-D patch grid is its "
             "vision tower's")


def multi_axis_limits(case, *, kind: str, layout: str, module: str, why: str) -> str | None:
    """The case's multi-axis rope against a module computing `kind` in one `layout`; `why`
    quotes the source that fixes the layout."""
    r = case.attention.rope
    m = None if r is None else r.multi_axis
    if m is None:
        return None
    if m.kind != kind:
        return f"rope.multi_axis.kind={m.kind}: {module} {why}"
    if m.layout != layout:
        return f"rope.multi_axis.layout={m.layout}: {why}"
    return None


def mrope_section(case) -> list[int]:
    """The config's mrope_section: the case's sections, or (a 1-D rope, whose three rows
    are equal and any split gives the same angles) every pair on t."""
    r = case.attention.rope
    if r is not None and r.multi_axis is not None:
        return list(r.multi_axis.sections)
    d = case.attention.qk_head_dim if r is None else r.rotary_dim
    return [d // 2, 0, 0]


def mrope_position_ids(torch, case, batch: int, length: int, start: int = 0):
    """(3, B, L) position ids of the L tokens after `start`: the case's t, h, w rows (each
    item's own where it gives them), or the 1-D positions (position_offset + t) on all three,
    as the text model expands them."""
    m = case.attention.rope.multi_axis
    if m is None:
        p0 = case.inputs.position_offset + start
        return torch.arange(p0, p0 + length).view(1, 1, -1).expand(3, batch, -1)
    if m.items is not None:  # each item its own rows: (B, 3, T) -> (3, B, T)
        return torch.tensor(m.items).permute(1, 0, 2)[:, :, start:start + length]
    rows = torch.tensor(m.positions)[:, start:start + length]
    return rows[:, None, :].expand(3, batch, -1)


def grid_position_ids(torch, case):
    """(N, 2) (row, column) of each patch, in the case's row-major order."""
    m = case.attention.rope.multi_axis
    return torch.tensor(m.positions).T.contiguous()


class MroPERotary:
    """An HF runner mixin: the rotation at (3, B, T) position ids from the model's rotary
    module (Qwen2VLRotaryEmbedding, Qwen3VLTextRotaryEmbedding)."""

    def embeddings(self, module, x, case, start: int = 0):
        import torch

        if case.attention.rope is None:
            return super().embeddings(module, x, case, start)  # the identity rotation
        rot = self.rotary(torch, module.config)
        ids = mrope_position_ids(torch, case, x.shape[0] if x.dim() == 3 else 1, x.shape[-2],
                                 start)
        with torch.no_grad():
            cos, sin = rot(x, ids)
        return cos.to(x.dtype), sin.to(x.dtype)

    def multi_axis_notes(self, case) -> list[str]:
        r = case.attention.rope
        if r is None or r.multi_axis is None:
            return []
        m = r.multi_axis
        return [f"rope_parameters mrope_section {list(m.sections)}; position_ids (3, B, T) = "
                f"the case's t, h, w rows {[list(p) for p in m.positions]}"]
