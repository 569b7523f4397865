"""attention.mla: multi-head latent attention (DeepSeek-V2, arXiv 2405.04434, section
2.1; DeepSeek-V3), read and validated.

    attention.mla: {q_lora_rank: r_q or none, kv_lora_rank: r_kv, qk_rope_head_dim: d_r
                    (default rope.rotary_dim), qk_nope_head_dim: d_n (default qk_head_dim -
                    d_r), rope_interleave: true | false (default: rope.style)}

The hidden states x are compressed to a key/value latent c = RMSNorm(x W_dkv) of width
r_kv and, with q_lora_rank, a query latent RMSNorm(x W_dq) of width r_q (none: one plain q
projection).  MLA is a self-attention (DeepSeek's models); a cross-attention case takes
the latent and the rope key from its key input (keys and values both come from the one
latent: its value input is not read), so the ledger's probe cases, written as
cross-attention first, stay valid cases.  Each head's query is [nope | rope], d_n + d_r =
attention.qk_head_dim; its key is [c W_uk[h] | k_pe] with k_pe = RoPE(x W_kr), ONE head of
width d_r shared by every head; its value c W_uv[h] of width attention.v_head_dim.  The
rotated slice is the LAST d_r dims of the query and key (transformers'
DeepseekV3Attention: torch.split(q, [qk_nope_head_dim, qk_rope_head_dim])).  attention.rope
gives its base, scaling and pairing: rotary_dim must be d_r, and rope_interleave (default:
rope.style is interleaved) must agree with rope.style.  The two RMSNorms take eps 1e-6 (the
DeepseekV3RMSNorm default neither transformers nor mlx-lm overrides for them).
"""
from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Mapping

from conformance.case.bounded import short

NORM_EPS = 1e-6  # q_a_layernorm and kv_a_layernorm (DeepseekV3RMSNorm's default)
FIELDS = {"q_lora_rank", "kv_lora_rank", "qk_rope_head_dim", "qk_nope_head_dim",
          "rope_interleave"}
REQUIRED = {"kv_lora_rank"}


@dataclass(frozen=True)
class LatentAttention:
    """The widths of MLA (the module docstring); qk_head_dim and v_head_dim are the
    attention's own."""

    q_lora_rank: int | None  # r_q: the query latent's width; None: a plain q projection
    kv_lora_rank: int  # r_kv: the key/value latent's width
    qk_rope_head_dim: int  # d_r: the rotated slice, the LAST d_r dims of q and k
    qk_nope_head_dim: int  # d_n: the unrotated slice, the first d_n dims (0: none)
    # pairs (2i, 2i + 1) rotate (True) or (i, i + d_r / 2): the loader holds it to
    # attention.rope.style, which the oracle and the runners read
    rope_interleave: bool



def mla_parameter_count(a) -> int:
    """MLA's projections in place of the plain q, k, v projections (Attention `a`, mla
    set): W_dq, its norm and W_uq (or one W_q), W_dkv and W_kr (kv_a_proj_with_mqa, on the
    key input), the kv norm, W_uk and W_uv (kv_b_proj); the output projection as usual."""
    m, h, e = a.mla, a.num_heads, a.query_features
    q = (h * e * a.qk_head_dim if m.q_lora_rank is None
         else e * m.q_lora_rank + m.q_lora_rank + m.q_lora_rank * h * a.qk_head_dim)
    kv = a.key_features * (m.kv_lora_rank + m.qk_rope_head_dim) + m.kv_lora_rank
    return q + kv + m.kv_lora_rank * h * (m.qk_nope_head_dim + a.v_head_dim)


def plain_qkv_count(a) -> int:
    """The plain q, k, v projection weights parameter_count holds (MLA replaces them)."""
    return (a.num_heads * a.query_features * a.qk_head_dim
            + a.num_kv_heads * (a.key_features * a.qk_head_dim + a.value_features * a.v_head_dim))


