"""Report sections select rows by framework and typed fields, never by runner name:
a renamed runner keeps its sections, a runner added out of tree gets every section
that applies to it, and the parameter ✗ follows the typed failure.  Pure NumPy and
pandas: rows and runners are built by hand."""
from __future__ import annotations

from types import SimpleNamespace

from conformance.contract.runner import Runner
from conformance.run.evaluate import evaluate
from conformance.report import METADATA_START, SECTIONS, write_reports
from conformance.report.keras import pairs
from conformance.report.sections import cell_parameters
from conformance.runners import EXTRA_ENV, load, registry
from conformance.compare.verdict import Failure, FailureKind, Outcome

from .helpers import make_case
from .report_rows import FakeCase, graph, make_row, parameter_failure, renamed, stand_in

MHA, GQA = "keras.layers.MultiHeadAttention", "keras.layers.GroupQueryAttention"
TORCH_MHA = "torch.nn.MultiheadAttention"
BACKENDS = ("tensorflow", "jax", "torch")
RUNNERS = [
    stand_in("torch.mha", "torch", TORCH_MHA, "ordinary"),
    stand_in("torch.mha.fastpath", "torch", TORCH_MHA, "fast path"),
    *[stand_in(f"keras.{b}", "keras", MHA, "fused", b) for b in BACKENDS],
    *[stand_in(f"keras.{b}.scores", "keras", MHA, "scores", b) for b in BACKENDS],
    *[stand_in(f"keras.gqa.{b}", "keras", GQA, "fused", b) for b in BACKENDS],
    stand_in("onnx.torch-export", "onnx", TORCH_MHA, "ordinary", "onnxruntime"),
    stand_in("onnx.keras-export", "onnx", MHA, "scores", "onnxruntime"),
]
KERAS_COLUMNS = ["tf − jax", "tf − torch", "scores: tf − jax", "scores: tf − torch",
                 "tf: fused − scores path", "gqa: tf − jax", "gqa: tf − torch", "tf: gqa − mha"]
CASES = [FakeCase("plain"), FakeCase("masked", has_fully_masked_rows=True),
         FakeCase("padded", key_padding=(3,)), FakeCase("odd")]


def _row(case, runner, i):
    """A ran row, with what its framework's sections read (typed fields only)."""
    typed = {}
    if runner.framework == "keras":
        typed["output_digest"] = {"size": 2, "sampled": False, "values": [1.0, 1.0 + i / 8]}
    if runner.framework == "onnx":
        typed["graphs"] = {"dynamo": graph({"MatMul": i})}
    if case.has_fully_masked_rows:
        typed.update(fully_masked_row="nan", fully_masked_row_declared="nan")
    outcome = Outcome.BEHAVIOUR if case.has_fully_masked_rows else Outcome.PASS
    return make_row(case.id, runner, outcome, weights_max_abs_error=i * 1e-7,
                    weights_max_rel_error=1e-6, weight_shapes={"w": [2, i]}, **typed)


def rows_for(runners):
    rows = [_row(c, r, i) for c in CASES[:3] for i, r in enumerate(runners)]
    odd = [Outcome.NOT_EXPRESSIBLE, Outcome.MISMATCH, Outcome.MISMATCH]
    rows += [make_row("odd", r, odd[i % 3], reason=f"why {i}",
                      known_mismatch="declared" if i % 3 == 2 else "")
             for i, r in enumerate(runners)]
    return rows


def report(tmp_path, rows, cases, runners) -> str:
    write_reports(rows, cases, runners, tmp_path, "test")
    return (tmp_path / "index.md").read_text() + (tmp_path / "details.md").read_text()


def section(md: str, title: str) -> str:
    """The text of one section ('' when absent)."""
    parts = md.split(f"## {title}\n")
    return parts[1].split("\n## ")[0] if len(parts) > 1 else ""


def test_every_section_shows_for_the_default_runner_families(tmp_path):
    md = report(tmp_path, rows_for(RUNNERS), CASES, RUNNERS)
    titles = [line[3:] for line in md.splitlines() if line.startswith("## ")]
    # index.md: every answer but the typed numbers (no typed data), the per-case links and
    # the run metadata; details.md: every detail but the other systems' typed numbers, and
    # the run metadata again
    assert len(titles) == len(SECTIONS) - 2 + 3
    assert titles.count("Run metadata") == 2 and "Per-case pages" in titles
    keras = section(md, "Keras: differences between backends")
    assert "| case | " + " | ".join(KERAS_COLUMNS) + " |" in keras
    masking = section(md, "ONNX graphs against eager torch: masking edge cases")
    assert ("| case | torch exports vs eager, like for like | torch.mha | onnx.torch-export |"
            in masking)  # the graphs exported from torch MHA and their eager rows only
    assert "| masked |  | nan / 1.00e-07 |" in masking and "| plain |" not in masking


