"""The runner of the drift test's toy package `toyattn` (tests/test_version_drift.py).

Loaded in the toy's uv env through CONFORMANCE_EXTRA_RUNNERS, so the drift command asks it
exactly as it asks a real runner: the ledger's fully_masked_row probe (rows.py) through
its translate and run.  Its arithmetic is the float64 oracle's, except the fully masked
rows, which hold what `toyattn.masked_row()` names ("uniform" or "zeros"); a release
without `masked_row` fails on the call the way a missing API does (AttributeError).
"""
from __future__ import annotations

import numpy as np

from conformance.contract.runner import Observation, Runner, Translation


class ToyRunner(Runner):
    name = "toy.attn"
    framework = "toy"
    system = "toyattn.masked_row"
    requires = ("toyattn",)

    def translate(self, case) -> Translation:
        return Translation("toyattn.masked_row()")

    def run(self, case, translation, data) -> Observation:
        import toyattn

        from conformance.oracle.reference import attention
        exp = attention(case, data)
        word = toyattn.masked_row()  # AttributeError in a release without it
        out = np.array(exp.output, np.float64)
        fill = {"uniform": exp.output_if_uniform, "zeros": exp.output_if_zeros}[word]
        out[exp.fully_masked] = fill[exp.fully_masked]
        return Observation(output=out)
