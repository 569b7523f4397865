"""Axes of the call's shape, owned by the ledger: argument_order (which positional argument
is the key, which the value), size_arguments (what the size arguments count) and
input_layout (the order of the input's axes).

argument_order is measured: a probe case with distinct key and value arrays is asked of the
runner (its translate and run: it passes them as its system takes them) and the output is
named by the reading it matches, the oracle (query_key_value) or the oracle with key and
value swapped (query_value_key).  size_arguments and input_layout are a reading of the
system's API its runner reports (a weight's shape, a docstring's layout: its own cell, an
observation with no oracle), confirmed here: the probe case, whose sizes tell the readings
apart (head dim 3 of 2 heads over 8 features: 6 in total, 3 per head, 8 / 2 = 4 derived;
B 2, T 3, S 5), is asked and its output must match the oracle; where it does not, the
reading is not the system's (not_probed, the distance quoted).  A system that cannot
express a probe case as written is asked its other forms (forms.py: self-attention, the
head size derived from the width); a reading `derived_from_width` is confirmed by the
written sizes being inexpressible and the width-derived twin matching (derived_width_cell).
"""
from __future__ import annotations

from dataclasses import replace

from conformance.conventions.axes import NOT_PROBED, Convention
from conformance.conventions.probes.probing import closest, distances, output_with, probe_case
from conformance.conventions.probes.asked import NEAR, documented, said, unmeasured
from conformance.conventions.probes.forms import first_taken, forms
from conformance.conventions.probes.request import ask
from conformance.oracle.canonical import case_data

SIZES_CASE = {"attention": {"qk_head_dim": 3, "v_head_dim": 3}}  # 6 in total, 3 per head
DERIVED = "derived_from_width"  # no head-size argument: d_k = E / H (derived_width_cell)


def argument_order_cell(runner, own: Convention | None = None) -> Convention:
    case = probe_case("argument-order")
    what = f"probe_case {case.id}, distinct key and value arrays"
    got = ask(runner, case)
    if not got.answered:
        return unmeasured("argument_order", runner, what, got)
    data = case_data(case)
    swapped = replace(data, inputs=replace(data.inputs, key=data.inputs.value,
                                           value=data.inputs.key))
    return closest("argument_order", got.output,
                   {"query_key_value": output_with(case, None),
                    "query_value_key": output_with(case, None, swapped)},
                   f"{runner.name}, {said(what, got)}", **documented(runner, "argument_order"))


def confirmed(axis: str, runner, own: Convention | None, case, *more) -> Convention:
    """The runner's own reading `own` of its API for `axis`, with the probe case asked (or
    the first of its other forms `more` the runner can express: forms.first_taken): kept
    (the distance added) where the output matches the oracle, else `not_probed`."""
    if own is None:
        return Convention(axis, NOT_PROBED, f"{runner.name} reports no reading of its API "
                          f"for {axis}")
    case, got, note = first_taken(runner, (case, *more))
    what = f"probe_case {case.id}{note}"
    if not got.answered:
        return unmeasured(axis, runner, f"{own.value} ({own.evidence}); {what}", got)
    d = distances(got.output, {"oracle": output_with(case, None)})["oracle"]
    text = f"{own.evidence}; {said(what, got)}: output {d:.1e} from the oracle"
    if not d < NEAR:
        return Convention(axis, NOT_PROBED, f"{text}: the reading {own.value!r} is not "
                          "what the system computes")
    return replace(own, evidence=text)


def size_arguments_cell(runner, own: Convention | None = None) -> Convention:
    if own is not None and own.value == DERIVED:
        return derived_width_cell(runner, own)
    return confirmed("size_arguments", runner, own, probe_case("size-arguments", **SIZES_CASE))


def derived_width_cell(runner, own: Convention) -> Convention:
    """A reading `derived_from_width` (no head-size argument: d_k = E / H): the probe case
    of 3 per head over 8 features must be one the system cannot express (a runner that
    takes it sets a head size apart from the width: the reading is not the system's), and
    its twin with the width that derives 3 (6 features over 2 heads; as self-attention for
    a path taking only that) must give the oracle's output."""
    written = probe_case("size-arguments", **SIZES_CASE)
    got = ask(runner, written)
    what = f"probe_case {written.id} (3 per head over 8 features)"
    if got.answered:
        return Convention("size_arguments", NOT_PROBED, f"{own.evidence}; {runner.name}, "
                          f"{said(what, got)}: taken, so a head size is set apart from the "
                          f"width: the reading {DERIVED!r} is not what the system computes")
    if not got.inexpressible:
        return unmeasured("size_arguments", runner, f"{own.value} ({own.evidence}); {what}",
                          got)
    twin = forms("size-arguments", attention={"query_features": 6})
    cell = confirmed("size_arguments", runner, own, *twin)
    if cell.value != DERIVED:
        return cell
    return replace(cell, evidence=f"{cell.evidence}; {what} not expressible: "
                   f"{got.inexpressible}")


def input_layout_cell(runner, own: Convention | None = None) -> Convention:
    return confirmed("input_layout", runner, own, *forms("input-layout"))
