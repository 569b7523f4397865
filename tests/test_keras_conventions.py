"""The Keras runners' convention probes, run where the matrix runs them: in the Keras
worker of one backend (torch: the cheapest to start), the matrix's own (warm in a full
run); the request is urgent, so it never queues behind the matrix's prefetched items."""
from __future__ import annotations

import numpy as np
import pytest

from conformance.contract.axes import AXIS_IDS, NA
from conformance.conventions.ledger import DERIVERS, cell_problem
from conformance.conventions.probes import OWNED_AXES


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
    # every axis is a probe cell, left to the rows that ledger.py derives from, or one
    # the ledger's own probes measure for every runner (conventions/probes)
    assert set(AXIS_IDS) - set(cells) <= set(DERIVERS) | set(OWNED_AXES)


def test_probes_leave_to_the_rows_only_what_the_rows_settle():
    from conformance.runners.keras import probes as _keras_probes

    assert "fully_masked_row" not in _keras_probes.layer_cells.__doc__
    assert NA == "not_applicable"


def test_scale_precision_the_probe_cannot_isolate_is_not_probed_never_not_applicable():
    """probes.scale_precision with a fake layer call: a float64 layer computing in float32
    (Keras on JAX) or below float64 elsewhere is the suite's limit (not_probed, the reason
    given), while an exact float64 output is read as float64 (a planted near-float32 one is
    not)."""
    from dataclasses import replace
    from types import SimpleNamespace

    from conformance.contract.axes import NOT_PROBED
    from conformance.contract.probing import output_with
    from conformance.oracle.canonical import case_data
    from conformance.runners._export.keras_mha import base_case
    from conformance.runners.keras.probes import scale_precision

    case = base_case("float64")
    x = case_data(case).inputs
    data = replace(case_data(case), inputs=replace(x, query=8 * x.query, key=8 * x.key))
    exact = output_with(case, None, data, scale=1 / np.sqrt(3.0))

    def fake(out, held):
        return SimpleNamespace(what="fake layer", layer=lambda *a, **k: None,
                               call=lambda *a, **k: (out, None, held))

    assert scale_precision(fake(exact, "float64")).value == "float64"
    in32 = scale_precision(fake(exact.astype(np.float32), "float32"))
    assert in32.value == NOT_PROBED and "does not compute in float64" in in32.evidence
    blurred = scale_precision(fake(exact + 1e-7, "float64"))
    assert blurred.value == NOT_PROBED and "cannot be isolated" in blurred.evidence


def test_a_float64_export_the_runtime_rejects_is_refused_with_its_message():
    """keras_export_probes.scale_precision_cell with a converter that raises: `refused`,
    quoting the message, and litert's float64_compute follows it; a graph that runs is
    measured, not refused."""
    from conformance.contract.axes import REFUSED
    from conformance.runners._export.keras_export_probes import scale_precision_cell
    from conformance.runners.litert.keras import _float64_cell

    class Refusing:
        what = "fake LiteRT model"

        def session(self, case):
            raise RuntimeError("Select TensorFlow op(s) are not supported by this interpreter")

        @staticmethod
        def run(session, case, **feeds):
            raise AssertionError("never reached")

    cell = scale_precision_cell(Refusing())
    assert cell.value == REFUSED and "Select TensorFlow op(s)" in cell.evidence
    assert [c.value for c in _float64_cell([cell])] == [REFUSED]
    from conformance.contract.probing import output_with
    from conformance.runners._export.keras_mha import base_case

    class Running(Refusing):
        def session(self, case):
            return None

        @staticmethod
        def run(session, case, **feeds):
            return output_with(case, None, scale=float(np.float32(1 / np.sqrt(3.0))))

    ran = scale_precision_cell(Running())
    assert ran.value == "float32_rounded" and _float64_cell([ran]) == []
    assert base_case  # the probe's case builder stays importable without Keras
