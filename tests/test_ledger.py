"""The conventions ledger: cells derived from rows and probes, its files, and pinning."""
from __future__ import annotations

import json
import os
import re
from pathlib import Path

import pytest

from conformance.conventions.axes import AXES, AXIS_IDS, Convention
from conformance.contract.runner import Runner
from conformance.conventions.ledger import NOT_PROBED, build, derive
from conformance.run.evaluate import Row
from conformance.paths import REPORTS_DIR
from conformance.report.ledger import (
    MAX_COLUMNS, escape, render_axis_page, render_json, render_markdown)
from conformance.runners import runner_names
from conformance.compare.verdict import Failure, FailureKind, Outcome

from .helpers import make_case

pytest_plugins = ["pytester"]

_ROW = dict(reason="", dtype="float32", native_call="", executed=True, parameters=None,
            parameters_formula=1024, parameters_expected=None, projection_parameters=None,
            max_abs_error=None, max_rel_error=None, weights_max_abs_error=None,
            weights_max_rel_error=None, rtol=1e-5, atol=1e-6, weights_returned="",
            fully_masked_row=None, fully_masked_row_weights=None,
            fully_masked_row_declared=None, weight_shapes={}, notes=(), extras={}, typed={},
            failures=(), known_mismatch="")


def row(case: str, runner: str, outcome=Outcome.PASS, **fields) -> Row:
    ran = {"native_call": f"{runner}()", "parameters": 1024, "max_abs_error": 1e-7,
           "weights_returned": "none"} if Outcome(outcome).ran else {}
    return Row(case=case, runner=runner, framework=fields.pop("framework", "fake"),
               outcome=Outcome(outcome), **{**_ROW, **ran, **fields})


def fake(name: str, framework: str = "fake", probes=(), raises: Exception | None = None):
    def conventions(self):
        if raises:
            raise raises
        return list(probes)
    cls = type("Fake", (Runner,), {"name": name, "framework": framework, "system": "fake.api",
                                   "conventions": conventions, "target": "tests:Fake"})
    return cls()


A, B = fake("fake.a"), fake("fake.b")
ROWS = [
    row("masked", "fake.a", Outcome.BEHAVIOUR, fully_masked_row="nan",
        fully_masked_row_weights="nan", weights_returned="averaged"),
    row("masked", "fake.b", Outcome.BEHAVIOUR, fully_masked_row="zeros",
        weights_returned="per_head"),
    row("f64", "fake.a", dtype="float64", max_abs_error=2e-16, atol=1e-12,
        weight_shapes={"in_proj_weight": [96, 32], "out_proj.weight": [32, 32]}),
    row("f64", "fake.b", Outcome.MISMATCH, dtype="float64", max_abs_error=1.9e-8, atol=1e-12,
        failures=(Failure(FailureKind.VALUES, "output: 1.9e-8"),), known_mismatch="float32 scale",
        weight_shapes={"mha/query/kernel": [32, 4, 8], "mha/query/bias": [4, 8]}),
    row("gqa", "fake.a", Outcome.NOT_EXPRESSIBLE, reason="grouped-query: kv heads 2 < 8"),
    row("gqa", "fake.b", parameters=999),
    row("skip", "fake.b", Outcome.SKIPPED, reason="fake not installed"),
]
CASES = [make_case(id="f64", attention={"num_heads": 4, "query_features": 32}),
         make_case(id="masked"), make_case(id="gqa")]


def cells_of(cells, system):
    return {c.axis: c for c in cells if c.system == system}


