"""The ONNX specification's Attention test vectors per engine (runners/onnx/spec_vectors.py,
spec_cache.py, report/spec_vectors.py): generation, judging with planted defects, the
cache, the report files and check-reports' rule for them."""
from __future__ import annotations

import json
import subprocess
import sys
from types import SimpleNamespace

import numpy as np
import pytest

onnx = pytest.importorskip("onnx", reason="onnx not installed (pip install -e '.[onnx]')")

from conformance.report import spec_vectors as report  # noqa: E402
from conformance.report.drift import compare_file, report_names  # noqa: E402
from conformance.runners.onnx import spec_cache, spec_vectors as sv  # noqa: E402

SUBSET = ("test_attention_4d", "test_attention_4d_causal",
          "test_attention_4d_with_past_and_present_qk_matmul_bias_3d_mask_causal")


@pytest.fixture(scope="module")
def cases():
    return sv.generate()


@pytest.fixture(scope="module")
def subset(cases):
    by = {c.name: c for c in cases}
    return [by[n] for n in SUBSET]


def test_the_case_code_yields_the_attention_cases_of_opsets_23_to_25(cases):
    names = [c.name for c in cases]
    assert len(names) >= 90 and len(set(names)) == len(names)
    assert {c.opset for c in cases} == {23, 24, 25}
    for c in cases[:5]:  # each a valid one-node model whose inputs are fed by name
        model = onnx.load_from_string(c.model)
        onnx.checker.check_model(model)
        assert [n.op_type for n in model.graph.node] == ["Attention"]
        assert set(c.inputs) == {i.name for i in model.graph.input}
    # generating again gives the same data (the metaclass seeds NumPy before each export)
    again = {c.name: c for c in sv.generate()}
    first = cases[0]
    assert all(np.array_equal(a, again[first.name].outputs[k][1])
               for k, (_, a) in enumerate(first.outputs))


def test_a_subset_passes_in_the_reference_and_onnxruntime_keeps_its_fill(subset):
    rows = sv.run_engine("onnx.reference", subset)
    assert [r["outcome"] for r in rows] == ["pass"] * len(subset)
    pytest.importorskip("onnxruntime")
    rows = {r["case"]: r for r in sv.run_engine("onnxruntime", subset)}
    assert rows["test_attention_4d"]["outcome"] == "pass"
    assert rows["test_attention_4d_causal"]["outcome"] == "pass"
    # onnxruntime 1.32 writes -FLT_MAX into masked logits where the spec data holds -inf
    fill = rows[SUBSET[2]]
    assert (fill["outcome"], fill["kind"]) == ("fail", "nonfinite")
    assert "finfo_min" in fill["reason"] and "qk_matmul_output" in fill["reason"]


def _planted(case, change):
    outputs = list(case.outputs)
    name, want = outputs[0]
    outputs[0] = (name, change(want.copy()))
    return sv.SpecCase(case.name, case.opset, case.model, case.inputs, tuple(outputs))


@pytest.mark.parametrize("change, kind", [
    (lambda y: y + np.float32(0.01), "values"),
    (lambda y: np.where(np.arange(y.size).reshape(y.shape) == 0, -np.inf, y).astype(y.dtype),
     "nonfinite"),
    (lambda y: y.astype(np.float64), "dtype"),
    (lambda y: y[..., :-1], "shape"),
])
def test_a_planted_wrong_expected_output_is_a_fail(subset, change, kind):
    row = sv.run_case("onnx.reference", _planted(subset[0], change))
    assert (row["outcome"], row["kind"]) == ("fail", kind)
    assert row["reason"].startswith("Y: ")


def test_a_within_tolerance_change_still_passes(subset):
    row = sv.run_case("onnx.reference", _planted(subset[0], lambda y: y * np.float32(1 + 1e-5)))
    assert row["outcome"] == "pass"


def test_an_engine_error_is_a_refusal_with_a_normalised_message(subset):
    def boom(case):
        raise RuntimeError("[ONNXRuntimeError] : 1 : FAIL : Non-zero status code returned while "
                           "running Attention node. Name:'n_7' Status Message: /src/ort/core/"
                           "attention_helper.h:164 onnxruntime::common::Status onnxruntime::"
                           "helper::Compute(const onnxruntime::Tensor*, int) x == y was false. "
                           "inconsistent length at 0x7f3a2b")
    sv.RUN["fake"] = boom
    try:
        row = sv.run_case("fake", subset[0])
    finally:
        del sv.RUN["fake"]
    assert row["outcome"] == "refuse"
    text = row["reason"]
    assert text.startswith("RuntimeError: ") and "inconsistent length" in text
    for noise in ("/src/", "attention_helper.h", "onnxruntime::helper", "0x7f3a2b", "n_7"):
        assert noise not in text


