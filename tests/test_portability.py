"""check-reports across CPUs, the cases measured after part 1 of issue #18: the sse4.2 run of
benchmarks/portability.py against the committed (AVX-512) reports named 80 changes from
texts and figures added later.  Each test plants the CPU-moved variant measured there and
shows check-reports ignores it, then plants a real change (an outcome, a word, a failure's
tensor) and shows it is still named."""
from __future__ import annotations

import json

from conformance.compare.verdict import Failure, FailureKind, Outcome
from conformance.conventions.axes import AXES
from conformance.conventions.ledger import LedgerCell
from conformance.report import compare_reports, differences
from conformance.report.drift import compare_ledger
from conformance.report.masking import mask, texts_agree

from .report_rows import replace
from .test_drift import CASES, KERAS, TORCH, ledger, rows, write

# onnx.attention-op.ort's float64_compute: the matrix row, quoted as the second witness
SECOND = ("below_float64: dtype-float64[k.one]: max abs error {} against the float64 oracle "
          "(atol 1e-12, rtol 1e-12); known: the split float32 scale")


def _with_second(second: str, value: str = "refused"):
    led = ledger()
    cells = [replace(c, witnesses=2, second=second) if c.axis == "unbatched_input" else c
             for c in led.cells]
    return type(led)(led.systems, cells, axes=led.axes)


def test_a_second_witness_quoting_a_moved_error_figure_holds(tmp_path):
    """conventions.json's second_witness quotes the row's max abs error (9 changes in the
    sse4.2 run: 7.17e-08 -> 7.15e-08 and the like)."""
    base = write(tmp_path, "here", rows(), _with_second(SECOND.format("7.17e-08")))
    moved = write(tmp_path, "there", rows(), _with_second(SECOND.format("7.15e-08")))
    assert (base / "conventions.json").read_text() != (moved / "conventions.json").read_text()
    assert differences(base, moved) == []


def test_a_second_witness_word_or_count_of_witnesses_is_still_named():
    old = _with_second(SECOND.format("7.17e-08")).as_dict()
    worded = _with_second(SECOND.format("7.17e-08").replace("below_float64", "float64"))
    [change] = compare_ledger(json.dumps(old), json.dumps(worded.as_dict()))
    assert (change.runner, change.field) == ("unbatched_input", "second_witness")
    one = json.loads(json.dumps(old))
    one["cells"][0]["witnesses"] = 1
    [change] = compare_ledger(json.dumps(old), json.dumps(one))
    assert (change.field, change.old, change.new) == ("witnesses", 2, 1)


NAN_SPREAD = "attention weights: {} of {} values differ beyond rtol=1.3e-06, atol=1e-05"


def _spread_rows(found: int, compared: int, kind=FailureKind.WEIGHTS, text=NAN_SPREAD):
    message = text.format(found, compared)
    the_rows = rows()
    the_rows[1] = replace(the_rows[1], outcome=Outcome.MISMATCH, reason=message,
                          failures=(Failure(kind, message),),
                          known_mismatch="the NaN of a masked-out key spreads into the weights")
    return the_rows


def test_the_element_count_of_a_nan_spread_known_mismatch_holds(tmp_path):
    """OpenVINO's NaN-spread weights on extreme-nan-key: 80 of 100 values differ on AVX-512,
    60 of 80 under oneDNN SSE4.1 (the finite elements compared move too)."""
    base = write(tmp_path, "here", _spread_rows(80, 100))
    moved = write(tmp_path, "there", _spread_rows(60, 80))
    for name in ("results/k.one.json", "results/k.one.csv", "details.md", "index.html"):
        assert (base / name).read_text() != (moved / name).read_text(), name
    assert differences(base, moved) == []


