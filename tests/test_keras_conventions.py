"""The Keras runners' convention probes, run where the matrix runs them: in the Keras
worker of one backend (torch: the cheapest to start), the matrix's own (warm in a full
run); the request is urgent, so it never queues behind the matrix's prefetched items."""
from __future__ import annotations

import pytest

from conformance.conventions.axes import AXIS_IDS, NA
from conformance.conventions.ledger import DERIVERS, cell_problem
from conformance.conventions.probes import OWNED_AXES


def probe_in_worker(**params):
    from conformance.conventions.probes import LEDGER_CELLS
    from conformance.run import workers
    from conformance.runners import load

    runner = load("conformance.runners.keras.mha:KerasMHA", params)
    if runner.available():
        pytest.skip(runner.available())
    return {c.axis: c for c in workers.conventions_in_worker(runner, LEDGER_CELLS)}


def test_keras_scores_path_probes_name_its_conventions():
    """The ledger's cells of keras.torch.scores: the layer answers (its `answer`, its
    translate and run), the ledger names (conventions/probes/)."""
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
    # every figure is quoted: the float mask's readings
    assert all(r in cells["float_mask"].evidence for r in ("added", "cast_to_bool"))
    # every axis is a ledger cell, or left to the rows that ledger.py derives from
    assert set(AXIS_IDS) - set(cells) <= set(DERIVERS) | set(OWNED_AXES)


def test_the_runners_own_cells_are_api_facts_the_rows_do_not_settle():
    """What a Keras runner reports itself (observations.py) holds no axis the matrix rows
    settle, and none the ledger asks of it."""
    from conformance.runners.keras.mha import KerasMHA
    from conformance.conventions.probes import ASKED_PROBES
    from conformance.conventions.probes.table import raw_probes

    runner = KerasMHA(backend="torch")
    asked = set(raw_probes(runner))
    from conformance.conventions.probes.table import asked_probes

    assert "fully_masked_row" not in asked_probes(runner)  # the rows settle it
    assert asked >= {"argument_order", "attn_mask_polarity", "key_padding_polarity",
                     "implicit_mask", "window_width", "dropout", "causal_flag"}
    assert set(asked_probes(runner)) <= set(ASKED_PROBES)
    assert NA == "not_applicable"
