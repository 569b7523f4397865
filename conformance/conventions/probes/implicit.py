"""implicit_mask, owned by the ledger: does padding the system marks on its own (Keras:
`Embedding(mask_zero=True)` attaching a mask to the tensors it returns) reach the
attention, with no mask argument passed?

The runner is asked (its `answer`, RawCall "marked_padding") to run self-attention over the
probe case's query with the positions `value` ((B, T) boolean, False = padding) marked as
padding the system's own way; the padded positions' features are zeros (what an embedding
row 0 of zeros gives).  The output is read on the unpadded query rows against the oracle
with the padding applied to keys and queries (`propagated`) and with no mask (`none`),
every distance quoted.
"""
from __future__ import annotations

from dataclasses import replace

import numpy as np

from conformance.conventions.probes.probing import closest, output_with, probe_case
from conformance.contract.runner import RawCall
from conformance.conventions.axes import Convention
from conformance.conventions.probes.asked import documented, unmeasured
from conformance.conventions.probes.request import ask_raw
from conformance.oracle.canonical import case_data


def padded_case():
    """Self-attention over 4 positions (head dim 3 of 2 heads on 8 features), the last two
    positions of item 0 and the last one of item 1 padding; the data with them zeroed."""
    case = probe_case("implicit-mask", attention={"qk_head_dim": 3, "v_head_dim": 3},
                      inputs={"self_attention": True, "query_len": 4, "key_len": 4})
    data = case_data(case)
    b, t, _ = data.inputs.query.shape
    valid = np.ones((b, t), bool)
    valid[0, -2:], valid[1, -1:] = False, False
    x = np.where(valid[:, :, None], data.inputs.query, 0.0)
    return case, replace(data, inputs=replace(data.inputs, query=x, key=x, value=x)), valid


def implicit_mask_cell(runner) -> Convention:
    case, data, valid = padded_case()
    what = (f"probe_case {case.id}: self-attention with {int((~valid).sum())} of "
            f"{valid.size} positions marked as padding the system's own way, no mask argument")
    got = ask_raw(runner, case, RawCall("marked_padding", valid), data)
    if not got.answered:
        return unmeasured("implicit_mask", runner, what, got)
    both = valid[:, :, None] & valid[:, None, :]
    rows = valid  # compared on the unpadded query rows (a padded row attends nothing)
    return closest("implicit_mask", np.where(rows[:, :, None], got.output, 0.0),
                   {"propagated": np.where(rows[:, :, None], output_with(case, both, data), 0.0),
                    "none": np.where(rows[:, :, None], output_with(case, None, data), 0.0)},
                   f"{runner.name}, {what} ({got.call}), compared on the unpadded query rows",
                   **documented(runner, "implicit_mask"))


RAW_PROBES = {"implicit_mask": ("marked_padding", implicit_mask_cell)}