def test_a_failure_on_another_tensor_or_of_another_kind_is_still_named(tmp_path):
    base = write(tmp_path, "here", _spread_rows(80, 100))
    output = _spread_rows(80, 100, FailureKind.VALUES, NAN_SPREAD.replace("attention weights",
                                                                          "output"))
    found = {(c.file, c.field) for c in compare_reports(base, write(tmp_path, "out", output))}
    assert {("results/k.one.json", "failures"), ("results/k.one.json", "failure_kinds"),
            ("results/k.one.json", "reason")} <= found
    nan = _spread_rows(80, 100, text="attention weights: {} of {} values are NaN/inf where "
                       "the reference has numbers")
    found = {(c.file, c.field) for c in compare_reports(base, write(tmp_path, "nan", nan))}
    assert ("results/k.one.json", "failures") in found
    assert ("results/k.one.csv", "failures") in found
    passed = _spread_rows(80, 100)
    passed[1] = replace(passed[1], outcome=Outcome.PASS, reason="", failures=())
    found = {(c.file, c.field) for c in compare_reports(base, write(tmp_path, "ok", passed))}
    assert {("results/k.one.json", "outcome"), ("results/k.one.json", "failure_kinds")} <= found


def test_mask_counts_elements_of_a_verdict_only():
    assert mask(NAN_SPREAD.format(80, 100)) == mask(NAN_SPREAD.format(60, 80))
    assert "‹n› of ‹n› values differ" in mask(NAN_SPREAD.format(80, 100))
    for kept in ("4 of 12 heads", "2 of 3 cases", "384 rows"):  # other counts stay exact
        assert mask(kept) == kept
    assert not texts_agree("3 of 4 heads", "2 of 4 heads")


# flax.nnx.x64's dropout probe: index.html cuts ledger evidence at 60 characters, right
# after the first digit of a CPU figure ("... deterministic=True 1." from "1.0e-07")
DROPOUT = ("probe[k.one]: dropout_rate=0.5: deterministic=True {} from the oracle, "
           "deterministic=False 1.0e+00 (the call's deterministic flag)")


def _dropout(figure: str, lead: str = "probe[k.one]: dropout_rate=0.5: deterministic=True "):
    led = ledger()
    text = DROPOUT.format(figure).replace("probe[k.one]: dropout_rate=0.5: deterministic=True ",
                                          lead)
    cells = [*led.cells, LedgerCell("k.one", "dropout", "training_flag", text, source="probe")]
    axes = (*led.axes, *(a for a in AXES if a.id == "dropout"))
    return type(led)(led.systems, cells, axes=axes)


def test_a_figure_cut_by_the_pages_length_limit_holds(tmp_path):
    from conformance.report.html import EVIDENCE_LIMIT

    label = "probe[k.one]: "  # the page says the system and the source, not this label
    shown = "deterministic=True x".ljust(EVIDENCE_LIMIT - 4, "x") + " "
    pad = label + shown
    base = write(tmp_path, "here", rows(), _dropout("1.0e-07", pad))
    moved = write(tmp_path, "there", rows(), _dropout("9.9e-08", pad))
    page = (base / "index.html").read_text()
    assert shown + "1.…" in page and shown + "9.…" in (moved / "index.html").read_text()
    assert differences(base, moved) == []
    worded = write(tmp_path, "worded", rows(), _dropout("1.0e-07", pad.replace("True", "Fals")))
    found = {c.file for c in compare_reports(base, worded)}
    assert {"index.html", "conventions.json", "conventions/dropout.md"} <= found


def test_mask_of_a_cut_figure():
    assert mask("deterministic=True 1.…") == mask("deterministic=True 9.…")
    assert mask("max abs 1.0e-…") == mask("max abs 3.4e+…")
    assert mask("opset 23…") == mask("opset 24…")  # cut: the whole text is compared elsewhere
    assert mask("opset 23 …") != mask("opset 24 …")  # not cut: an integer is exact
    assert mask("onnxruntime 1.32.0") == "onnxruntime 1.32.0"  # a version is not a figure