def test_masking_section_compares_exports_like_for_like(tmp_path):
    """The export's output comes from a need_weights=False graph: its eager counterpart is
    the need_weights=False row, and a differing label is named in the first column."""
    from conformance.report.onnx import section_onnx_masking


    mha = "torch.nn.MultiheadAttention"
    runners = [stand_in("e.default", "torch", mha, "ordinary"),
               stand_in("e.plain", "torch", mha, "ordinary, need_weights=False"),
               stand_in("x.export", "onnx", mha, "exported graph")]
    labels = {"e.default": "nan", "e.plain": "zeros", "x.export": "nan"}
    import pandas as pd

    rows = [make_row("masked", r, "behaviour", fully_masked_row=labels[r.name]) for r in runners]
    frame = pd.DataFrame([{**r.as_dict(), "outcome": r.outcome} for r in rows], dtype=object)
    table = section_onnx_masking(frame, [CASES[1]], runners).table
    assert table.loc["masked", "torch exports vs eager, like for like"] == \
        "x.export nan vs eager zeros"
    frame.loc[frame["runner"] == "x.export", "fully_masked_row"] = "zeros"
    table = section_onnx_masking(frame, [CASES[1]], runners).table
    assert table.loc["masked", "torch exports vs eager, like for like"] == "same"


def test_a_renamed_runner_keeps_every_section(tmp_path):
    names = {f"renamed-{i}-x": r.name for i, r in enumerate(RUNNERS)}
    others = [renamed(r, new) for new, r in zip(names, RUNNERS)]
    md = report(tmp_path / "a", rows_for(RUNNERS), CASES, RUNNERS)
    md_renamed = report(tmp_path / "b", rows_for(others), CASES, others)
    for new, old in names.items():
        assert new in md_renamed
        md_renamed = md_renamed.replace(new, old)
    assert md_renamed.split(METADATA_START)[0] == md.split(METADATA_START)[0]


def test_a_keras_runner_under_another_name_keeps_its_pairs(tmp_path):
    class MyTensorFlow(Runner):
        name, framework, system = "mine", "keras", MHA
        path, backend = "fused", "tensorflow"

    runners = [MyTensorFlow(), *RUNNERS[3:]]
    md = report(tmp_path, rows_for(runners), CASES, runners)
    table = section(md, "Keras: differences between backends")
    assert "| case | " + " | ".join(KERAS_COLUMNS) + " |" in table
    assert "| plain | 1.25e-01 | 2.50e-01 |" in table


def test_keras_columns_follow_a_rule_not_a_list():
    assert [t for t, _, _ in pairs(RUNNERS[2:11])] == KERAS_COLUMNS
    more = RUNNERS[2:11] + [stand_in("k.ov", "keras", MHA, "fused", "openvino")]
    titles = [t for t, _, _ in pairs(more)]
    assert titles[:3] == ["tf − jax", "tf − torch", "tf − openvino"]
    assert pairs(RUNNERS[2:3]) == []  # one backend: nothing to compare


def test_a_toy_runner_from_the_environment_gets_every_section_that_applies(
        tmp_path, monkeypatch):
    monkeypatch.setenv(EXTRA_ENV, "tests.toy_runner:ToyRunner")
    toy = load(*registry()[-1])
    assert (toy.name, toy.framework) == ("toy.numpy", "toy")
    inputs = {"batch": 1, "query_len": 3, "key_len": 4}
    cases = [make_case(id="toy-plain", inputs=inputs),
             make_case(id="toy-masked", inputs=inputs, mask={"masked_rows": [1]},
                       expect={"behaviours": {"fully_masked_row": {"toy.numpy": "nan"}}})]
    rows = [evaluate(c, toy) for c in cases]
    assert [r.outcome for r in rows] == [Outcome.PASS, Outcome.BEHAVIOUR]
    md = report(tmp_path, rows, cases, [toy])
    assert "| toy.numpy | 1 | 1 |" in section(md, "Outcomes")
    formula = rows[0].parameters_formula
    assert f"| {formula} | {formula} |" in section(md, "Parameter counts")
    assert "| toy-plain | ✓ 0 / 0 |" in section(md, "Numerical agreement")
    assert "| case | toy.numpy |" in section(md, "Per-head attention weights")
    assert "| toy-masked | nan (weights: " in section(md, "Edge case: fully masked query rows")
    page = (tmp_path / "cases" / "toy-plain.md").read_text()
    assert "- call: toy.Attention(heads=2, features=8)" in page
    for title in ("Keras: differences", "ONNX graphs"):  # they do not apply
        assert f"## {title}" not in md


