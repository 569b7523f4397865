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
A program that stores its weights in a narrower type than it computes in (LiteRT's float16
weight conversion: Answer.weights_dtype) is read against the oracle on the weights it holds
(oracle/stored.py), so their rounding (2e-4 here) is not taken for the row's reading.  Where
the zeros and uniform readings lie within the probe's resolution of each other
(resolution.alike), the cell names the tie, never the nearest.
"""
from __future__ import annotations

import numpy as np

from conformance.conventions.probes.probing import distances
from conformance.conventions.axes import Convention
from conformance.conventions.probes.choices import under_choices
from conformance.conventions.probes.asked import documented, said, unmeasured
from conformance.conventions.probes.forms import first_taken, forms
from conformance.conventions.probes.resolution import alike, tie_cell
from conformance.oracle.canonical import case_data
from conformance.oracle.reference import attention
from conformance.oracle.stored import as_stored, rounds

MATCH = 1e-4  # a masked row within this of a reading is that reading


def fully_masked_row_cell(runner, own: Convention | None = None) -> Convention:
    """The fully masked row, under each harness choice the runner names (choices.py): HF's
    eager function adds the finfo.min mask its builder makes (uniform weights), its sdpa
    function hands a boolean to torch's SDPA (zero weights)."""
    return under_choices(runner, _row_cell)


def _row_cell(runner) -> Convention:
    """fully_masked_row_cell under the runner's own choices."""
    needs = dict(runner.probe_needs)  # what its system always applies
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
    exp = attention(case, as_stored(case_data(case), got.weights_dtype))
    row = got.output[exp.fully_masked]
    text = f"{runner.name}, {said(what, got)}" + (
        f"; against the oracle on the weights as the program stores them "
        f"({got.weights_dtype})" if rounds(got.weights_dtype) else "")
    doc = documented(runner, "fully_masked_row")
    if np.isnan(row).any():
        return Convention("fully_masked_row", "nan", f"{text}: NaN", **doc)
    cands = {"zeros": exp.output_if_zeros[exp.fully_masked],
             "uniform": exp.output_if_uniform[exp.fully_masked]}
    d = distances(row, cands)
    if min(d.values()) > MATCH:
        return Convention("fully_masked_row", "finite_other", f"{text}: max |row - reading| "
                          + "; ".join(f"{k} {v:.1e}" for k, v in d.items()), **doc)
    ties = alike(d, cands)
    if len(ties) > 1:
        return tie_cell("fully_masked_row", ties, d, text, **doc)
    return Convention("fully_masked_row", ties[0], f"{text}: max |row - reading| " + "; ".join(
        f"{k} {v:.1e}" for k, v in d.items()), **doc)
