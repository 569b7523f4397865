"""key_padding_polarity of a separate key-padding argument passed raw, owned by the ledger:
the runner is asked (its `answer`, RawCall "key_padding") to give a (B, S) boolean array
as it is to its system's key-padding argument (Keras: the call's `value_mask`), and the
output is named by the reading it matches: True = attends or True = blocks, or `ignored`
(the array accepted, the output the unpadded one), every distance quoted.  A runner that
folds padding into its mask instead is asked through its translate and run (padding.py).
"""
from __future__ import annotations

from conformance.contract.axes import IGNORED
from conformance.contract.probing import closest, output_with, probe_case, probe_mask
from conformance.contract.runner import Convention, RawCall
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


RAW_PROBES = {"key_padding_polarity": ("key_padding", key_padding_cell)}