def test_derive_settles_the_axes_the_matrix_settles():
    a, b = (cells_of(derive(ROWS, [A, B], CASES), n) for n in ("fake.a", "fake.b"))
    assert a["fully_masked_row"].value == "nan" and b["fully_masked_row"].value == "zeros"
    assert "masked[fake.a]: output nan, returned weights nan" in a["fully_masked_row"].evidence
    assert a["returned_weights"].value == "head_averaged"
    assert b["returned_weights"].value == "per_head"
    assert a["float64_compute"].value == "float64"
    assert b["float64_compute"].value == "below_float64"
    assert "1.90e-08" in b["float64_compute"].evidence
    assert "f64[fake.b]" in b["float64_compute"].evidence
    assert a["parameter_formula"].value == "canonical"
    assert b["parameter_formula"].value == "differs" and "999" in b["parameter_formula"].evidence
    assert a["weight_layout"].value == "in_proj_weight (3E, E) out x in"
    assert b["weight_layout"].value == "mha/query/kernel (E, H, d_k) in x heads x dim"
    assert a["refusals"].value == "1 kind" and "grouped-query" in a["refusals"].evidence
    assert "1 of 3 case(s)" in a["refusals"].evidence  # a skipped row is not counted
    assert b["refusals"].value == "none"


def test_float64_refused_and_model_rows_settle_only_what_a_model_can():
    rows = [row("f64", "fake.a", Outcome.NOT_EXPRESSIBLE, dtype="float64",
                reason="float64: a dlarray holds single or double"),
            row("m", "fake.m", dtype="float64", executed=False, max_abs_error=0.0,
                fully_masked_row="nan", weights_returned="per_head")]
    a = cells_of(derive(rows, [A]), "fake.a")
    assert a["float64_compute"].value == "refused" and "dlarray" in a["float64_compute"].evidence
    m = cells_of(derive(rows, [fake("fake.m")]), "fake.m")
    assert set(m) == {"returned_weights", "parameter_formula", "refusals"}


def test_build_probe_wins_and_every_axis_is_a_cell():
    probe = Convention("fully_masked_row", "uniform", "probe-masked: uniform 0.0",
                       documented="nan", documented_source="https://example.org/doc")
    never = fake("fake.never")
    ledger = build(ROWS, {"fake.a": [probe], "fake.b": []}, [A, B, never], CASES)
    assert len(ledger.cells) == len(AXES) * 3
    assert [(c.axis, c.system) for c in ledger.cells[:3]] == [
        (AXES[0].id, "fake.a"), (AXES[0].id, "fake.b"), (AXES[0].id, "fake.never")]
    won = ledger.cell("fake.a", "fully_masked_row")  # the rows read nan: two witnesses differ
    assert won.value == "conflict" and won.source == "probe" and won.witnesses == 2
    assert "'uniform' (probe[fake.a]: probe-masked" in won.evidence and "'nan'" in won.evidence
    assert won.contradicts_documentation
    assert ledger.cell("fake.b", "fully_masked_row").value == "zeros"
    gap = ledger.cell("fake.b", "softmax_scale")
    assert gap.value == NOT_PROBED
    assert gap.evidence == "no probe or row settles this axis for fake.b"
    assert "did not run" in ledger.cell("fake.never", "softmax_scale").evidence
    assert ("fake.never", "refusals") in ledger.missing()
    raised = build([], {"fake.a": RuntimeError("boom")}, [A])
    assert "raised: boom" in raised.cell("fake.a", "dropout").evidence


def test_every_cell_names_existing_evidence():
    probe = Convention("softmax_scale", "inv_sqrt_head_dim", "probe-scale: 0.0")
    ledger = build(ROWS, {"fake.a": [probe]}, [A, B], CASES)
    present = {f"{r.case}[{r.runner}]" for r in ROWS}
    for c in ledger.cells:
        if c.source == "row":
            named = set(re.findall(r"[\w.-]+\[[\w.-]+\]", c.evidence))
            assert named and named <= present, c
            assert f"[{c.system}]" in c.evidence
        elif c.source == "probe":
            assert c.evidence.startswith(f"probe[{c.system}]") and c.system in ("fake.a",)
        else:
            assert c.value == NOT_PROBED and c.system in c.evidence


