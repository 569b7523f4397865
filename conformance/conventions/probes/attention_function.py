"""mask_fill, masked_key_nonfinite and masked_value_nonfinite asked of a module's attention
function, where its forward cannot carry the probes.

A transformers module that always rotates q and k (GPT-J, GPT-NeoX), normalises them
(Qwen3, OLMo2) or adds ALiBi cannot be asked the mask probes through its forward: the
oracle cannot part the rotation from the mask, and a module of one input tensor puts a NaN
in its key and its value at once.  Its forward hands q, k and v to one attention function,
where the mask meets the scores; a runner answering RawCall("attention_function")
(RAW_ARGUMENTS) calls that function directly with the module, on the case's projected
query, key and value (three tensors) and transformers' own mask builder.  The probes of
masks.py then read it unchanged (the fill, and a NaN in a masked key, then value, of a
cross-attention case): `FunctionAsked` presents the raw call as a runner's translate and
run.  Only cells the forward left `not_probed` are asked again; their evidence says which
call was measured.
"""
from __future__ import annotations

from dataclasses import replace

from conformance.conventions.axes import NOT_PROBED, Convention
from conformance.contract.runner import (
    NotExpressibleError, Observation, RawCall, Runner, Translation, harness_limit)
from conformance.conventions.probes.masks import mask_fill_cell, masked_nonfinite_cells

ARGUMENT = "attention_function"
AXES = ("mask_fill", "masked_key_nonfinite", "masked_value_nonfinite")


class FunctionAsked(Runner):
    """A runner's attention function seen as a runner: every case translates; `run` is the
    runner's answer to RawCall attention_function (its harness limits stay unasked)."""

    def __init__(self, runner):
        super().__init__()
        self.runner, self.name = runner, runner.name
        self.documented_fill = runner.documented_fill
        self.harness_choices = runner.harness_choices  # asked under each (choices.py)
        for choice in runner.harness_choices:
            setattr(self, choice, getattr(runner, choice))

    def with_choice(self, name, value):
        """The attention function of the runner built with harness choice `name`=`value`."""
        from conformance.conventions.probes.choices import variant

        return FunctionAsked(variant(self.runner, name, value))

    def translate(self, case):
        return Translation(f"{self.name}: the module's attention function called directly", {})

    def run(self, case, translation, data):
        try:
            out, _call = self.runner.answer(case, data, RawCall(ARGUMENT))
        except NotImplementedError as exc:
            raise NotExpressibleError(harness_limit(str(exc))) from exc
        return Observation(output=out)


def takes_function(runner) -> bool:
    return ARGUMENT in runner.answers


def through_function(runner, cells: list[Convention]) -> list[Convention]:
    """`cells` with each mask cell the forward left not_probed asked again of the module's
    attention function; where that is not_probed too, both reasons are kept."""
    todo = {c.axis for c in cells if c.axis in AXES and c.value == NOT_PROBED}
    if not todo or not takes_function(runner):
        return cells
    asked, label = FunctionAsked(runner), f"{runner.name}, its attention function"
    got = ([mask_fill_cell(asked, label)] if "mask_fill" in todo else []) + [
        c for c in masked_nonfinite_cells(asked, label) if c.axis in todo]
    new = {c.axis: c for c in got}
    out = []
    for c in cells:
        n = new.get(c.axis)
        if n is None:
            out.append(c)
        elif n.value == NOT_PROBED:
            out.append(replace(c, evidence=f"{c.evidence}; {n.evidence}"))
        else:
            out.append(replace(n, evidence=f"{n.evidence} (its forward: {c.evidence[:240]})"))
    return out
