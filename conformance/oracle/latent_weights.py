"""The canonical weights of an MLA case, drawn by canonical.py after every other array
(so no other case's arrays move); oracle/latent_attention.py computes with them.
"""
from __future__ import annotations

import numpy as np

# the canonical arrays of an MLA case (canonical.py CanonicalWeights, drawn last)
NAMES = ("mla_q_down", "mla_q_norm", "mla_q_up", "mla_kv_down", "mla_kv_norm", "mla_k_rope",
         "mla_k_up", "mla_v_up")


def draw(a, rng: np.random.Generator) -> dict:
    """The canonical MLA weights of Attention `a` (in x out, per head where per head),
    each scaled by 1/sqrt(fan_in); RMSNorm scales near 1.  The plain k and v projections
    are dropped (None), and the plain q too where a query latent replaces it."""
    m, h, e, ek = a.mla, a.num_heads, a.query_features, a.key_features

    def normal(shape, fan_in):
        return rng.standard_normal(shape) / np.sqrt(fan_in)

    out: dict = {"wk": None, "wv": None}
    if m.q_lora_rank is not None:
        out.update(wq=None, mla_q_down=normal((e, m.q_lora_rank), e),
                   mla_q_norm=1 + 0.1 * rng.standard_normal(m.q_lora_rank),
                   mla_q_up=normal((h, m.q_lora_rank, a.qk_head_dim), m.q_lora_rank))
    out.update(mla_kv_down=normal((ek, m.kv_lora_rank), ek),
               mla_kv_norm=1 + 0.1 * rng.standard_normal(m.kv_lora_rank),
               mla_k_rope=normal((ek, m.qk_rope_head_dim), ek),
               mla_k_up=normal((h, m.kv_lora_rank, m.qk_nope_head_dim), m.kv_lora_rank),
               mla_v_up=normal((h, m.kv_lora_rank, a.v_head_dim), m.kv_lora_rank))
    return out