def test_json_shape_and_determinism():
    probe = Convention("float_mask", "added", "probe-float: 0.0", documented="cast_to_bool")
    ledger = build(ROWS, {"fake.a": [probe]}, [A, B], CASES)
    data = json.loads(render_json(ledger))
    assert set(data) == {"axes", "systems", "cells"}
    assert [a["id"] for a in data["axes"]] == list(AXIS_IDS)
    assert set(data["axes"][0]) == {"id", "title", "vocabulary", "meaning"}
    assert set(data["systems"][0]) == {"id", "runner", "executed", "framework", "system",
                                       "path", "backend"}
    fields = {"system", "axis", "value", "evidence", "documented", "documented_source",
              "contradicts_documentation", "witnesses", "second_witness"}
    assert all({"system", "axis", "value", "evidence"} <= set(c) <= fields
               for c in data["cells"])  # optional fields only where they say something
    assert all(c[f] != "" and c[f] is not None and c[f] is not False for c in data["cells"]
               for f in c if f not in ("system", "axis", "value", "evidence"))
    assert all(c.get("witnesses", 1) in (0, 1, 2) for c in data["cells"])  # 1: left out
    assert len(render_json(ledger).splitlines()) == 2 + 2 * 3 + len(data["axes"]) + len(
        data["systems"]) + len(data["cells"])  # braces, 3 list brackets x 2, one item a line
    flagged = [c for c in data["cells"] if c.get("contradicts_documentation")]
    assert [(c["system"], c["axis"]) for c in flagged] == [("fake.a", "float_mask")]
    again = build(ROWS, {"fake.a": [probe]}, [A, B], CASES)
    assert render_json(again) == render_json(ledger)
    assert render_markdown(again) == render_markdown(ledger)


def test_markdown_tables_are_narrow_and_escaped():
    runners = [fake(f"keras.k{n}", "keras") for n in range(11)] + [fake("x.other", "other")]
    evil = Convention("dropout", "never", "a | b\nc\x07d`e")
    ledger = build([], {"keras.k0": [evil]}, runners)
    md = render_markdown(ledger)
    table_lines = [ln for ln in md.splitlines() if ln.startswith("| axis")]
    assert len(table_lines) == 3  # keras (1 of 2), keras (2 of 2), others
    for ln in table_lines:
        assert len(re.split(r"(?<!\\)\|", ln)) - 3 <= MAX_COLUMNS  # axis + <= 8 systems
    assert "## keras (1 of 2)" in md and "## others" in md
    page = render_axis_page(ledger, next(a for a in ledger.axes if a.id == "dropout"))
    assert "a \\| b c‹U+0007›d'e" in page and "\x07" not in page  # the bell shown, not rung
    assert "(conventions/dropout.md)" in md  # conventions.md links the axis's page
    assert escape("x|y\r\nz") == "x\\|y z"
    # the evidence bullet names the system and the source: its probe[...] label is not
    # said again (the page stays short)
    line = next(ln for ln in page.splitlines() if ln.startswith("- **keras.k0**: `never`"))
    assert "(probe, 1 witness): a \\| b" in line and "probe[keras.k0]" not in line, line


def test_markdown_marks_models_and_contradictions():
    model = fake("m.model", "matlab")
    rows = [row("c", "m.model", executed=False, weights_returned="per_head")]
    probe = Convention("size_arguments", "total_over_heads", "doc", documented="per_head")
    formula = Convention("parameter_formula", "4E^2 + 4E (+ 2E LayerNorm)", "doc")
    md = render_markdown(build(rows, {"m.model": [probe, formula]}, [model]))
    assert "m.model (model)" in md and "total_over_heads†" in md
    assert "| parameter_formula | 4E^2 + 4E |" in md  # a free-text value's head