def test_the_parameter_cross_follows_the_typed_failure(tmp_path):
    runner = stand_in("r", "f")
    words = make_row("c", runner, Outcome.MISMATCH, reason="output: parameters look fine")
    counted = make_row("c", runner, Outcome.MISMATCH, failures=(parameter_failure(),))
    formula = make_row("c", runner, Outcome.MISMATCH,
                       failures=(Failure(FailureKind.FORMULA, "formula gives 9"),))
    values = make_row("c", runner, Outcome.MISMATCH,
                      failures=(Failure(FailureKind.VALUES, "output: parameters"),))
    assert [cell_parameters(r) for r in (words, counted, formula, values)] == \
        ["10", "10 ✗", "10 ✗", "10"]
    md = report(tmp_path, [counted], [FakeCase("c")], [runner])
    assert "| c | 10 | 10 ✗ |" in section(md, "Parameter counts")


def test_outcome_words_come_from_the_outcome(tmp_path):
    runner = stand_in("r", "f")
    cases = [FakeCase(o.value) for o in Outcome]
    rows = [make_row(o.value, runner, o) for o in Outcome]
    md = report(tmp_path, rows, cases, [runner])
    for title in ("Parameter counts", "Numerical agreement"):
        lines = {line.split(" |")[0][2:]: line for line in section(md, title).splitlines()
                 if line.startswith("| ")}
        assert [lines[o.value].endswith(f" {o.cell} |") for o in Outcome] == \
            [not o.ran for o in Outcome]


def _tables(text: str) -> list[list[str]]:
    """The header rows of every Markdown table in a text."""
    lines = text.splitlines()
    return [lines[i] for i in range(len(lines) - 1)
            if lines[i].startswith("| ") and lines[i + 1].startswith("|---")]


def test_answers_come_first_and_no_table_is_wider_than_eight_data_columns(tmp_path):
    many = RUNNERS + [stand_in(f"other.{i}", f"fw{i}") for i in range(10)]
    cases = CASES + [FakeCase("typed")]
    rows = rows_for(many) + [make_row("typed", r, typed={"num_heads": 4, "key_dim": 784})
                             for r in many]
    md = report(tmp_path, rows, cases, many)
    titles = [line[3:] for line in md.splitlines() if line.startswith("## ")]
    assert titles[:2] == ["Edge case: fully masked query rows",  # free typed numbers:
                          "Failures and skips"]  # details.md
    assert md.index(": details\n") > md.index("## Failures and skips")  # details.md after
    assert md.index("## Known mismatches") > md.index(": details\n")  # a detail
    for header in _tables(md):
        assert header.count(" | ") <= 8, header  # first column + at most 8 data columns
    numbers = section(md, "Numerical agreement")
    assert "**torch**" in numbers and "**keras (1 of 2)**" in numbers
    assert "**others (1 of 2)**" in numbers and "**onnx**" in numbers
    assert "| typed | num_heads=4, key_dim=784 | 10 |" in section(
        md, "Typed numbers in other cases")


def test_not_expressible_reasons_are_grouped(tmp_path):
    runners = [stand_in("a", "f"), stand_in("b", "f")]
    rows = [make_row(c, r, Outcome.NOT_EXPRESSIBLE, reason="no GQA")
            for c in ("x", "y") for r in runners]
    md = report(tmp_path, rows, [FakeCase("x"), FakeCase("y")], runners)
    table = section(md, "Not expressible")
    assert "| no GQA | x[a], x[b], y[a], y[b] |" in table
    assert table.count("no GQA") == 1


def test_the_ledger_summary_reads_conventions_json(tmp_path):
    import json

    runners = [stand_in("t.one", "torch"), stand_in("k.one", "keras")]
    ledger = {"axes": [{"id": "mask_polarity"}],
              "systems": [{"id": "t.one", "framework": "torch"},
                          {"id": "k.one", "framework": "keras"}],
              "cells": [{"system": "t.one", "axis": "mask_polarity",
                         "value": "true_blocks (bool)", "contradicts_documentation": False},
                        {"system": "k.one", "axis": "mask_polarity", "value": "true_attends",
                         "contradicts_documentation": True}]}
    tmp_path.mkdir(exist_ok=True)
    (tmp_path / "conventions.json").write_text(json.dumps(ledger))
    md = report(tmp_path, [make_row("c", r) for r in runners], [FakeCase("c")], runners)
    summary = section(md, "Conventions: where systems differ")
    # the differences-only view: systems grouped by the word a table shows
    assert "(`mask_polarity`): `true_blocks(bool)`: t.one; `true_attends`: k.one" in summary


