"""The ledger's own probes: axes judged here, asked of every runner through its native calls.

Two kinds: LEDGER_PROBES ask every executed runner through its `translate` and `run`
(mask fill, masked key and value, batch invariance); RAW_PROBES (flags.py) ask a runner
to pass one native argument raw (`Runner.answer`), for the runners whose `answers` lists
it (attn_mask_polarity, float_mask, causal_flag; training.py dropout, windows.py
window_width, order.py argument_order by position, key_padding.py a key-padding argument,
implicit.py implicit_mask, partial.py rope_partial through a partial-rotary
setting); the others keep their own cells for those axes until their
runner answers.
ASKED_PROBES (sizes.py, scores.py, heads.py, qk_norm.py, padding.py, positions.py,
cache.py, rows.py, softcap.py, capped.py, window_settings.py) are asked of the runners
whose `ledger_axes` lists the axis, through their translate and run; the feature axes
no cell settles are read from the signatures a runner names (`Runner.signatures`, features.py).

Each entry is one axis (or a few measured by one probe) and the function that measures it
for a runner: the function builds the probe cases, asks the runner (request.ask: the
runner's translate and run, nothing else), and names the reading with the oracle.  The
runner's own `conventions()` cells for these axes are not used: one judge for every
system.  A documented model (not executed) keeps its cited cells for the axes its
documentation states.

`ledger_cells(runner)` is what the conventions items and the drift matrix read; it runs
where the runner runs (its worker, asked by name: workers.conventions_in_worker).
"""
from __future__ import annotations

from typing import Callable

from conformance.contract.axes import NOT_PROBED
from conformance.contract.runner import Convention
from conformance.conventions.probes import (
    cache, flags, heads, implicit, key_padding, native_inputs, order, padding, partial,
    positions, qk_norm, rows, scores, sizes, softcap, training, windows)
from conformance.conventions.probes.batch import batch_invariance_cell
from conformance.conventions.probes.capped import softcap_cell
from conformance.conventions.probes.features import signature_cells
from conformance.conventions.probes.masks import (
    MASKED_AXES, mask_fill_cell, masked_nonfinite_cells)
from conformance.conventions.probes.window_settings import window_settings_cell

# (axes it settles, probe(runner, the runner's own cells of them) -> cells): a new axis of
# this shape is one entry here.  A runner's own cell is never the word, but where it read the
# number itself (onnxruntime's qk_matmul_output shows the masked scores) it breaks a tie
# the outputs cannot (masks.mask_fill_cell)
LEDGER_PROBES: tuple[tuple[tuple[str, ...], Callable[..., list[Convention]]], ...] = (
    (("mask_fill",), lambda r, own: [mask_fill_cell(r, reading=own.get("mask_fill"))]),
    (tuple(MASKED_AXES.values()), lambda r, own: masked_nonfinite_cells(r)),
    (("batch_invariance",), lambda r, own: [batch_invariance_cell(r)]),
)
OWNED_AXES = tuple(a for axes, _ in LEDGER_PROBES for a in axes)
# axis -> (the RAW_ARGUMENTS argument or its alternatives, probe(runner) -> cell): asked of
# the runners whose `answers` lists the argument (flags.py: masks and the causal switch;
# training.py: dropout; windows.py: the window number; order.py: the positional inputs;
# key_padding.py: a key-padding argument or per-item key counts; implicit.py: padding the
# system marks itself; partial.py: rope_partial through a partial-rotary setting;
# native_inputs.py: a float64 input, an unbatched input, the weights under dropout)
RAW_PROBES = {**flags.RAW_PROBES, **training.RAW_PROBES, **windows.RAW_PROBES,
              **order.RAW_PROBES, **key_padding.RAW_PROBES, **implicit.RAW_PROBES,
              **partial.RAW_PROBES, **native_inputs.RAW_PROBES}
