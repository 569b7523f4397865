"""rope_partial through a system's own partial-rotary setting, owned by the ledger.

For a runner whose `answers` lists "partial_rotary" (RAW_ARGUMENTS: a setting such as a
config's partial_rotary_factor, which the runner's translate does not take, e.g. the HF
Llama family): a full-rotary probe case (head dim 8, in the pairing the system always
applies) is asked as it translates (the run without the setting), then with the setting
passed raw at 0.5 (Runner.answer), and the second output read against the oracle with 4
of the 8 dimensions rotated (`supported`) and with all 8 (`ignored`, only where the
output did not move from the run without it); the system's error is `refused`, quoted;
an output matching neither reading is `not_probed`, every distance quoted.
"""
from __future__ import annotations

from dataclasses import replace

import numpy as np

from conformance.conventions.axes import IGNORED, NOT_PROBED, Convention
from conformance.conventions.probes.probing import distances
from conformance.contract.runner import RawCall
from conformance.conventions.probes.asked import NEAR, documented, said, unmeasured
from conformance.conventions.probes.forms import first_taken
from conformance.conventions.probes.needs import needed_forms
from conformance.conventions.probes.positions import HEAD8, native_style
from conformance.conventions.probes.request import ask_raw
from conformance.oracle.reference import attention

FACTOR = 0.5  # of head dim 8: 4 dimensions rotate


def rope_partial_setting_cell(runner) -> Convention:
    case, plain, note = first_taken(runner, needed_forms(
        runner, "rope-partial-setting", raw=True, attention={**HEAD8, "rope": {
            "style": native_style(runner)}}, inputs={"position_offset": 3}))
    what = (f"probe_case {case.id}, head dim 8, the partial-rotary setting {FACTOR:g} "
            f"(supported: 4 rotate; ignored: all 8 rotate){note}")
    if not plain.answered:
        return unmeasured("rope_partial", runner, f"{what}: the run without it", plain)
    got = ask_raw(runner, case, RawCall("partial_rotary", FACTOR))
    if not got.answered:
        return unmeasured("rope_partial", runner, what, got)
    a = case.attention
    partial = replace(case, attention=replace(a, rope=replace(a.rope, rotary_dim=4)))
    d = distances(got.output, {"supported": attention(partial).output,
                               IGNORED: attention(case).output})
    moved = float(np.max(np.abs(got.output - plain.output)))
    figures = (f"output {moved:.1e} from the run without it, {d['supported']:.1e} from the "
               f"partial-rotary oracle, {d[IGNORED]:.1e} from the full-rotary one")
    if d["supported"] < NEAR:
        word = "supported"
    elif d[IGNORED] < NEAR and moved < NEAR:
        word, figures = IGNORED, f"accepted: {figures}"
    else:
        word, figures = NOT_PROBED, f"{figures}; neither reading matches"
    return Convention("rope_partial", word, f"{runner.name}, {said(what, got)}: {figures}",
                      **({} if word == NOT_PROBED else documented(runner, "rope_partial")))


RAW_PROBES = {"rope_partial": ("partial_rotary", rope_partial_setting_cell)}
