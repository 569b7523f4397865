"""A runner's facts of its own API (contract/api_facts.py), filed under the ledger's axes.

A runner reports what it read of its system's API in the API's terms (ApiFact.about: what
its size arguments count, what its call returns); the table of axes (table.py, Entry.fact)
names the axis each fact is evidence for, and what the system's documentation states comes
from data (the `documented:` section of its expectations file), never from runner code.
The ledger's probes then confirm the facts they can ask (table.reads_own) and measure the
rest; a fact is the cell only of an axis no probe asks of the runner.
"""
from __future__ import annotations

from conformance.contract.api_facts import ApiFact
from conformance.conventions.axes import Convention
from conformance.conventions.probes.asked import documented
from conformance.conventions.probes.table import FACT_AXES


def as_cell(runner, fact: ApiFact) -> Convention:
    """The ledger cell `fact` gives for `runner`: its axis, its word and its evidence, with
    the documentation's word for that axis beside it."""
    if not isinstance(fact, ApiFact):
        raise TypeError(f"{runner.name}.conventions() gave {type(fact).__name__}: a runner "
                        "reports ApiFacts of its API (contract/api_facts.py); measurements "
                        "are the ledger's probes (conventions/probes/)")
    axis = FACT_AXES[fact.about]
    return Convention(axis, fact.value, fact.evidence, **documented(runner, axis))


def own_cells(runner, facts=None) -> list[Convention]:
    """The cells of the facts `runner` reports of its API (`facts`, default
    runner.conventions())."""
    return [as_cell(runner, f) for f in (runner.conventions() if facts is None else facts)]