# axis -> probe(runner, the runner's own cell of it or None) -> cell, asked of the runners
# whose `ledger_axes` lists the axis (through their translate/run or `answer`): one entry
# an axis; the runner's own cell is never the word, but a reading of its API it reports
# (size_arguments, input_layout) is what sizes.confirmed checks
ASKED_PROBES: dict[str, Callable[..., Convention]] = {
    "argument_order": sizes.argument_order_cell,
    "size_arguments": sizes.size_arguments_cell,
    "input_layout": sizes.input_layout_cell,
    "softmax_scale": scores.softmax_scale_cell,
    "scale_precision": scores.scale_precision_cell,
    "float64_compute": scores.float64_compute_cell,
    "sinks": scores.sinks_cell,
    "kv_head_mapping": heads.kv_head_mapping_cell,
    "qk_norm_scope": qk_norm.qk_norm_scope_cell,
    "key_padding_polarity": padding.key_padding_polarity_cell,
    "rope_style": positions.rope_style_cell,
    "rope_partial": positions.rope_partial_cell,
    "alibi_slopes": positions.alibi_slopes_cell,
    "cache_causal_alignment": cache.cache_causal_alignment_cell,
    "cache_layout": cache.cache_layout_cell,
    "fully_masked_row": rows.fully_masked_row_cell,
    "softcap_order": softcap.softcap_order_cell,
    "softcap": softcap_cell,  # capped.py
    "window_width": window_settings_cell,  # a window set per setting (window_settings.py)
}
# the asked probes that read the runner's own cell (sizes.confirmed, padding.py): only for
# these does one_axis.axis_cell (the drift matrix) run the runner's conventions()
READS_OWN = frozenset({"size_arguments", "input_layout", "key_padding_polarity"})
LEDGER_CELLS = "conformance.conventions.probes:ledger_cells"  # the worker is asked by name


def takes_raw(argument: str | tuple[str, ...], answers) -> bool:
    """Whether a runner answering `answers` passes the RAW_PROBES argument (one name, or
    alternatives: key_padding or key_lengths for key_padding_polarity)."""
    names = (argument,) if isinstance(argument, str) else argument
    return any(n in answers for n in names)


def asked_cells(runner, own: list[Convention], settled: set[str]) -> list[Convention]:
    """The ASKED_PROBES axes the runner lists in `ledger_axes`, asked of it (with its own
    cell of each, where it reports one); then the feature axes no cell settles, read from
    the signatures it names (features.py)."""
    mine = {c.axis: c for c in own}
    cells = [probe(runner, mine.get(axis)) for axis, probe in ASKED_PROBES.items()
             if axis in getattr(runner, "ledger_axes", ())]
    return cells + signature_cells(runner, settled | {c.axis for c in cells})


def ledger_cells(runner) -> list[Convention]:
    """`runner.conventions()` (its native probes) with the ledger-owned axes measured here.
    A documented model (not executed: its `run` is the suite's NumPy) keeps the cells its
    cited documentation gives; an owned axis it does not cite is `not_probed`."""
    own = list(runner.conventions())
    if not getattr(runner, "executed", True):
        cited = {c.axis for c in own}
        return own + [Convention(a, NOT_PROBED, f"{runner.name}: a documented model whose "
                                 "cited documentation does not state it (its arithmetic "
                                 "here is the suite's NumPy, not the system's)")
                      for a in OWNED_AXES if a not in cited]
    answers = getattr(runner, "answers", frozenset())
    raw = {axis: probe for axis, (argument, probe) in RAW_PROBES.items()
           if takes_raw(argument, answers)}  # the axes of the arguments it passes raw
    asked = set(getattr(runner, "ledger_axes", ())) & set(ASKED_PROBES)
    cells = [c for c in own if c.axis not in OWNED_AXES and c.axis not in raw
             and c.axis not in asked]
    cells += asked_cells(runner, own, {c.axis for c in cells} | set(raw) | set(OWNED_AXES))
    if getattr(runner, "decodes_only", False):
        return cells + [Convention(a, NOT_PROBED, f"{runner.name}: a harness limit: this "
                                   "runner runs decode cases only, and the probe is one call "
                                   "(the system's single call is another runner's column)")
                        for a in OWNED_AXES] + [probe(runner) for probe in raw.values()]
    mine = {c.axis: c for c in own if c.axis in OWNED_AXES}  # a runner's own reading
    for _axes, probe in LEDGER_PROBES:
        cells += probe(runner, mine)
    return cells + [probe(runner) for probe in raw.values()]