DRIFT = {"libraries": [{"id": "keras.jax", "changes": [
    {"kind": "convention", "cell": "float_mask", "old_value": "uniform_where_zero",
     "new_value": "cast_to_bool", "first_release": "3.7.0"}]}]}


def _run_reports(tmp_path, monkeypatch, out, drift=DRIFT):
    """A run's reports into `out` (the run's --report-dir), the committed folder standing
    in at tmp_path/committed with its drift report."""
    from conformance import paths
    from conformance.report.run_reports import write_run_reports

    committed = tmp_path / "committed"
    committed.mkdir(exist_ok=True)
    (committed / "drift.json").write_text(json.dumps(drift))
    (committed / "drift.md").write_text("# drift\n")
    monkeypatch.setattr(paths, "REPORTS_DIR", committed)
    the_rows = {(r.case, r.runner): r for r in rows()}
    write_run_reports(the_rows, {}, CASES, [TORCH, KERAS], out, "full", {})
    return (out / "index.md").read_text()


def test_a_run_into_a_folder_without_a_drift_report_keeps_the_drift_headline(
        tmp_path, monkeypatch):
    """The sse4.2 run's --out folder had no drift.json: its headline lost the committed
    folder's drift sentence (a change).  The run takes the committed drift report."""
    fresh = _run_reports(tmp_path, monkeypatch, tmp_path / "fresh")
    assert "**Which release changed it** (keras.jax)" in fresh and "3.7.0" in fresh
    assert (tmp_path / "fresh" / "drift.md").read_text() == "# drift\n"  # the link works
    own = tmp_path / "own"
    own.mkdir()
    mine = json.loads(json.dumps(DRIFT))
    mine["libraries"][0]["changes"][0]["first_release"] = "3.8.0"
    (own / "drift.json").write_text(json.dumps(mine))  # a folder's own report wins
    assert "3.8.0" in _run_reports(tmp_path, monkeypatch, own)


def test_a_changed_drift_headline_is_still_named(tmp_path, monkeypatch):
    _run_reports(tmp_path, monkeypatch, tmp_path / "here")
    other = json.loads(json.dumps(DRIFT))
    other["libraries"][0]["changes"][0]["new_value"] = "cast_to_float"
    _run_reports(tmp_path, monkeypatch, tmp_path / "there", other)
    found = [c for c in compare_reports(tmp_path / "here", tmp_path / "there")
             if c.file == "index.md"]
    assert found and "cast_to_float" in str(found[0].new)


def _clusters(flipped: bool = False, suspect: bool = False):
    """One case's clusters as measured on one CPU, and the same case where one runner's
    output left the largest group (its NaN pattern moved with the kernel)."""
    from conformance.report.clusters import CaseClusters

    big = ["torch.mha", "keras.jax", "flax.nnx"]
    groups = [big, ["mlx.sdpa"]] if not flipped else [big[:2], ["flax.nnx"], ["mlx.sdpa"]]
    kinds = [sorted({"torch", "keras", "flax"} if len(g) == 3 else {"torch", "keras"})
             if len(g) > 1 else [g[0].split(".")[0]] for g in groups]
    return CaseClusters("masked-kv-nan", groups, kinds, None if suspect else 0, suspect)


def _cluster_files(found):
    from conformance.report.clusters import section_clusters
    from conformance.report.pages import _cluster_lines
    from conformance.report.render import _section_md

    return {"details.md": "\n".join(["# details", ""] + _section_md(section_clusters([found]))
                                    + ["## Next", "", "- kept"]),
            "cases/masked-kv-nan.md": "\n".join(["# masked-kv-nan", ""] + _cluster_lines(found)
                                                + ["## Runners", "", "- kept"]),
            "agreement.json": json.dumps({"cases": [found.as_dict()],
                                          "reference_suspect": []})}