def test_results_are_cached_by_versions_and_a_crashed_engine_is_an_error(tmp_path,
                                                                        monkeypatch):
    monkeypatch.setenv("CONFORMANCE_CACHE_DIR", str(tmp_path))
    rows = [{"case": "test_attention_4d", "runner": "onnx.reference", "opset": 23,
             "outcome": "pass", "kind": "", "reason": "", "max_abs_error": 0.0}]
    spec_cache.CACHE.put(spec_cache._key("onnx.reference"), json.dumps(rows).encode())

    def crash(engine, native=False):  # an engine whose process dies of SIGSEGV
        return subprocess.Popen([sys.executable, "-c", "import os, signal; "
                                 "os.kill(os.getpid(), signal.SIGSEGV)"],
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)

    monkeypatch.setattr(spec_cache, "_start", crash)
    got = spec_cache.spec_results(("onnx.reference", "openvino"))
    assert got["cached"] == ["onnx.reference"]  # read back: no process started for it
    assert got["rows"][0] == rows[0]
    dead = got["rows"][1]
    assert (dead["runner"], dead["outcome"]) == ("openvino", "error")
    assert "SIGSEGV" in dead["reason"]
    assert spec_cache.CACHE.get(spec_cache._key("openvino")) is None  # never cached


def _spec(outcome="fail", reason="Y: beyond rtol 0.001 (max abs error 6.53e-02)", err=0.0653):
    rows = [{"case": "test_attention_4d", "runner": "onnxruntime", "opset": 23,
             "outcome": "pass", "kind": "", "reason": "", "max_abs_error": 1.2e-07},
            {"case": "test_attention_4d", "runner": "openvino", "opset": 23,
             "outcome": outcome, "kind": "values" if outcome == "fail" else "",
             "reason": reason, "max_abs_error": err}]
    return {"engines": ["onnxruntime", "openvino"], "rows": rows, "cached": [],
            "versions": {"onnxruntime": {"onnx": "1"}, "openvino": {"onnx": "1"}}}


def _written(tmp_path, name, spec):
    folder = tmp_path / name
    folder.mkdir()
    report.write_spec_vectors(spec, folder)
    return folder


def test_check_reports_compares_outcomes_exactly_and_figures_by_kind(tmp_path):
    base = _written(tmp_path, "a", _spec())
    moved = _written(tmp_path, "b", _spec(reason="Y: beyond rtol 0.001 (max abs error 7.1e-02)",
                                          err=0.071))
    flipped = _written(tmp_path, "c", _spec(outcome="pass", reason="", err=1e-7))
    assert set(report.SPEC_FILES) <= set(report_names(base))

    def changes(a, b):
        return [c for n in report.SPEC_FILES
                for c in compare_file(n, (a / n).read_text(), (b / n).read_text())]

    assert changes(base, moved) == []  # another CPU: other figures, same outcomes
    found = changes(base, flipped)
    assert any(c.field == "outcome" and c.runner == "openvino" for c in found)
    assert any(c.file == report.SPEC_MD for c in found)


def test_the_page_and_the_summary_line_escape_what_they_read_back(tmp_path):
    spec = _spec(reason="<script>alert(1)</script> | bad")
    spec["rows"][1]["case"] = "test_<b>x</b>"
    folder = _written(tmp_path, "a", spec)
    page = (folder / report.SPEC_MD).read_text()
    assert "<script>" not in page and "<b>" not in page and "\\|" in page
    text = report.summary_finding(folder).text
    assert "onnxruntime 1 pass" in text and "openvino 1 fail" in text
    (folder / report.SPEC_JSON).write_text('{"summary": [1, 2')  # damaged: no line, no crash
    assert report.summary_finding(folder) is None


