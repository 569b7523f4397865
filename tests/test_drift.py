"""check-reports on another CPU: what CPU kernels move (error figures, low-precision digests,
evidence distances, kernel names in framework messages) is never compared by value, in any
rendered file; a property of the systems (outcome, word, count, behaviour, exception type)
still fails with a message naming case, runner, field, old and new.

The planted drifts are the ones measured between the AVX2 machine that made the committed
reports and an AVX-512 one (issue #18): a float32 max_rel_error 25x off, a bfloat16 output
one bit off, TensorFlow's `__MklEinsum` for `Einsum` in a quoted error."""
from __future__ import annotations

import json

from conformance.compare.verdict import Outcome
from conformance.conventions.axes import AXES
from conformance.conventions.ledger import Ledger, LedgerCell, System
from conformance.report import compare_reports, differences, write_reports
from conformance.report.base import FLOATS
from conformance.report.drift import compare_file, compare_ledger
from conformance.report.ledger import write_ledger
from conformance.report.masking import figures_agree, mask, texts_agree
from conformance.report.results_files import read_results

from .report_rows import FakeCase, make_row, replace, stand_in

TORCH, KERAS = stand_in("t.one", "torch", "torch.X"), stand_in("k.one", "keras", "keras.Y")
CASES = [FakeCase("plain"), FakeCase("masked", has_fully_masked_rows=True)]
BF16 = [0.1484375, -1.0, -0.46484375, 0.0029296875]  # bfloat16 values of a real digest
TF_ERROR = ("probe[k.one]: MultiHeadAttention on 2-D inputs: InvalidArgumentError: Exception "
            "encountered when calling MultiHeadAttention.call(). {{function_node "
            "__wrapped__Einsum_N_2_device_/job:localhost/replica:0/task:0/device:CPU:0}} "
            "Expected dimension 5 at axis 0 of the input shaped [3,2,3] but got dimension 3 "
            "[Op:Einsum] name: Arguments received by MultiHeadAttention.call(): • query=tf."
            "Tensor(shape=(3, 8), dtype=float32) • value=tf.Tensor(shape=(3, 8), dtype=floa")


def rows(scale: float = 1.0, digest=None):
    def figs(a, r):
        return dict(max_abs_error=a * scale, max_rel_error=r * scale,
                    weights_max_abs_error=a / 2 * scale, weights_max_rel_error=r / 2 * scale)

    return [
        make_row("plain", TORCH, parameters=10, **figs(4.92e-6, 7.9e-6),
                 extras={"delta": 2.38e-7 * scale}, weight_shapes={"w": [2, 5]},
                 notes=(f"the other graph differs by at most {2.38e-7 * scale:.2e}",),
                 output_digest={"size": 4, "sampled": False, "values": digest or BF16}),
        make_row("plain", KERAS, parameters=10, **figs(8.8e-6, 9.9e-7)),
        make_row("masked", TORCH, Outcome.BEHAVIOUR, parameters=10, **figs(1e-12, 0.0),
                 fully_masked_row="nan", fully_masked_row_declared="nan"),
        make_row("masked", KERAS, Outcome.NOT_EXPRESSIBLE, reason="cannot"),
    ]


def ledger(evidence: str = TF_ERROR, value: str = "refused", distance: str = "4.2e-07",
           runner: str = "conformance.runners.keras.mha:KerasMHA") -> Ledger:
    axes = tuple(a for a in AXES if a.id in ("unbatched_input", "attn_mask_polarity"))
    system = System("k.one", runner, True, "keras", "keras.Y", "default", "tensorflow")
    return Ledger([system], [
        LedgerCell("k.one", "unbatched_input", value, evidence, source="probe"),
        LedgerCell("k.one", "attn_mask_polarity", "true_attends",
                   f"probe[k.one]: under each reading: true_attends {distance}; true_blocks "
                   "2.3e+00", source="probe")], axes=axes)


def write(tmp_path, name, the_rows, the_ledger=None):
    write_ledger(the_ledger or ledger(), tmp_path / name)  # the ledger first: index.html reads it
    write_reports(the_rows, CASES, [TORCH, KERAS], tmp_path / name, "full")
    return tmp_path / name


def test_every_figure_25_times_off_still_holds_in_every_file(tmp_path):
    """The issue's 25x max_rel_error (6.77e-05 -> 2.72e-06), in both directions, on every
    figure: the row files (results/<runner>.json and .csv), index.md, index.html (cells and
    embedded data), cases/*.md all differ on disk and check-reports finds no change."""
    base = write(tmp_path, "here", rows())
    for scale in (25.0, 1 / 25):
        other = write(tmp_path, f"there{scale}", rows(scale), ledger(distance="1.7e-08"))
        for name in ("results/t.one.json", "results/t.one.csv", "details.md", "index.html",
                     "conventions.json", "conventions/attn_mask_polarity.md"):
            assert (other / name).read_text() != (base / name).read_text(), name
        assert differences(base, other) == []


