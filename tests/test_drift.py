"""check-reports on another machine: error figures move in their last digits (a 30 %
change passes), a property of the systems (outcome, parameter count, behaviour) fails
with a message naming case, runner, field, old and new."""
from __future__ import annotations

import json

from conformance.report import compare_reports, differences, write_reports
from conformance.report.base import FLOATS
from conformance.report.drift import figures_agree
from conformance.compare.verdict import Outcome

from .report_rows import FakeCase, make_row, replace, stand_in

TORCH, KERAS = stand_in("t.one", "torch", "torch.X"), stand_in("k.one", "keras", "keras.Y")
CASES = [FakeCase("plain"), FakeCase("masked", has_fully_masked_rows=True)]


def rows(scale: float = 1.0):
    def figs(a, r):
        return dict(max_abs_error=a * scale, max_rel_error=r * scale,
                    weights_max_abs_error=a / 2 * scale, weights_max_rel_error=r / 2 * scale)

    return [
        make_row("plain", TORCH, parameters=10, **figs(4.92e-6, 7.9e-6),
                 extras={"delta": 2.38e-7 * scale}, weight_shapes={"w": [2, 5]},
                 output_digest={"size": 2, "sampled": False,
                                "values": [0.5 * (1 + 1e-7 * scale), -1.0]}),
        make_row("plain", KERAS, parameters=10, **figs(8.8e-6, 9.9e-7)),
        make_row("masked", TORCH, Outcome.BEHAVIOUR, parameters=10, **figs(1e-12, 0.0),
                 fully_masked_row="nan", fully_masked_row_declared="nan"),
        make_row("masked", KERAS, Outcome.NOT_EXPRESSIBLE, reason="cannot"),
    ]


def write(tmp_path, name, the_rows):
    write_reports(the_rows, CASES, [TORCH, KERAS], tmp_path / name, "full")
    return tmp_path / name


def test_every_error_figure_thirty_percent_off_still_holds(tmp_path):
    base = write(tmp_path, "here", rows())
    for scale in (1.3, 1 / 1.3):
        other = write(tmp_path, f"there{scale}", rows(scale))
        assert (other / "results.json").read_text() != (base / "results.json").read_text()
        assert differences(base, other) == []


def test_a_changed_outcome_parameter_count_or_behaviour_is_named(tmp_path):
    base = write(tmp_path, "here", rows())
    changed = rows(1.3)
    changed[0] = replace(changed[0], parameters=11)
    changed[1] = replace(changed[1], outcome=Outcome.MISMATCH)
    changed[2] = replace(changed[2], fully_masked_row="zeros")
    found = {(c.file, c.case, c.runner, c.field, c.old, c.new)
             for c in compare_reports(base, write(tmp_path, "there", changed))}
    assert ("results.json", "plain", "t.one", "parameters", 10, 11) in found
    assert ("results.json", "plain", "k.one", "outcome", "pass", "mismatch") in found
    assert ("results.json", "masked", "t.one", "fully_masked_row", "nan", "zeros") in found
    assert ("results.csv", "plain", "t.one", "parameters", "10", "11") in found
    assert any(c[0] == "index.md" for c in found)  # the tables changed too
    text = "\n".join(differences(base, tmp_path / "there"))
    assert "results.json: plain[t.one] parameters: 10 -> 11" in text


def test_a_figure_of_another_order_of_magnitude_is_a_change(tmp_path):
    base = write(tmp_path, "here", rows())
    changed = rows()
    changed[0] = replace(changed[0], max_rel_error=7.9e-4)
    found = [str(c) for c in compare_reports(base, write(tmp_path, "there", changed))]
    assert "results.json: plain[t.one] max_rel_error: 7.9e-06 -> 0.00079" in found


def test_the_figure_rule():
    tol = 1e-5
    assert figures_agree(4.92e-6, 5.97e-6, tol)  # the example
    assert figures_agree(0.0, 9e-7, tol) and figures_agree(None, None, tol)  # far below
    assert figures_agree(8e-6, 1.04e-5, tol)  # a decade boundary is no change
    assert not figures_agree(0.0, 5e-6, tol)  # zero against a notable error
    assert not figures_agree(1e-3, 2.5e-3, tol)  # beyond a factor 2
    assert not figures_agree(None, 1e-7, tol)  # ran against did not run
    assert not figures_agree(1e-3, -1e-3, tol)


def test_the_metadata_block_and_the_machine_are_ignored(tmp_path):
    base = write(tmp_path, "here", rows())
    data = json.loads((base / "results.json").read_text())
    data["metadata"]["cpu"] = "another CPU"
    (base / "results.json").write_text(json.dumps(data))
    assert differences(base, write(tmp_path, "there", rows())) == []
    assert set(FLOATS) <= set(data["rows"][0])


def test_ledger_evidence_figures_vary_but_cells_do_not():
    """conventions.json: a probe's figure moves with the CPU; a value never may."""
    import json

    from conformance.report.drift import compare_ledger

    cell = {"system": "torch.mha", "axis": "attn_mask_polarity", "value": "true_blocks",
            "evidence": "probe[torch.mha]: true_blocks 4.2e-07; true_attends 2.9e+00",
            "documented": "true_blocks", "documented_source": "https://x",
            "contradicts_documentation": False}
    old = {"axes": [{"id": "attn_mask_polarity"}], "systems": [{"id": "torch.mha"}],
           "cells": [cell]}
    moved = {**old, "cells": [{**cell, "evidence": cell["evidence"].replace("4.2e-07",
                                                                            "5.1e-07")}]}
    assert compare_ledger(json.dumps(old), json.dumps(moved)) == []
    flipped = {**old, "cells": [{**cell, "value": "true_attends"}]}
    [change] = compare_ledger(json.dumps(old), json.dumps(flipped))
    assert (change.case, change.runner, change.field) == ("torch.mha", "attn_mask_polarity",
                                                         "value")
    assert "'true_blocks' -> 'true_attends'" in str(change)