def test_every_cell_is_observed():
    """The committed ledger of the full matrix has a column per runner, every axis for
    each, and no gap: a `not_probed` cell is a probe's word with its reason (the suite
    cannot measure it there), never an axis no probe or row reached."""
    from conformance.conventions.axes import AXIS_IDS

    path = REPORTS_DIR / "conventions.json"
    assert path.exists(), f"{path} not written yet: run the full matrix"
    data = json.loads(path.read_text())
    assert [s["id"] for s in data["systems"]] == runner_names()
    assert sorted((c["system"], c["axis"]) for c in data["cells"]) == sorted(
        (r, a) for r in runner_names() for a in AXIS_IDS)
    # a probe's not_probed, or the rows' (an artifact whose record cannot show it: the
    # evidence names its rows, case[runner], and says why); never the ledger's own gap
    # (ledger._absent, which names no row)
    missing = [(c["system"], c["axis"]) for c in data["cells"] if c["value"] == NOT_PROBED
               and not _explained(c["system"], c["evidence"])
               and not _explained(c["system"], _page_evidence(c["system"], c["axis"]))]
    pending = {(s, a) for s, a in missing if s in UNOBSERVED}
    assert not set(missing) - pending, f"{len(missing)} cells not probed: {missing}"
    cured = sorted(set(UNOBSERVED) - {s for s, _ in pending})
    assert not cured, f"every cell of {cured} is observed now: take them out of UNOBSERVED"


# Runners the ledger cannot reach on some axes yet, each with why; may only shrink.  They
# take only their own feature's cases and report no ApiFacts of their API (unbatched
# calls, dtype mixing, mask arguments), so the universal probes and the rows leave gaps
UNOBSERVED = {
    r: "takes only its model's own feature cases and reports no ApiFacts yet"
    for r in ("mlx_lm.qwen2_vl", "mlx_lm.qwen3_vl", "mlx_lm.smollm3", "mlx_lm.llama4",
              "mlx_lm.gemma3_text", "mlx_lm.deepseek_v3", "mlx_lm.qwen3_next", "mlx_lm.rope",
              "keras_hub.qwen3_5.mrope", "keras_hub.qwen3_5", "keras_hub.qwen3_5_vision",
              "keras_hub.gemma3", "keras_hub.t5", "hf.qwen2_vl_vision")}


def _page_evidence(system: str, axis: str) -> str:
    """A cell's whole evidence, from its axis page (conventions.json holds its head)."""
    page = (REPORTS_DIR / "conventions" / f"{axis}.md").read_text(encoding="utf-8")
    found = re.search(rf"^- \*\*{re.escape(system)}\*\*: [^\n]*", page, re.M)
    return found.group(0) if found else ""


def _explained(system: str, evidence: str) -> bool:
    """A probe's not_probed, or the rows' naming the row, case[runner], that shows why."""
    return (f"probe[{system}]" in evidence
            or re.search(rf"[\w.-]+\[{re.escape(system)}\]", evidence) is not None)


# ---- pinning, through the plugin (pytester) --------------------------------------

FAKE_RUNNER = '''
from conformance.contract.runner import Observation, Runner, Translation
from conformance.oracle.reference import attention, formula_parameters


class Fake(Runner):
    name, framework, system = "fake.ledger", "fake", "fake.api"

    def translate(self, case):
        return Translation("fake()")

    def run(self, case, translation, data):
        return Observation(output=attention(case, data).output,
                           parameters=formula_parameters(case))

    def conventions(self):
        {probe}
        return []
'''
CASE = "id: small\nattention: {num_heads: 2, query_features: 8}\ninputs: {batch: 1, query_len: 2}\n"


@pytest.fixture
def project(pytester, monkeypatch):
    (pytester.path / "cases").mkdir()
    (pytester.path / "cases" / "small.yaml").write_text(CASE)
    monkeypatch.setenv("CONFORMANCE_EXTRA_RUNNERS", "fakeledger:Fake")
    from conformance.paths import ROOT  # this checkout's package, not an installed one

    monkeypatch.setenv("PYTHONPATH", f"{ROOT}{os.pathsep}{pytester.path}")
    pytester.syspathinsert()  # fakeledger for the in-process runs (PYTHONPATH: workers)
    return pytester