HOSTILE = "<script>alert(1)</script> | a\rb\nc \x1b[31mred\x1b[0m <img src=x onerror=alert(2)>"


def test_free_text_is_escaped_in_markdown_and_csv(tmp_path):
    import csv

    runner = stand_in("r", "f")
    texts = dict(reason=HOSTILE, native_call=HOSTILE, known_mismatch=HOSTILE,
                 notes=(HOSTILE,), typed={"k": HOSTILE}, fully_masked_row=HOSTILE,
                 fully_masked_row_declared="nan", weight_shapes={HOSTILE: [1]})
    rows = [make_row("c", runner, Outcome.MISMATCH, **texts),
            make_row("d", runner, Outcome.NOT_EXPRESSIBLE, reason=HOSTILE),
            make_row("e", runner, Outcome.ERROR, reason=HOSTILE)]
    cases = [FakeCase("c", has_fully_masked_rows=True), FakeCase("d"), FakeCase("e")]
    write_reports(rows, cases, [runner], tmp_path, HOSTILE)
    for name in ("index.md", "cases/c.md", "cases/e.md"):
        text = (tmp_path / name).read_text()
        assert "<script" not in text and "<img" not in text and "\x1b" not in text
        assert "\r" not in text and "&lt;script&gt;" in text
    md = (tmp_path / "index.md").read_text()
    for header in _tables(md):  # no row has more cells than its header
        width = header.count("|")
        block = md.split(header, 1)[1].split("\n\n", 1)[0]
        for line in block.splitlines()[1:]:
            assert line.replace("\\|", "").count("|") == width, line
    with open(next((tmp_path / "results").glob("*.csv")), newline="") as f:
        records = list(csv.DictReader(f))
    assert all("\x1b" not in v and "\r" not in v and "\n" not in v
               for r in records for v in r.values())


def test_one_exported_model_is_shown_in_each_runtime_beside_eager_torch():
    """Acceptance 2 of #22: per (deployment framework, backend) the first runner of the
    exported torch module, beside the like-for-like eager row, on the fully masked row,
    key padding and causal cases; chosen by descriptors, so ExecuTorch joins when it
    exists, and a second export on the same runtime does not."""
    import pandas as pd

    from conformance.report.onnx import section_export_runtimes

    mha = "torch.nn.MultiheadAttention"
    runners = [stand_in("e.default", "torch", mha, "ordinary"),
               stand_in("e.plain", "torch", mha, "ordinary, need_weights=False"),
               stand_in("x.dynamo", "onnx", mha, "exported graph", "onnxruntime"),
               stand_in("x.legacy", "onnx", mha, "exported graph", "onnxruntime"),
               stand_in("ov", "openvino", mha, "converted model", "OpenVINO CPU"),
               stand_in("et", "executorch", mha, "xnnpack", "ExecuTorch XNNPACK"),
               stand_in("k.export", "onnx", "keras.layers.MultiHeadAttention", "g", "onnxruntime")]
    causal = SimpleNamespace(id="causal", has_fully_masked_rows=False,
                             mask=SimpleNamespace(key_padding=None, causal="lower_right"))
    cases = [CASES[0], CASES[1], CASES[2], causal]
    rows = [make_row(c.id, r, "behaviour" if c.has_fully_masked_rows else "pass",
                     fully_masked_row="nan" if c.has_fully_masked_rows else None)
            for c in cases for r in runners]
    frame = pd.DataFrame([{**r.as_dict(), "outcome": r.outcome} for r in rows], dtype=object)
    table = section_export_runtimes(frame, cases, runners).table
    assert list(table.columns) == ["e.plain (eager)", "x.dynamo (onnxruntime)",
                                   "ov (OpenVINO CPU)", "et (ExecuTorch XNNPACK)"]
    assert list(table.index) == ["masked", "padded", "causal"]
    assert table.loc["masked", "ov (OpenVINO CPU)"].startswith("nan / ")
    eager_only = frame[frame["framework"] == "torch"]
    assert section_export_runtimes(eager_only, cases, runners) is None
