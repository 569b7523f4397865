"""A new universal axis is one table entry, one probe module, one test and one docs row;
no file under conformance/runners/ changes.  Shown with a scratch axis: its entry (an Axis
and a universal Way) is planted in the table of axes, its probe asks each runner through
the runner's own translate and run (request.ask), and every executed fake runner gets a
cell for it through ledger_cells, none changed for it; a documented model is asked none."""
from __future__ import annotations

import numpy as np

from conformance.conventions.axes import Axis, Convention
from conformance.contract.runner import Observation, Runner, Translation
from conformance.conventions.probes import ledger_cells, table
from conformance.conventions.probes.probing import probe_case
from conformance.conventions.probes.request import ask
from conformance.oracle.reference import attention

SCRATCH = "scratch_output_finite"


def scratch_cell(runner, own=None) -> Convention:
    """The scratch probe: a probe case asked, its output named finite or not."""
    got = ask(runner, probe_case("scratch"))
    if not got.answered:
        return Convention(SCRATCH, "not_probed", f"{runner.name}: not asked")
    word = "finite" if np.isfinite(got.output).all() else "nonfinite"
    return Convention(SCRATCH, word, f"{runner.name}, probe_case probe-scratch ({got.call})")


class Oracle(Runner):
    """A fake system computing the oracle's attention; `broken` returns NaN."""

    framework, system = "fake", "fake"

    def __init__(self, name: str, broken: bool = False, **params):
        super().__init__(**params)
        self.name, self.broken = name, broken

    def translate(self, case):
        return Translation(f"{self.name}({case.id})")

    def run(self, case, translation, data):
        out = attention(case, data).output
        return Observation(output=out * np.nan if self.broken else out)


def plant_scratch_axis(monkeypatch):
    axis = Axis(SCRATCH, "Scratch: output finite", ("finite", "nonfinite"), "a scratch axis")
    entry = table.Entry(axis, (table.Way(table.UNIVERSAL, scratch_cell),))
    monkeypatch.setitem(table.TABLE, SCRATCH, entry)


def test_every_executed_runner_gets_the_scratch_cell_with_no_runner_change(monkeypatch):
    plant_scratch_axis(monkeypatch)
    runners = [Oracle("fake.a"), Oracle("fake.b", features=frozenset({"fill", "rope"})),
               Oracle("fake.broken", broken=True)]
    words = {}
    for runner in runners:
        cells = [c for c in ledger_cells(runner) if c.axis == SCRATCH]
        assert len(cells) == 1, runner.name
        words[runner.name] = cells[0].value
        assert cells[0].evidence.startswith(runner.name)
    assert words == {"fake.a": "finite", "fake.b": "finite", "fake.broken": "nonfinite"}


def test_without_its_entry_no_runner_gets_the_scratch_cell():
    assert SCRATCH not in table.TABLE
    assert all(c.axis != SCRATCH for c in ledger_cells(Oracle("fake.a")))


def test_a_documented_model_is_not_asked_the_scratch_axis(monkeypatch):
    plant_scratch_axis(monkeypatch)
    model = Oracle("fake.model", executed=False)
    assert all(c.axis != SCRATCH for c in ledger_cells(model))
