"""Report sections select rows by framework and typed fields, never by runner name:
a renamed runner keeps its sections, a runner added out of tree gets every section
that applies to it, and the parameter ✗ follows the typed failure.  Pure NumPy and
pandas: rows and runners are built by hand."""
from __future__ import annotations

from conformance.contract import Runner
from conformance.matrix import evaluate
from conformance.report import METADATA_START, SECTIONS, write_reports
from conformance.report.keras import pairs
from conformance.report.sections import cell_parameters
from conformance.runners import EXTRA_ENV, load, registry
from conformance.verdict import Failure, FailureKind, Outcome

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
    return (tmp_path / "index.md").read_text()


def section(md: str, title: str) -> str:
    """The text of one section ('' when absent)."""
    parts = md.split(f"## {title}\n")
    return parts[1].split("\n## ")[0] if len(parts) > 1 else ""


def test_every_section_shows_for_the_default_runner_families(tmp_path):
    md = report(tmp_path, rows_for(RUNNERS), CASES, RUNNERS)
    titles = [line[3:] for line in md.splitlines() if line.startswith("## ")]
    assert len(titles) == len(SECTIONS) + 1  # and the run metadata
    keras = section(md, "Keras: differences between backends")
    assert "| case | " + " | ".join(KERAS_COLUMNS) + " |" in keras
    masking = section(md, "ONNX graphs against eager torch: masking edge cases")
    assert "| case | torch.mha | onnx.torch-export | onnx.keras-export |" in masking
    assert "| masked | nan / 1.00e-07 |" in masking and "| plain |" not in masking


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
    assert "toy.Attention(heads=2, features=8)" in section(md, "How each system was called")
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
    assert "| c |  | 10 | 10 ✗ |" in section(md, "Parameter counts")


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
