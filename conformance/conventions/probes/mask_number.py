"""attn_mask_polarity where neither polarity of a boolean mask passed raw matches the oracle
(flags.py): is the boolean added to the scores as the numbers 0 / 1?

conventions/probes/probe_cells.mask_polarity reads `added_as_number` against the oracle's scores
plus 0 / 1, which leaves out what the system applies on every call (Runner.probe_needs:
QK-norm, ALiBi, a rotation): for a probe case carrying them, the system itself is the
reference.  The runner is asked the same case with the same mask as float32 0 / 1 (its
`answer`, RawCall "attn_mask"): a boolean output within 1e-3 of it is `added_as_number`
(the boolean added as a number, not used as a mask); any other output keeps the cell.
"""
from __future__ import annotations

from dataclasses import replace

import numpy as np

from conformance.conventions.axes import NOT_PROBED, Convention
from conformance.contract.runner import RawCall
from conformance.conventions.probes.asked import NEAR
from conformance.conventions.probes.request import ask_raw
from conformance.oracle.canonical import case_data

ADDED = "added_as_number"


def added_as_number(runner, case, cell: Convention, boolean: np.ndarray,
                    mask: np.ndarray) -> Convention:
    """`cell` (the boolean `mask`'s reading, output `boolean`), or `added_as_number` where
    it is not_probed and the same mask as float 0 / 1 gives the boolean's output."""
    if cell.value != NOT_PROBED:
        return cell
    got = ask_raw(runner, case, RawCall("attn_mask", mask.astype(np.float32)), case_data(case))
    if not got.answered:
        return cell
    d = float(np.max(np.abs(np.asarray(boolean, np.float64) - got.output)))
    if not d < NEAR:
        return replace(cell, evidence=f"{cell.evidence}; the same mask as float 0/1 gives "
                       f"another output ({d:.1e} from it)")
    return replace(cell, value=ADDED, evidence=f"{cell.evidence}; the suite's 0/1 reading "
                   "leaves out what the system applies on every call, so the system is its "
                   f"own reference: the boolean mask's output is {d:.1e} from its output "
                   f"with the same mask as float 0/1 ({got.call}): added to the scores")