def write_runner(pytester, probe: str = "pass"):
    (pytester.path / "fakeledger.py").write_text(FAKE_RUNNER.format(probe=probe))


def run(pytester, *args):
    return pytester.runpytest_inprocess(
        "-p", "conformance.plugin", "-p", "no:cacheprovider", "--cases-dir",
        str(pytester.path / "cases"), "--runner", "fake.ledger", "--expectations-dir",
        str(pytester.path / "expectations"), *args)


def pinned_file(pytester) -> Path:
    return pytester.path / "expectations" / "fake.ledger.yaml"


def test_pinning_update_then_drift_fails_naming_system_axis_values(project):
    write_runner(project)
    res = run(project, "-q")  # nothing pinned yet: fails, printing the lines to paste
    res.assert_outcomes(passed=1, failed=1)
    res.stdout.fnmatch_lines(["*fake.ledger: not pinned in*fake.ledger.yaml; add*",
                              "conventions:", "*softmax_scale: inv_sqrt_head_dim*"])
    res = run(project, "-q", "--update-expectations")
    res.assert_outcomes(passed=2)
    pinned = pinned_file(project).read_text()
    assert "\nconventions:\n  parameter_formula: canonical\n" in pinned
    pinned_file(project).write_text(
        pinned.replace("softmax_scale: inv_sqrt_head_dim", "softmax_scale: configurable"))
    res = run(project, "-q")
    res.assert_outcomes(passed=1, failed=1)
    res.stdout.fnmatch_lines(["*fake.ledger, axis softmax_scale: expected 'configurable', "
                              "observed 'inv_sqrt_head_dim'*", "*evidence: probe[[]fake.ledger]*"])
    items = [ln for ln in run(project, "--collect-only", "-q").stdout.lines if "::" in ln]
    assert items[-1].endswith("fake.ledger.yaml::conventions[fake.ledger]")  # after the matrix


def test_update_keeps_comments_and_changes_only_the_changed_lines(project):
    """--update-expectations edits the file line by line: comments, order and the other
    sections stay; a drifted cell's line is rewritten in place."""
    write_runner(project)
    pinned_file(project).parent.mkdir()
    text = ("# my notes\nbehaviours:\n  fully_masked_row: nan  # why\nconventions:\n"
            "  softmax_scale: configurable  # drifted\n  parameter_formula: canonical\n")
    pinned_file(project).write_text(text)
    run(project, "-q", "--update-expectations").assert_outcomes(passed=2)
    after = pinned_file(project).read_text()  # the cells it lacked are appended to the block
    # (the ledger's universal probes, asked through the fake's own run, among them)
    from conformance.conventions.probes import table
    from conformance.conventions.probes.choices import chosen

    universal = [a for a, e in table.TABLE.items()  # the cells the file lacked (the fake
                 # names no harness choices: the ways asked only under them skip it)
                 if any(w.how == table.UNIVERSAL and w.when is not chosen for w in e.ways)
                 and f"  {a}:" not in text]
    probed = [ln for ln in after.splitlines() if ln.startswith(tuple(f"  {a}:"
                                                                     for a in universal))]
    assert any(ln.startswith("  mask_fill:") for ln in probed), after
    rest = "".join(ln + "\n" for ln in after.splitlines() if ln not in probed)
    assert rest == text.replace("configurable  # drifted", "inv_sqrt_head_dim") + (
        "  returned_weights: none\n  refusals: none\n")


def test_value_outside_vocabulary_is_a_clean_usage_error(project):
    write_runner(project)
    pinned_file(project).parent.mkdir()
    pinned_file(project).write_text("conventions:\n  softmax_scale: bogus\n")
    res = run(project, "-q")
    assert res.ret != 0
    res.stderr.fnmatch_lines(["*fake.ledger.yaml: field 'conventions.softmax_scale': value "
                              "'bogus' is not in the vocabulary*"])
    text = res.stdout.str() + res.stderr.str()
    assert "Traceback" not in text and "INTERNALERROR" not in text
    pinned_file(project).rename(project.path / "expectations" / "fake.nope.yaml")
    run(project, "-q").stderr.fnmatch_lines(["*fake.nope.yaml: field '(file name)': names no "
                                             "runner*"])