def test_moved_figures_do_not_misalign_the_lines_around_them(tmp_path):
    """Each figure moves to the value its neighbour had: an unmasked line diff pairs a moved
    line with the neighbour's old line and reports insertions and deletions (the 23
    index.html changes of issue #18: one <td> per line in the section tables)."""
    runners = [stand_in(f"t.{i}", "torch", "torch.X") for i in range(6)]
    figures = [1.1e-6, 2.2e-6, 3.3e-6, 4.4e-6, 5.5e-6, 6.6e-6, 7.7e-6]

    def shifted(by: int):
        return [make_row("plain", r, parameters=10, max_abs_error=figures[i + by],
                         max_rel_error=figures[i + by]) for i, r in enumerate(runners)]

    for name, by in (("here", 0), ("there", 1)):
        write_ledger(ledger(), tmp_path / name)
        write_reports(shifted(by), CASES[:1], runners, tmp_path / name, "full")
    assert differences(tmp_path / "here", tmp_path / "there") == []


def test_a_changed_outcome_word_or_count_is_still_named(tmp_path):
    base = write(tmp_path, "here", rows())
    changed = rows(25.0)
    changed[0] = replace(changed[0], parameters=11)
    changed[1] = replace(changed[1], outcome=Outcome.MISMATCH)
    changed[2] = replace(changed[2], fully_masked_row="zeros")
    found = {(c.file, c.case, c.runner, c.field, c.old, c.new)
             for c in compare_reports(base, write(tmp_path, "there", changed))}
    assert ("results/t.one.json", "plain", "t.one", "parameters", 10, 11) in found
    assert ("results/k.one.json", "plain", "k.one", "outcome", "pass", "mismatch") in found
    assert ("results/t.one.json", "masked", "t.one", "fully_masked_row", "nan", "zeros") \
        in found
    assert ("results/t.one.csv", "plain", "t.one", "parameters", "10", "11") in found
    assert any(c[0] == "index.md" for c in found)  # the tables changed too
    assert any(c[0] == "index.html" for c in found)
    text = "\n".join(differences(base, tmp_path / "there"))
    assert "results/t.one.json: plain[t.one] parameters: 10 -> 11" in text


def test_a_ledger_word_is_still_named_in_every_ledger_file(tmp_path):
    base = write(tmp_path, "here", rows())
    changes = compare_reports(base, write(tmp_path, "there", rows(), ledger(value="accepted")))
    assert {c.file for c in changes} >= {"conventions.json", "conventions.md", "index.html"}
    [cell] = [c for c in changes if c.file == "conventions.json"]
    assert (cell.case, cell.runner, cell.field, cell.old, cell.new) == (
        "k.one", "unbatched_input", "value", "refused", "accepted")


def test_a_kernel_name_in_a_quoted_tensorflow_error_is_masked(tmp_path):
    """AVX-512 TensorFlow rewrites Einsum to __MklEinsum: the quoted message gets 5
    characters longer and its 300-character cut moves: no change in any file."""
    mkl = TF_ERROR.replace("__wrapped__Einsum", "__wrapped____MklEinsum")[:len(TF_ERROR)]
    assert mkl != TF_ERROR and len(TF_ERROR) > 300
    base = write(tmp_path, "here", rows())
    assert differences(base, write(tmp_path, "there", rows(), ledger(mkl))) == []


def test_a_changed_exception_type_or_message_in_evidence_is_named():
    old = ledger().as_dict()
    for evidence in (TF_ERROR.replace("InvalidArgumentError", "ValueError"),
                     TF_ERROR.replace("Expected dimension 5", "Expected dimension 7"),
                     "probe[k.one]: accepted as one batch item"):
        new = ledger(evidence).as_dict()
        [change] = compare_ledger(json.dumps(old), json.dumps(new))
        assert (change.runner, change.field) == ("unbatched_input", "evidence")


def test_the_systems_list_ignores_the_suites_import_path_only():
    old = ledger().as_dict()
    moved = ledger(runner="conformance.runners.keras_mha:KerasMHA").as_dict()
    assert compare_ledger(json.dumps(old), json.dumps(moved)) == []
    other = json.loads(json.dumps(old))
    other["systems"][0]["backend"] = "jax"
    [change] = compare_ledger(json.dumps(old), json.dumps(other))
    assert change.case == "systems"


