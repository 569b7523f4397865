"""What the Keras layers report of their API for the ledger, with no oracle and no reading
of an output against one: a kernel's shape (the size arguments, which the ledger confirms
by asking: sizes.confirmed), the batch-first layout its documentation states (confirmed
alike), the row sums of the attention scores returned under dropout, what a 2-D input and
float64 inputs into a float32 layer give (the output's shape and dtype, or the error
text).  The ledger asks the rest (conventions/probes/: the runners' `probe_takes` and
`answers`).  Keras is imported inside the functions only.
"""
from __future__ import annotations

from dataclasses import replace

import numpy as np

from conformance.contract.axes import NA, REFUSED
from conformance.contract.runner import Convention
from conformance.oracle.canonical import case_data
from conformance.runners._export.keras_mha import ANSI, base_case
from conformance.runners.keras.calls import Probe

DOCS = "https://keras.io/api/layers/attention_layers/multi_head_attention/"
RATE = 0.5  # the dropout rate of the returned-scores run


def error_text(exc: BaseException) -> str:
    """The system's message, one line, without the terminal colour codes Keras puts in."""
    return ANSI.sub("", " ".join(f"{type(exc).__name__}: {exc}".split()))[:300]


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


def _weights_dropout(p: Probe, case) -> Convention:
    if not p.scores:
        return Convention("weights_dropout", NA, f"{p.what} returns no weights "
                          "(return_attention_scores=False), so none carry dropout")
    p.keras.utils.set_random_seed(0)
    data = case_data(case)
    _, w, _ = p.call(p.layer(case, data, dropout=RATE), data, training=True)
    sums = np.asarray(w, np.float64).sum(-1)
    dev = float(np.abs(sums - 1).max())
    return Convention("weights_dropout", "post_dropout" if dev > 1e-6 else "pre_dropout",
                      f"{p.what}, dropout={RATE}, training=True: the returned attention "
                      f"scores' row sums span {sums.min():.3f}..{sums.max():.3f} (max |sum - 1| "
                      f"{dev:.1e}: dropout applied to what multiplies the values only)")


def _dtypes(p: Probe, case) -> list[Convention]:
    data32 = case_data(case)
    mixed = replace(data32, inputs=case_data(base_case("float64")).inputs)
    what = f"float64 inputs into {p.what}, dtype='float32'"
    try:
        held = p.call(p.layer(case, data32), mixed, dtype=False)[2]
        cells = [Convention("mixed_dtype", "promoted" if held == "float64" else
                            "cast_to_layer", f"{what}: output {held}")]
    except Exception as exc:  # the system's refusal is the observation
        cells = [Convention("mixed_dtype", REFUSED, f"{what}: {error_text(exc)}")]
    what = f"{p.what} on 2-D (T=3, E=8) inputs (a fresh layer built for them)"
    try:
        out = p.call(p.layer(case, data32, rank=2), data32, rank=2)[0]
        cells.append(Convention("unbatched_input", "accepted", f"{what}: output {out.shape}"))
    except Exception as exc:  # the system's refusal is the observation
        cells.append(Convention("unbatched_input", REFUSED, f"{what}: {error_text(exc)}"))
    return cells


def layer_facts(runner) -> list[Convention]:
    """The API facts of one Keras layer runner's class and path, in its worker."""
    p, case = Probe(runner), base_case()
    return _sizes(p, case) + [_weights_dropout(p, case)] + _dtypes(p, case)

