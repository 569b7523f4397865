"""What the Keras layers read of their own API for the ledger (contract/api_facts.py), with
no oracle and no reading of an output against one: a kernel's shape under the size
arguments (which the ledger confirms by asking: sizes.confirmed), and the batch-first
layout of the call's query (the shape of its output, read; confirmed alike).  The ledger
asks the rest (conventions/probes/: the runners' `probe_takes` and `answers`; a float64
input, a 2-D input and the scores under dropout are answers.native_call's).  What the
Keras documentation states is data (the `documented:` section of each expectations
file).  Keras is imported inside the functions only.
"""
from __future__ import annotations

from conformance.contract.api_facts import ApiFact
from conformance.oracle.canonical import case_data
from conformance.runners._export.keras_mha import base_case
from conformance.runners.keras.calls import Probe


def _source(cls) -> str:
    """The installed file that defines `cls` and its call's docstring, inside its package."""
    return cls.__module__.replace(".", "/") + ".py"


def _sizes(p: Probe, case) -> list[ApiFact]:
    data = case_data(case)
    layer = p.layer(case, data)
    shape = next(tuple(v.shape) for v in layer.weights if v.path.endswith("query/kernel"))
    plan = ", ".join(f"{k}={v}" for k, v in p.plan(case).items())
    out = p.call(layer, data)[0]
    e, heads = case.attention.query_features, shape[-2]
    return [ApiFact("head_size_from", "per_head",
                    f"{p.cls.__name__}({plan}) on {e} features: query/kernel {shape}, i.e. "
                    f"{shape[-1]} per head (not {e} / {heads} = {e // heads}, not a total "
                    f"of {shape[-1]})"),
            ApiFact("tensor_layout", "batch_first",
                    f"{p.what}: query {data.inputs.query.shape} (B, T, dim) -> output "
                    f"{out.shape}, batch first, no layout argument (its call's docstring, "
                    f"{_source(p.cls)}: a query of shape (B, T, dim) or (batch_dim, "
                    "target_seq_len, feature_dim))")]


def layer_facts(runner) -> list[ApiFact]:
    """The API facts of one Keras layer runner's class and path, in its worker."""
    p, case = Probe(runner), base_case()
    return _sizes(p, case)