def test_a_flipped_cluster_membership_holds_its_verdict_is_compared(tmp_path):
    """One agreement cluster flipped in the sse4.2 run: membership is display only (like a
    figure); the case's verdict (with the largest group, apart, reference suspect) and the
    list of undeclared suspects are compared in agreement.json, details.md and the page."""
    from conformance.report.drift import compare_file

    here, there = _cluster_files(_clusters()), _cluster_files(_clusters(flipped=True))
    for name in ("details.md", "cases/masked-kv-nan.md", "agreement.json"):
        assert here[name] != there[name], name
        assert compare_file(name, here[name], there[name]) == [], name
    suspect = _cluster_files(_clusters(suspect=True))
    for name in ("details.md", "cases/masked-kv-nan.md", "agreement.json"):
        assert compare_file(name, here[name], suspect[name]), name
    [change] = compare_file("agreement.json", here["agreement.json"], suspect["agreement.json"])
    assert (change.case, change.old, change.new) == ("masked-kv-nan", "with the largest group",
                                                     "reference suspect")
    listed = json.loads(suspect["agreement.json"])
    listed["reference_suspect"] = ["masked-kv-nan"]
    assert compare_file("agreement.json", suspect["agreement.json"], json.dumps(listed))


def test_membership_masking_touches_the_cluster_sections_only():
    from conformance.report.clusters import membership_masked

    text = ("## Agreement clusters\n\n| case | groups | reference |\n|---|---|---|\n"
            "| a | x, y (p, q) | with the largest group |\n- x, y: 2 implementation(s)\n"
            "## Runners\n\n- torch.mha: pass\n| a | b | c |")
    masked = membership_masked(text)
    assert "| a | ‹groups› | with the largest group |" in masked
    assert "x, y" not in masked and "- torch.mha: pass" in masked and "| a | b | c |" in masked


def test_a_workers_flags_join_the_callers_xla_flags():
    """Under the sse4.2 profile the Keras JAX worker ran without --xla_cpu_max_isa=AVX: the
    Keras workers' single-thread XLA_FLAGS replaced the caller's.  Joined now; any other
    variable of a worker still replaces the caller's."""
    from conformance.run.workers import worker_env
    from conformance.runners._export.keras_mha import SINGLE_THREAD

    env = worker_env(SINGLE_THREAD, {"XLA_FLAGS": "--xla_cpu_max_isa=AVX", "PATH": "/bin"})
    assert env["XLA_FLAGS"].split() == ["--xla_cpu_max_isa=AVX",
                                        *SINGLE_THREAD["XLA_FLAGS"].split()]
    assert env["PATH"] == "/bin" and env["OMP_NUM_THREADS"] == "1"
    assert worker_env(SINGLE_THREAD, {})["XLA_FLAGS"] == SINGLE_THREAD["XLA_FLAGS"]
    assert worker_env({"OMP_NUM_THREADS": "1"}, {"OMP_NUM_THREADS": "8"}) == {
        "OMP_NUM_THREADS": "1"}


def test_openvinos_compiled_kernel_list_is_display_only_its_operations_are_not():
    """The sse4.2 run: OpenVINO compiled fill-1e4 into a fused Subgraph on AVX-512 and into
    Eltwise, MatMul and Softmax kernels under SSE4.1 (21 rows)."""
    from conformance.report.drift import field_agrees

    def extras(kernels, operations=("MatMul", "Softmax")):
        return {"mask_polarity": "True = blocked", "openvino": {
            "operations": list(operations), "kernels": list(kernels)}}

    fused = extras(["Const", "FullyConnected", "Subgraph"])
    split = extras(["Const", "Eltwise", "FullyConnected", "MatMul", "Softmax"])
    assert field_agrees("extras", fused, split)
    assert fused["openvino"]["kernels"] == ["Const", "FullyConnected", "Subgraph"]  # unchanged
    assert not field_agrees("extras", fused, extras(["Subgraph"], ("MatMul", "Select")))
