"""key_padding_polarity of a separate key-padding argument passed raw, owned by the ledger:
the runner is asked (its `answer`, RawCall "key_padding") to give a (B, S) boolean array
as it is to its system's key-padding argument (Keras: the call's `value_mask`), and the
output is named by the reading it matches: True = attends or True = blocks, or `ignored`
(the array accepted, the output the unpadded one), every distance quoted.  A runner that
folds padding into its mask instead is asked through its translate and run (padding.py).

A system whose key padding is a per-item count (onnxruntime's GroupQueryAttention
seqlens_k, ONNX Attention-24's nonpad_kv_seqlen) is asked RawCall "key_lengths": a (B,)
integer array as it is to that argument, on a right-padded self-attention case (T = S = 6,
heads of 8, which the CPU GQA kernel takes), and read on the rows of valid queries (a
padded query row is the kernel's own business): `lengths` where the valid keys of item b
are the first n_b, or the first n_b + 1 (a count minus one, as seqlens_k documents
"total_sequence_lengths - 1"; the evidence says which), `true_blocks` where the counted
keys are the masked ones, `ignored` where no key is masked.
"""
from __future__ import annotations

from conformance.conventions.axes import IGNORED, Convention
import numpy as np

from conformance.conventions.probes.probing import (
    closest, distances, nearest, output_with, probe_case, probe_mask)
from conformance.contract.runner import RawCall
from conformance.conventions.probes.asked import documented, unmeasured
from conformance.conventions.probes.request import ask_raw


def key_padding_cell(runner) -> Convention:
    case = probe_case("raw-key-padding")
    pad = probe_mask(case)[:, 0, :]  # (B, S), a pattern True and False in every item
    what = f"probe_case {case.id}: a (B, S) boolean key padding passed raw"
    got = ask_raw(runner, case, RawCall("key_padding", pad))
    if not got.answered:
        return unmeasured("key_padding_polarity", runner, what, got)
    return closest("key_padding_polarity", got.output,
                   {"true_attends": output_with(case, pad[:, None, :]),
                    "true_blocks": output_with(case, ~pad[:, None, :]),
                    IGNORED: output_with(case, None)},
                   f"{runner.name}, {what} ({got.call})",
                   **documented(runner, "key_padding_polarity"))


COUNTS = (3, 2)  # the (B,) values passed: the valid keys (or the valid keys - 1)
LENGTH = 6


def key_lengths_cell(runner) -> Convention:
    """Per-item key counts passed raw, read under both offsets (the module doc); the cell is
    the nearer offset's reading, the offset named in its evidence."""
    case = probe_case("raw-key-lengths", attention={"query_features": 16},
                      inputs={"self_attention": True, "query_len": LENGTH, "key_len": LENGTH})
    counts = np.array(COUNTS, np.int32)
    what = (f"probe_case {case.id}: (B,) key counts {list(COUNTS)} passed raw, right-padded "
            f"self-attention T = S = {LENGTH}, rows of valid queries")
    got = ask_raw(runner, case, RawCall("key_lengths", counts))
    if not got.answered:
        return unmeasured("key_padding_polarity", runner, what, got)
    measured = {}
    for extra, label in ((0, "the count is the valid length"),
                         (1, "the count is the valid length - 1")):
        valid = np.arange(LENGTH)[None, :] < (counts + extra)[:, None]  # (B, S)
        rows = valid[:, :, None]  # the valid queries of a right-padded prompt
        keys = np.broadcast_to(valid[:, None, :], (case.inputs.batch, LENGTH, LENGTH))
        measured[label] = distances(np.where(rows, got.output, 0.0), {
            w: np.where(rows, o, 0.0) for w, o in (
                ("lengths", output_with(case, keys)), ("true_blocks", output_with(case, ~keys)),
                (IGNORED, output_with(case, None)))})
    label = min(measured, key=lambda k: min(measured[k].values()))  # the nearer offset
    return nearest("key_padding_polarity", measured[label],
                   f"{runner.name}, {what} ({got.call}); {label}",
                   **documented(runner, "key_padding_polarity"))


def key_padding_polarity_cell(runner) -> Convention:
    """A separate key-padding argument: a boolean (B, S) array (key_padding), or per-item
    counts (key_lengths) where the runner passes those instead."""
    if "key_lengths" in runner.answers:
        return key_lengths_cell(runner)
    return key_padding_cell(runner)


RAW_PROBES = {"key_padding_polarity": (("key_padding", "key_lengths"),
                                       key_padding_polarity_cell)}
