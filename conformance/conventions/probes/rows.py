"""fully_masked_row asked by the ledger, for a runner whose matrix rows meet no fully masked
row (keras.rope.*: its cases all carry a rotation, none masks a whole row): a probe case
whose query row 1 attends no key (mask.masked_rows [1]), with what the system applies on
every call (Runner.probe_needs: keras.rope's rotation), is asked of the runner (its
translate and run) and the row named by what it holds: `nan`, or the reading it matches
within 1e-4, the output with zero weights (`zeros`) or with uniform weights over every key
(`uniform`), else `finite_other`, every distance quoted.  A system that takes no per-row
mask, only valid key lengths (ONNX Attention-24's nonpad_kv_seqlen), is asked an item with
no valid key (key_padding [5, 0]): every query row of it attends no key.  Where matrix rows
also see such a row, they are the second witness and must agree (ledger.witnessed).
"""
from __future__ import annotations

import numpy as np

from conformance.conventions.probes.probing import distances
from conformance.contract.runner import Convention
from conformance.conventions.probes.asked import documented, said, unmeasured
from conformance.conventions.probes.forms import first_taken, forms
from conformance.oracle.reference import attention

MATCH = 1e-4  # a masked row within this of a reading is that reading


def fully_masked_row_cell(runner, own: Convention | None = None) -> Convention:
    needs = dict(getattr(runner, "probe_needs", None) or {})  # what its system always applies
    extra = {"attention": needs} if needs else {}
    rows = forms("fully-masked-row", mask={"masked_rows": [1]}, **extra)
    padded = forms("fully-padded-item", mask={"key_padding": [5, 0]}, **extra)
    # each as written, then as self-attention (forms.py: a system taking one tensor); the
    # padded item for a system taking lengths only; last, the row inside a causal mask (a
    # causal-only system, GPT-2's rows)
    rows += forms("fully-masked-row-causal", mask={"masked_rows": [1], "causal": "upper_left"},
                  **extra)[1:]
    case, got, note = first_taken(runner, rows[:2] + padded + rows[2:])
    what = f"probe_case {case.id}, " + ("query row 1 fully masked (masked_rows [1])"
                                        if case in rows else
                                        "item 1 with no valid key (key_padding [5, 0])") + note
    if not got.answered:
        return unmeasured("fully_masked_row", runner, what, got)
    exp = attention(case)
    row = got.output[exp.fully_masked]
    text = f"{runner.name}, {said(what, got)}"
    if np.isnan(row).any():
        return Convention("fully_masked_row", "nan", f"{text}: NaN",
                          **documented(runner, "fully_masked_row"))
    d = distances(row, {"zeros": exp.output_if_zeros[exp.fully_masked],
                        "uniform": exp.output_if_uniform[exp.fully_masked]})
    word = min(d, key=d.get) if min(d.values()) <= MATCH else "finite_other"
    return Convention("fully_masked_row", word, f"{text}: max |row - reading| " + "; ".join(
        f"{k} {v:.1e}" for k, v in d.items()), **documented(runner, "fully_masked_row"))
