"""The ledger's own probes: axes judged here, asked of every runner through its native calls.

Which probe measures which axis of which runner is the table of axes (table.py): one entry
an axis, its ways in order (universal: every executed runner through its translate and
run; raw: a native argument the runner passes raw, `Runner.answer`, for the runners whose
`answers` lists it; feature: the runners whose system takes the probe case natively, its
`features` less `harness_features` and its `probe_takes`), and where the cell comes from
when no way is taken (the signatures a runner names, features.py; the matrix rows; the
runner's own observation of its API).  LEDGER_PROBES, RAW_PROBES, ASKED_PROBES and
READS_OWN below are views of it for the callers that name one kind.

Each probe builds its probe cases, asks the runner (request.ask: the runner's translate
and run, nothing else; request.ask_raw: its `answer`), and names the reading with the
oracle.  The runner's own `conventions()` cells for these axes are not used: one judge for
every system.  A documented model (not executed) keeps its cited cells for the axes its
documentation states.

`ledger_cells(runner)` is what the conventions items and the drift matrix read; it runs
where the runner runs (its worker, asked by name: workers.conventions_in_worker).
"""
from __future__ import annotations

from typing import Callable

from conformance.conventions.axes import NOT_PROBED, Convention
from conformance.conventions.probes import attention_function, decode_masks, table
from conformance.conventions.probes.api_facts import own_cells
from conformance.conventions.probes.batch import batch_invariance_cell
from conformance.conventions.probes.cache_probes import override
from conformance.conventions.probes.features import signature_cells

# Views of the table of axes (table.py), for the callers that name one kind of probe
LEDGER_PROBES = table.LEDGER_PROBES  # (axes, probe(runner, own cells)): the one_call probes
OWNED_AXES = tuple(a for axes, _ in LEDGER_PROBES for a in axes)
# axis -> (the RAW_ARGUMENTS argument or its alternatives, probe(runner)): each axis's first
# raw way (table.RAW_WAYS; window_width's window_setting is its second)
RAW_PROBES = {a: (w.takes[0] if len(w.takes) == 1 else w.takes, w.probe)
              for a, w in table.RAW_WAYS.items()}
# axis -> probe(runner, own) of its way through translate and run (universal or feature)
ASKED_PROBES: dict[str, Callable[..., Convention]] = {
    a: w.probe for a, ways in table.WAYS.items() for w in ways
    if w.how != table.RAW and not w.one_call}
# the asked probes that read the runner's own cell (sizes.confirmed, padding.py): only for
# these does one_axis.axis_cell (the drift matrix) run the runner's conventions()
READS_OWN = frozenset(a for a in table.TABLE if table.reads_own(a))
LEDGER_CELLS = "conformance.conventions.probes:ledger_cells"  # the worker is asked by name


def asked_cells(runner, own: list[Convention], settled: set[str]) -> list[Convention]:
    """The axes the table asks of the runner through its translate and run
    (table.asked_probes: what it declares it takes), each with its own cell where it reports
    one; then the feature axes no cell settles, read from the signatures it names
    (features.py)."""
    mine = {c.axis: c for c in own}
    cells = [probe(runner, mine.get(axis))
             for axis, probe in table.asked_probes(runner).items()]
    return cells + signature_cells(runner, settled | {c.axis for c in cells})


def ledger_cells(runner) -> list[Convention]:
    """`runner.conventions()` (its native probes) with the ledger-owned axes measured here.
    A documented model (not executed: its `run` is the suite's NumPy) has the cells its
    cited documentation gives (the `cited:` section of its expectations file); an owned
    axis it does not cite is `not_probed`."""
    if not runner.executed:
        from conformance.conventions.expectations import cited as cited_cells

        own = cited_cells(runner.name)
        cited = {c.axis for c in own}
        return own + [Convention(a, NOT_PROBED, f"{runner.name}: a documented model whose "
                                 "cited documentation does not state it (its arithmetic "
                                 "here is the suite's NumPy, not the system's)")
                      for a in OWNED_AXES if a not in cited]
    own = own_cells(runner)
    raw = table.raw_probes(runner)  # the axes of the arguments it passes raw
    asked = set(table.asked_probes(runner))
    cells = [c for c in own if c.axis not in OWNED_AXES and c.axis not in raw
             and c.axis not in asked]
    cells += asked_cells(runner, own, {c.axis for c in cells} | set(raw) | set(OWNED_AXES))
    mine = {c.axis: c for c in own if c.axis in OWNED_AXES}  # a runner's own reading
    if runner.decodes_only and decode_masks.answers_steps(runner):
        steps = decode_masks.decode_mask_cells(runner, cells)  # through its decode's steps
        cells = override(cells, steps) + [batch_invariance_cell(runner)]
        return cells + [probe(runner) for probe in raw.values()]
    for _axes, probe in LEDGER_PROBES:  # a decode-only runner's other calls: probe_translate
        cells += probe(runner, mine)
    cells = attention_function.through_function(runner, cells)  # what its forward could not
    return cells + [probe(runner) for probe in raw.values()]