def test_an_extreme_input_answer_naming_no_case_is_flagged(project):
    write_runner(project)
    run(project, "-q", "--update-expectations").assert_outcomes(passed=2)
    pinned = pinned_file(project).read_text()
    pinned_file(project).write_text("behaviours:\n  nonfinite_input:\n    gone: contained\n"
                                    + pinned)
    res = run(project, "-q")
    res.assert_outcomes(passed=1, failed=1)
    res.stdout.fnmatch_lines(["*fake.ledger.yaml: behaviours.nonfinite_input.gone: names no "
                              "case of the cases directory; remove it*"])


def test_probe_that_raises_fails_its_item_only(project):
    write_runner(project, probe="raise ValueError('probe broke, on purpose')")
    pinned_file(project).parent.mkdir()
    pinned_file(project).write_text("conventions:\n  parameter_formula: canonical\n")
    res = run(project, "-q")
    res.assert_outcomes(passed=1, failed=1)
    res.stdout.fnmatch_lines(["*fake.ledger: conventions() raised ValueError: probe broke*"])


def test_the_docs_list_every_axis_and_its_words():
    """The axes table of docs/ledger.md is the public vocabulary: it must follow axes.py."""
    from conformance.conventions.axes import AXES
    from conformance.paths import ROOT

    readme = (ROOT / "docs" / "ledger.md").read_text(encoding="utf-8")
    for a in AXES:
        words = ", ".join(f"`{w}`" for w in a.vocabulary) if a.vocabulary else "short free text"
        assert f"| `{a.id}`: {a.title} | {words} |" in readme, a.id


def test_mask_polarity_reads_distances_as_data_and_names_neither():
    """A mask read as True = attend is named so; one accepted and not read as a mask at
    all (the output of no mask) is `ignored`; one with another effect is `not_probed`,
    decided from the distances, not their text."""
    from conformance.conventions.probes.probe_cells import mask_polarity
    from conformance.conventions.probes.probing import output_with, probe_case

    case = probe_case("polarity")
    attends = mask_polarity(case, lambda m: output_with(case, m), "reads it")
    assert attends.value == "true_attends"
    ignored = mask_polarity(case, lambda m: output_with(case, None), "ignores it")
    assert ignored.value == "ignored" and "neither reading matches" in ignored.evidence
    other = mask_polarity(case, lambda m: output_with(case, None) + 0.5, "moves it")
    assert other.value == "not_probed" and "neither reading matches" in other.evidence


def test_conventions_json_bounds_a_long_evidence_to_its_head():
    """conventions.json stays under 1 MB: a long evidence keeps its head and a pointer to its
    axis page (which has every word); a short one is whole."""
    from conformance.report.ledger import CUT, JSON_EVIDENCE, json_evidence
    text = "probe[x]: " + "d " * 2000 + " reads grouped 5.6e-07"
    cut = json_evidence(text)
    assert len(cut) <= JSON_EVIDENCE and cut.startswith("probe[x]: d d") and cut.endswith(CUT)
    assert json_evidence("short") == "short" and json_evidence(cut) == cut
    # the cut falls between words: a figure is whole or gone, never its head alone (its
    # digits before the cut would be a CPU figure check-reports could not mask)
    words = "probe[x]: " + " ".join(f"{n % 10}.5e-08" for n in range(400))
    head = json_evidence(words).removesuffix(CUT)
    assert head.split(" ")[-1][1:] == ".5e-08"
    one_word = "probe[x]:" + "y" * 400  # no space: cut at the limit
    assert len(json_evidence(one_word)) == JSON_EVIDENCE


