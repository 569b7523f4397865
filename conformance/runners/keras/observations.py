"""What the Keras layers report of their API for the ledger, with no oracle and no reading
of an output against one: a kernel's shape (the size arguments, which the ledger confirms
by asking: sizes.confirmed), the batch-first layout its documentation states (confirmed
alike).  The ledger asks the rest (conventions/probes/: the runners' `probe_takes` and
`answers`; a float64 input, a 2-D input and the scores under dropout are
answers.native_call's).  Keras is imported inside the functions only.
"""
from __future__ import annotations

from conformance.contract.runner import Convention
from conformance.runners._export.keras_mha import base_case
from conformance.runners.keras.calls import Probe

DOCS = "https://keras.io/api/layers/attention_layers/multi_head_attention/"


def _sizes(p: Probe, case) -> list[Convention]:
    layer = p.layer(case)
    shape = next(tuple(v.shape) for v in layer.weights if v.path.endswith("query/kernel"))
    plan = ", ".join(f"{k}={v}" for k, v in p.plan(case).items())
    return [Convention("size_arguments", "per_head",
                       f"{p.cls.__name__}({plan}) on 8 features: query/kernel {shape}, i.e. 3 "
                       "per head (not 8 / 2 = 4, not a total of 3)", "per_head", DOCS),
            Convention("input_layout", "batch_first", f"{p.what}: query (B, T, dim), value "
                       "(B, S, dim), batch first (its documentation: 'Query tensor of shape "
                       "(B, T, dim)')", "batch_first", DOCS)]


def layer_facts(runner) -> list[Convention]:
    """The API facts of one Keras layer runner's class and path, in its worker."""
    p, case = Probe(runner), base_case()
    return _sizes(p, case)

