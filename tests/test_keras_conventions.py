"""The Keras runners' convention probes, run where the matrix runs them: in the Keras
worker of one backend (torch: the cheapest to start), the matrix's own (warm in a full
run); the request is urgent, so it never queues behind the matrix's prefetched items."""
from __future__ import annotations

import pytest

from conformance.contract.axes import AXIS_IDS, NA
from conformance.conventions.ledger import DERIVERS, cell_problem


def probe_in_worker(**params):
    from conformance.run import workers
    from conformance.runners import load

    runner = load("conformance.runners.keras.mha:KerasMHA", params)
    if runner.available():
        pytest.skip(runner.available())
    return {c.axis: c for c in workers.conventions_in_worker(runner)}


def test_keras_scores_path_probes_name_its_conventions():
    cells = probe_in_worker(backend="torch", scores=True)
    assert not [cell_problem(c) for c in cells.values() if cell_problem(c)]
    words = {axis: c.value for axis, c in cells.items()}
    assert words["attn_mask_polarity"] == "true_attends"
    assert words["float_mask"] == "cast_to_bool"  # 0 blocks, -1e9 attends
    assert words["argument_order"] == "query_value_key"
    assert words["causal_flag"] == "upper_left"
    assert words["size_arguments"] == "per_head"
    assert words["implicit_mask"] == "propagated"
    assert words["dropout"] == "training_flag"
    assert words["weights_dropout"] == "pre_dropout"
    assert words["mixed_dtype"] == "cast_to_layer"
    assert words["unbatched_input"] == "refused"
    # every figure is quoted: the float mask's three readings
    assert all(r in cells["float_mask"].evidence for r in ("added", "cast_to_bool", "ignored"))
    # every axis is a probe cell or left to the rows that ledger.py derives from
    assert set(AXIS_IDS) - set(cells) <= set(DERIVERS)


def test_probes_leave_to_the_rows_only_what_the_rows_settle():
    from conformance.runners.keras import probes as _keras_probes

    assert "fully_masked_row" not in _keras_probes.layer_cells.__doc__
    assert NA == "not_applicable"