def test_conventions_json_cells_leave_the_page_only_words_out():
    """A not_applicable cell keeps only its evidence's head, documented_source is left to
    the axis page, the documented word and the contradiction stay; cutting a file read
    back changes nothing (the committed file can be re-rendered)."""
    from conformance.report.ledger import (CUT, JSON_EVIDENCE, SILENT_EVIDENCE, json_cell,
                                           render_json_data)
    long = "probe[x]: XAttention: no argument among ['softcap', 'soft_cap', 'logit_cap'] in 9"
    silent = json_cell({"system": "x", "axis": "softcap", "value": "not_applicable",
                        "evidence": long, "documented": None, "documented_source": ""})
    assert silent == {"system": "x", "axis": "softcap", "value": "not_applicable",
                      "evidence": "probe[x]: XAttention: no argument [...]"}
    assert len(silent["evidence"]) <= SILENT_EVIDENCE
    said = json_cell({"system": "x", "axis": "softcap", "value": "tanh", "evidence": long,
                      "documented": "none", "documented_source": "https://example.org/doc",
                      "contradicts_documentation": True})
    assert said["evidence"].startswith("probe[x]: XAttention: no argument among [")
    assert said["evidence"].endswith(CUT) and len(said["evidence"]) <= JSON_EVIDENCE
    assert "documented_source" not in said
    assert (said["documented"], said["contradicts_documentation"]) == ("none", True)
    text = render_json_data({"axes": [], "cells": [silent, said]})
    assert render_json_data(json.loads(text)) == text


def test_conventions_json_of_110_systems_stays_well_under_1_mb(monkeypatch):
    """110 systems x 37 axes (4,070 cells), every evidence long, a third not_applicable, a
    fifth documented and one in twenty with a second witness (the committed ledger's
    shares): the file stays under 800 KB; planted: with the former 360-character evidence
    and the documentation's source kept, the same cells pass 1 MB."""
    from conformance.report import ledger as module

    def cell(n: int) -> dict:
        system = f"family{n % 7}.system{n // 37}"
        out = {"system": system, "axis": f"axis_number_{n % 37}",
               "value": "not_applicable" if n % 3 == 0 else "true_attends_here",
               "evidence": f"probe[{system}]: " + "word " * 150}
        if n % 5 == 0:
            out.update(documented="true_attends_here",
                       documented_source="https://example.org/docs/generated/attention.html")
        if n % 20 == 0:
            out.update(witnesses=2, second_witness="rows: " + "word " * 150)
        return out

    data = {"axes": [], "systems": [], "cells": [cell(n) for n in range(110 * 37)]}
    assert len(module.render_json_data(data).encode()) < 800_000
    monkeypatch.setattr(module, "JSON_EVIDENCE", 360)
    monkeypatch.setattr(module, "SILENT_EVIDENCE", 360)
    monkeypatch.setattr(module, "PAGE_ONLY", ())
    assert len(module.render_json_data(data).encode()) > 1_000_000


def test_float64_below_quotes_the_first_case_not_the_worst():
    """Which of two float32-computed float64 cases lands further from the oracle is a CPU's
    kernel choice (5.96e-07 against 6.07e-07 under a lowered instruction set): the cell
    quotes the first case in case order whatever the figures, the largest error beside."""
    def rows(first: float, second: float):
        return [row(c, "fake.b", Outcome.MISMATCH, dtype="float64", max_abs_error=e,
                    atol=1e-12, failures=(Failure(FailureKind.VALUES, f"output: {e}"),))
                for c, e in (("f64-a", first), ("f64-b", second))]

    here, there = (cells_of(derive(rows(*e), [B]), "fake.b")["float64_compute"]
                   for e in ((5.96e-7, 6.07e-7), (6.07e-7, 5.96e-7)))
    assert here.value == there.value == "below_float64"
    assert here.evidence.startswith("f64-a[fake.b] (and 1 more float64 case(s)): ")
    assert there.evidence.startswith("f64-a[fake.b] ")
    assert "largest max abs error 6.07e-07" in here.evidence
