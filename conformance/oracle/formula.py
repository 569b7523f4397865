"""The analytic parameter count of an attention configuration: arithmetic only,
no imports from the package, so the case layer (typed numbers), the reference
and the reports share one formula."""
from __future__ import annotations


def parameters(a) -> int:
    """Projection weights and, with bias, their biases, of an `Attention` (case_types)."""
    h, hkv, dk, dv = a.num_heads, a.num_kv_heads, a.qk_head_dim, a.v_head_dim
    count = h * a.query_features * dk + hkv * (a.key_features * dk + a.value_features * dv)
    count += h * dv * a.output_features
    if a.bias:
        count += h * dk + hkv * (dk + dv) + a.output_features
    return count + modern_parameters(a)


def modern_parameters(a) -> int:
    """QK-norm scales (and LayerNorm biases) and attention sinks: per head widths d_k for
    `per_head`, every head's d_k values for `all_heads`; one sink logit per head."""
    count = a.num_heads if getattr(a, "sinks", False) else 0
    norm = getattr(a, "qk_norm", None)
    if norm is not None:
        per = 2 if norm.kind == "layer" else 1
        widths = (2 * a.qk_head_dim if norm.scope == "per_head"
                  else (a.num_heads + a.num_kv_heads) * a.qk_head_dim)
        count += per * widths
    return count