def test_a_bfloat16_digest_one_bit_off_holds_but_its_shape_and_nan_pattern_do_not(tmp_path):
    base = write(tmp_path, "here", rows())
    last_bit = [0.150390625, -1.0078125, -0.46875, 0.0029144287109375]  # each 1 ulp
    assert differences(base, write(tmp_path, "bit", rows(digest=last_bit))) == []
    nan = [None, *BF16[1:]]
    found = [str(c) for c in compare_reports(base, write(tmp_path, "nan", rows(digest=nan)))]
    assert any("plain[t.one] output_digest" in c for c in found)


def test_the_figure_rule_compares_kinds_only():
    assert figures_agree(6.77e-05, 2.72e-06) and figures_agree(1.81e-04, 2.03e-03)
    assert figures_agree(0.0, 5e-6) and figures_agree(None, None)
    assert figures_agree("inf", "inf") and figures_agree(float("nan"), float("nan"))
    assert not figures_agree(None, 1e-7)  # ran against did not run
    assert not figures_agree(1e-7, float("nan")) and not figures_agree("inf", 1.0)
    assert not figures_agree("inf", "-inf")


def test_mask_leaves_words_integers_and_names_alone():
    text = ("onnxruntime: Non-zero status code returned while running Attention node. "
            "Name:'node_scaled_dot_product_attention_3' at 0x7f3a2c1b90d0 in "
            "/usr/lib/python3/site-packages/x.py: 4 of 12 values, tensor val_17, 2.5e-07")
    masked = mask(text)
    for gone in ("node_scaled", "0x7f3a", "/usr/lib", "val_17", "2.5e-07"):
        assert gone not in masked, gone
    for kept in ("Attention node", "Name:'", "of ‹n› values", "tensor val_", "onnxruntime"):
        assert kept in masked, kept
    assert mask("mha/query/kernel (8, 2, 3) https://github.com/keras-team/keras/pull/21299") \
        == "mha/query/kernel (8, 2, 3) https://github.com/keras-team/keras/pull/21299"
    assert not texts_agree("refused: ValueError: x", "refused: TypeError: x")


def test_a_changed_reason_or_note_word_is_named_a_moved_figure_in_them_is_not(tmp_path):
    base = write(tmp_path, "here", rows())
    changed = rows()
    changed[3] = replace(changed[3], reason="cannot, for another reason")
    found = {(c.file, c.case, c.field) for c in compare_reports(base, write(tmp_path, "r",
                                                                            changed))}
    assert ("results/k.one.json", "masked", "reason") in found
    assert ("results/k.one.csv", "masked", "reason") in found
    assert any(f == "index.html" for f, _, _ in found)


def test_the_metadata_block_and_the_machine_are_ignored(tmp_path):
    base = write(tmp_path, "here", rows())
    data = json.loads((base / "results.json").read_text())
    data["metadata"]["cpu"] = "another CPU"
    (base / "results.json").write_text(json.dumps(data))
    assert differences(base, write(tmp_path, "there", rows())) == []
    assert set(FLOATS) <= set(read_results(base / "results.json")["rows"][0])


def test_a_long_html_change_is_shown_around_its_first_real_difference():
    blob = '<script type="application/json" id="report-data">{}</script>'
    old = "<p>" + "x" * 400 + " 1.0e-07 pass</p>\n" + blob
    new = "<p>" + "x" * 400 + " 9.9e-07 fail</p>\n" + blob
    [change] = compare_file("index.html", old, new)
    assert "fail" in change.new and len(change.new) < 200 and "pass" in change.old


def test_index_html_embedded_data_is_compared_as_data():
    def page(data):
        return ('<p>x</p>\n<script type="application/json" id="report-data">'
                + json.dumps(data) + "</script>\n<script>run()</script>")

    cell = {"runner": "t.one", "label": "pass", "figures": "max abs 4.92e-06",
            "reason": "", "notes": ["differs by at most 2.38e-07"]}
    old = page({"cases": [{"id": "plain", "cells": [cell]}]})
    moved = page({"cases": [{"id": "plain", "cells": [
        {**cell, "figures": "max abs 1.23e-04", "notes": ["differs by at most 0"]}]}]})
    assert compare_file("index.html", old, moved) == []
    worded = page({"cases": [{"id": "plain", "cells": [{**cell, "label": "mismatch"}]}]})
    [change] = compare_file("index.html", old, worded)
    assert (change.case, change.old, change.new) == (
        "report-data.cases[0].cells[0].label", "pass", "mismatch")
