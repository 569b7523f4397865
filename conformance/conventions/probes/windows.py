"""window_width, owned by the ledger: what the system's own sliding-window number means.

The runner is asked (its `answer`, RawCall "window") to pass the number w = 3 raw on
self-attention over 8 positions, with no causal mask (the only setting where w + 1 and
2w + 1 keys differ) and with one (quoted), and the output read against each reading of w
(conventions/probes/cache_probes.py: w, w + 1, 2w + 1, 2w - 1 keys, no window); then the pair
(2, 1), read as (left, right) or (right, left): a system that takes the pair as (left,
right) reads `left_right`.  A number accepted that masks nothing is `ignored`.
"""
from __future__ import annotations

import numpy as np

from conformance.conventions.probes import cache_probes as cp
from conformance.conventions.axes import IGNORED, Convention
from conformance.conventions.probes.probing import closest, distances, output_with
from conformance.contract.runner import RawCall
from conformance.conventions.probes.asked import NEAR, documented, unmeasured
from conformance.conventions.probes.request import ask_raw
from conformance.oracle.positional import window_allowed

W, PAIR = 3, (2, 1)


def window_width_cell(runner) -> Convention:
    plain, causal = cp.window_case(causal=False), cp.window_case(causal=True)
    what = f"probe_case {plain.id}, self-attention over {plain.inputs.query_len} positions"
    got = ask_raw(runner, plain, RawCall("window", W))
    if not got.answered:
        return unmeasured("window_width", runner, f"{what}, window {W}", got)
    doc = documented(runner, "window_width")
    cell = closest("window_width", got.output, cp.window_candidates(plain, W),
                   f"window {W}, no causal mask ({got.call})")
    texts = [cell.evidence]
    flagged = ask_raw(runner, causal, RawCall("window", W))
    if flagged.answered:
        texts.append(closest("window_width", flagged.output, cp.window_candidates(causal, W),
                             f"window {W}, causal ({flagged.call})").evidence)
    if cell.value == "no window":  # the number was accepted and masks nothing
        return Convention("window_width", IGNORED, f"{runner.name}, {what}: accepted, the "
                          f"output is the unwindowed one: {' | '.join(texts)}", **doc)
    word = cell.value
    pair = ask_raw(runner, plain, RawCall("window", PAIR))
    if pair.answered:
        pos = np.arange(plain.inputs.query_len)
        d = distances(pair.output, {
            "left_right": output_with(plain, window_allowed(pos, pos, *PAIR)),
            "right_left": output_with(plain, window_allowed(pos, pos, *PAIR[::-1]))})
        word = "left_right" if d["left_right"] < NEAR else word
        texts.append(f"window {PAIR} ({pair.call}): " + "; ".join(
            f"{k} {v:.1e}" for k, v in d.items()))
    else:
        texts.append(f"window {PAIR}: {pair.raised or pair.unasked}")
    return Convention("window_width", word, f"{runner.name}, {what}: {' | '.join(texts)}",
                      **doc)


RAW_PROBES = {"window_width": ("window", window_width_cell)}
