"""A runner's ApiFacts are filed under the ledger's axes by the table, never by the runner:
every fact name has exactly one axis, an axis id is no fact name, and the documentation's
word comes from the expectations file's data."""
from __future__ import annotations

import pytest

from conformance.contract.api_facts import API_FACTS, ApiFact
from conformance.conventions.axes import AXIS_IDS, Convention
from conformance.contract.runner import Runner
from conformance.conventions.probes import table
from conformance.conventions.probes.api_facts import as_cell, own_cells


def test_every_fact_is_filed_under_one_axis():
    assert set(table.FACTS.values()) == set(API_FACTS)
    assert len(set(table.FACTS.values())) == len(table.FACTS)  # no fact on two axes
    assert set(table.FACTS) <= set(AXIS_IDS)
    assert not set(API_FACTS) & set(AXIS_IDS)  # a fact is named for the API, not the axis


def test_an_axis_id_is_no_fact():
    with pytest.raises(ValueError, match="size_arguments.*not one of API_FACTS"):
        ApiFact("size_arguments", "per_head", "planted: a runner naming the axis")


def test_a_fact_gets_its_axis_and_the_documented_word_from_data():
    class Sdpa(Runner):
        name = "torch.sdpa"  # its expectations file documents size_arguments

    cell = as_cell(Sdpa(), ApiFact("head_size_from", "given_tensors", "read: the signature"))
    assert (cell.axis, cell.value, cell.evidence) == (
        "size_arguments", "given_tensors", "read: the signature")
    assert cell.documented == "given_tensors"
    assert cell.documented_source.startswith("https://docs.pytorch.org/")


def test_a_runner_giving_a_cell_is_refused():
    class Judging(Runner):
        name = "toy.judging"

        def conventions(self):  # planted: a runner judging an axis itself
            return [Convention("unbatched_input", "accepted", "the runner tried a 2-D call")]

    with pytest.raises(TypeError, match="reports ApiFacts"):
        own_cells(Judging())