def test_a_finding_lands_in_the_evidence_of_the_ledger_cell_it_bears_on():
    from conformance.conventions.ledger import Ledger, LedgerCell, System

    systems = [System("op.ort", "m:C", True, "onnx", "onnx Attention-23", "graph", "onnxruntime"),
               System("export.ort", "m:D", True, "onnx", "torch.nn.MultiheadAttention",
                      "exported graph", "onnxruntime")]
    cells = [LedgerCell(s.id, a, "-inf", "probe") for a in ("mask_fill", "softcap")
             for s in systems]
    spec = {"rows": [{"case": SUBSET[2], "runner": "onnxruntime", "opset": 23,
                      "outcome": "fail", "kind": "nonfinite", "max_abs_error": 0.0,
                      "reason": "qk_matmul_output: the data holds -inf at 84 element(s) where "
                                "the engine wrote -3.4028235e+38 (finfo_min)"}]}
    out = report.annotate(Ledger(systems, cells), spec)
    annotated = [c for c in out.cells if c.evidence != "probe"]
    assert [(c.system, c.axis) for c in annotated] == [("op.ort", "mask_fill")]
    assert "finfo_min" in annotated[0].evidence and annotated[0].value == "-inf"


def test_only_a_run_with_a_runner_on_an_engine_wants_the_vectors():
    runners = [SimpleNamespace(name="a", backend=""),
               SimpleNamespace(name="b", backend="OpenVINO CPU")]
    assert not report.wanted([SimpleNamespace(runner="a")], runners)
    assert report.wanted([SimpleNamespace(runner="b")], runners)


def test_the_headline_finding_is_in_index_md_and_html_and_kept_when_re_rendered(tmp_path):
    from conformance.__main__ import main
    from conformance.report import write_reports

    from .report_rows import FakeCase, make_row, stand_in

    runner = stand_in("f.one", "f", "f.Attention")
    folder = _written(tmp_path, "run", _spec())
    write_reports([make_row("a", runner)], [FakeCase("a")], [runner], folder, "full")
    line = "The ONNX specification's test vectors"
    assert line in (folder / "index.md").read_text()
    page = (folder / "index.html").read_text()
    assert "test vectors</strong>" in page and 'href="spec_vectors.md"' in page
    (folder / "index.md").unlink()
    assert main(["report", "--results", str(folder / "results.json")]) == 0
    assert line in (folder / "index.md").read_text()  # spec_vectors.json is kept and read
    assert (folder / report.SPEC_MD).is_file()


@pytest.mark.parametrize("fill, word", [(-np.inf, "-inf"),
                                        (float(np.finfo(np.float32).min), "finfo_min"),
                                        (-1e9, "-1e9"), (-12.5, None)])
def test_the_attention_op_fill_is_read_from_the_masked_scores(fill, word):
    """The Attention-op runners' own mask_fill reading (attention_op_facts, no oracle: the
    tie-break of the ledger's mask_fill probe) names what the masked positions of
    qk_matmul_output (mode 2) hold as a number, which the ledger names (masks.shown_word);
    a planted fill is named, one no fill word has and a mixed one are no word."""
    from conformance.conventions.axes import Convention
    from conformance.conventions.probes.masks import shown_word
    from conformance.runners.onnx import attention_op_facts as facts
    from conformance.runners.onnx.attention_op import OnnxAttentionOp, attention_plan, build_model

    class Planted(OnnxAttentionOp):
        def execute(self, model, feed, dtype):
            out, w = super().execute(model, feed, dtype)
            if "attn_mask" in feed:
                w = np.where(np.broadcast_to(feed["attn_mask"], w.shape), w, fill)
            return out, w

    def graph(case, data, mask=None, **fields):
        from dataclasses import replace
        return build_model(case, data, replace(attention_plan(case), **fields), mask)

    from conformance.conventions.probes.api_facts import as_cell

    fact = facts.masked_score_fact(Planted(engine="reference"), graph, "planted")
    cell = as_cell(Planted(engine="reference"), fact)
    assert fact.about == "masked_score" and cell.axis == "mask_fill", cell
    assert shown_word(cell) == word, (cell.value, cell.evidence)
    assert facts.held_number(np.array([-np.inf, -1e9])) == "several"
    assert shown_word(Convention("mask_fill", "several", "")) is None


def test_an_engine_that_is_not_installed_is_one_skipped_row(monkeypatch):
    import importlib.util

    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec",
                        lambda name, *a: None if name == "openvino" else real(name, *a))
    rows = sv.run_engine("openvino")
    assert [(r["case"], r["outcome"], r["reason"]) for r in rows] == [
        ("(all)", "skipped", "openvino not installed")]