def _mapping(r, raw) -> Mapping:
    at = "attention.mla"
    if not isinstance(raw, Mapping):
        raise r.fail(at, "must be a mapping {q_lora_rank, kv_lora_rank, qk_rope_head_dim, "
                     f"qk_nope_head_dim, rope_interleave}}, got {short(raw)}")
    unknown = sorted(set(raw) - FIELDS)
    if unknown:
        raise r.fail(f"{at}.{unknown[0]}", f"unknown field; valid: {sorted(FIELDS)}")
    missing = sorted(REQUIRED - set(raw))
    if missing:
        raise r.fail(f"{at}.{missing[0]}", "is required (an integer: the latent's width)")
    return raw


def _against_attention(r, m: LatentAttention, att, inp) -> None:
    """The widths against the attention's, and what MLA's module has no place for."""
    if m.qk_nope_head_dim + m.qk_rope_head_dim != att.qk_head_dim:
        raise r.fail("attention.mla.qk_nope_head_dim", "qk_nope_head_dim + qk_rope_head_dim "
                     f"({m.qk_nope_head_dim} + {m.qk_rope_head_dim}) must equal "
                     f"attention.qk_head_dim ({att.qk_head_dim}): each head's query and key "
                     "are [nope | rope]")
    if m.qk_rope_head_dim % 2:
        raise r.fail("attention.mla.qk_rope_head_dim", "must be even: pairs of dims rotate, "
                     f"got {m.qk_rope_head_dim}")
    if att.num_kv_heads != att.num_heads:
        raise r.fail("attention.num_kv_heads", "MLA's kv_b_proj gives every query head its "
                     f"own key and value: leave num_kv_heads out or set it to num_heads "
                     f"({att.num_heads}), got {att.num_kv_heads}")
    if att.bias:
        raise r.fail("attention.bias", "MLA cases take bias: false (q_b_proj and kv_b_proj "
                     "never carry one; the suite draws no bias for the latent projections)")


def _against_rope(r, m: LatentAttention, att, interleave) -> bool:
    rope = att.rope
    if rope.rotary_dim != m.qk_rope_head_dim:
        raise r.fail("attention.rope.rotary_dim", f"must equal attention.mla.qk_rope_head_dim "
                     f"({m.qk_rope_head_dim}): MLA rotates its rope slice whole, got "
                     f"{rope.rotary_dim}")
    styled = rope.style == "interleaved"
    if interleave is not None and interleave != styled:
        raise r.fail("attention.mla.rope_interleave", f"rope_interleave {interleave} "
                     f"disagrees with attention.rope.style {rope.style}: leave it out, or set "
                     "style interleaved for true and half_split for false")
    return styled


def read(r, att, inp, mask):
    """`att` with attention.mla read and validated against its widths, rope and inputs."""
    s = _mapping(r, r.section("attention")["mla"])
    at = "attention.mla"
    if att.rope is None:
        raise r.fail("attention.rope", "MLA rotates the last qk_rope_head_dim dims of q and "
                     "k: give attention.rope {style, rotary_dim: qk_rope_head_dim, base}")
    q_rank = (None if s.get("q_lora_rank") is None
              else r.integer(s, "q_lora_rank", f"{at}.q_lora_rank"))
    interleave = s.get("rope_interleave")
    if interleave is not None:
        interleave = r.boolean(s, "rope_interleave", f"{at}.rope_interleave", True)
    d_r = r.integer(s, "qk_rope_head_dim", f"{at}.qk_rope_head_dim", att.rope.rotary_dim,
                    minimum=2)
    m = LatentAttention(q_rank, r.integer(s, "kv_lora_rank", f"{at}.kv_lora_rank"), d_r,
                        r.integer(s, "qk_nope_head_dim", f"{at}.qk_nope_head_dim",
                                  max(att.qk_head_dim - d_r, 0), minimum=0), False)
    _against_attention(r, m, att, inp)
    m = replace(m, rope_interleave=_against_rope(r, m, att, interleave))
    return replace(att, mla=m), mask
