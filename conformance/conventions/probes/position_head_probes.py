"""The QK-norm probe cases of qk_norm.py: a self-attention case with QK-norm in a scope, and
its data with unit norm scales, so that the scope alone decides the output.

Only the case, the oracle and the contract are imported: systems stay in the runners.
"""
from __future__ import annotations

from dataclasses import replace

import numpy as np

from conformance.case.loader import Case
from conformance.conventions.probes.probing import probe_case
from conformance.oracle.canonical import CaseData, case_data


def qk_norm_case(scope: str, kind: str = "rms", head_dim: int = 8) -> Case:
    return probe_case(f"qk-norm-{scope}", attention={
        "num_heads": 2, "query_features": 2 * head_dim,
        "qk_norm": {"kind": kind, "scope": scope}},
        inputs={"self_attention": True, "query_len": 5})


def unit_norm_data(case: Case) -> CaseData:
    """The case's data with QK-norm scales 1 (biases 0): the scope alone then decides the
    output, so readings under either scope are comparable."""
    data = case_data(case)
    w = data.weights

    def ones(x, fill=1.0):
        return None if x is None else np.full_like(x, fill)

    return replace(data, weights=replace(w, q_norm=ones(w.q_norm), k_norm=ones(w.k_norm),
                                         q_norm_bias=ones(w.q_norm_bias, 0.0),
                                         k_norm_bias=ones(w.k_norm_bias, 0.0)))
