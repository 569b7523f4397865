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
    return count
