"""Answers a person reads in a minute (#21): the headline findings follow their data (change
the data, the sentence changes; an absent ledger family says nothing), the differences-only
ledger view, `diff A B` with a converter snippet that runs, and the report budgets on the
reports rendered from the committed results."""
from __future__ import annotations

import shutil
import json
import re
import subprocess
import sys
from types import SimpleNamespace

import pytest

from conformance.__main__ import main
from conformance.paths import ROOT
from conformance.compare.verdict import Outcome
from conformance.report.base import results_frame, section_frame
from conformance.report.findings import findings, terminal_lines
from conformance.report.ledger_groups import difference_lines
from conformance.report.porting import PortingError, parse_typed, porting

from .report_rows import make_row, stand_in

MATLAB_4 = {"system": "matlab", "num_heads": 4, "num_key_channels": 784, "input_features": 3136}
MATLAB_8 = {"system": "matlab", "num_heads": 8, "num_key_channels": 392, "input_features": 3136}
RUNNERS = [stand_in("torch.mha", "torch", "torch.nn.MultiheadAttention", typed_system="torch"),
           stand_in("keras.tensorflow", "keras", "keras.layers.MultiHeadAttention",
                    typed_system="keras"),
           stand_in("keras.jax", "keras", "keras.layers.MultiHeadAttention", typed_system="keras")]
LEDGER_FILE = ROOT / "reports" / "conventions.json"


def ledger(cells: dict[str, dict[str, str]]) -> dict:
    """A conventions.json: {axis: {system: value}}."""
    return {"axes": [{"id": a, "title": a.replace("_", " ")} for a in cells],
            "systems": [{"id": r.name, "framework": r.framework} for r in RUNNERS],
            "cells": [{"system": s, "axis": a, "value": v, "evidence": f"{s} probe of {a}"}
                      for a, by in cells.items() for s, v in by.items()]}


def frame_of(rows, runners=RUNNERS):
    return section_frame(results_frame(rows), rows, runners)


def keyed(rows, cases=(), data=None) -> dict[str, str]:
    return {f.key: f.text for f in findings(frame_of(rows), list(cases), data)}


def test_the_matlab_sentence_is_computed_from_the_typed_numbers():
    rows = [make_row("m4", r, typed=MATLAB_4) for r in RUNNERS]
    rows += [make_row("m8", r, typed=MATLAB_8) for r in RUNNERS]
    text = keyed(rows)["matlab"]
    assert "9,839,984" in text and "4,921,560" in text and "39,350,528" in text
    assert "total over the 4 heads" in text and "(cases/m4.md)" in text
    other = dict(MATLAB_4, num_key_channels=392)  # 392 channels: other counts and widths
    changed = keyed([make_row("m2", r, typed=other) for r in RUNNERS])["matlab"]
    assert "9,839,984" not in changed and "4,921,560" in changed
    assert "392 is the total over the 4 heads in matlab: 98 per head" in changed
    assert "matlab" not in keyed([make_row("x", r) for r in RUNNERS])


def test_ledger_sentences_follow_the_cells_and_absent_families_say_nothing():
    mask = {"torch.mha": "true_blocks", "keras.tensorflow": "true_attends",
            "keras.jax": "true_attends"}
    rows = [make_row("c", r) for r in RUNNERS]
    found = keyed(rows, data=ledger({"attn_mask_polarity": mask}))
    assert "`true_blocks`: torch.mha; `true_attends`: keras.tensorflow, keras.jax" in \
        found["attn_mask_polarity"]
    assert "conventions/attn_mask_polarity.md" in found["attn_mask_polarity"]
    flipped = keyed(rows, data=ledger({"attn_mask_polarity": {**mask, "keras.jax":
                                                              "true_blocks"}}))
    assert "`true_attends`: keras.tensorflow; `true_blocks`: torch.mha, keras.jax" in \
        flipped["attn_mask_polarity"]
    assert not {"rope_style", "kv_head_mapping", "window_width"} & set(found)
    silent = {n: "not_applicable" for n in mask}
    rope = {"torch.mha": "not_applicable", "keras.tensorflow": "half_split",
            "keras.jax": "interleaved"}
    more = keyed(rows, data=ledger({"attn_mask_polarity": mask, "window_width": silent,
                                    "rope_style": rope}))
    assert "window_width" not in more  # every cell not_applicable: no sentence
    assert "Rotary pairing" in more["rope_style"] and "torch.mha" not in more["rope_style"]


def test_framework_bugs_are_the_known_mismatches_with_a_link():
    url = "https://github.com/keras-team/keras/pull/21299"
    rows = [make_row("head-one", RUNNERS[1], Outcome.MISMATCH, known_mismatch=f"bias: {url}"),
            make_row("f64", RUNNERS[2], Outcome.MISMATCH, known_mismatch="float32 scale"),
            make_row("head-one", RUNNERS[0])]
    text = keyed(rows)["bugs"]
    assert f"[keras-team/keras#21299]({url}): head-one[keras.tensorflow]" in text
    assert "f64" not in text
    assert "bugs" not in keyed(rows[1:])


def test_the_seed_sentence_names_who_can_and_cannot():
    case = SimpleNamespace(id="seed", tags=("seed-question",), attention=SimpleNamespace(
        num_heads=4, query_features=64, qk_head_dim=32))
    rows = [make_row("seed", RUNNERS[0], Outcome.NOT_EXPRESSIBLE, reason="no head size"),
            make_row("seed", RUNNERS[1]), make_row("seed", RUNNERS[2])]
    text = keyed(rows, [case])["seed"]
    assert "4 heads of 32, not 16" in text
    assert "settable in keras.layers.MultiHeadAttention; not expressible in " \
           "torch.nn.MultiheadAttention" in text
    assert "seed" not in keyed(rows, [SimpleNamespace(id="seed", tags=())])


def test_the_terminal_gets_three_to_five_plain_sentences():
    rows = [make_row("m4", r, typed=MATLAB_4) for r in RUNNERS]
    data = ledger({"attn_mask_polarity": {"torch.mha": "true_blocks", "keras.jax":
                                          "true_attends"},
                   "fully_masked_row": {"torch.mha": "nan", "keras.jax": "uniform"}})
    lines = terminal_lines(findings(frame_of(rows), [], data))
    assert 3 <= len(lines) <= 5
    assert not any("](" in line or "`" in line for line in lines)


def test_the_differences_view_collapses_agreement_and_puts_odd_ones_first():
    data = ledger({"returned_weights": {"torch.mha": "head_averaged", "keras.tensorflow":
                                        "none", "keras.jax": "per_head"},
                   "attn_mask_polarity": {"torch.mha": "true_blocks", "keras.tensorflow":
                                          "true_attends", "keras.jax": "true_attends"},
                   "softcap": {n.name: "not_applicable" for n in RUNNERS},
                   "input_layout": {n.name: "batch_first" for n in RUNNERS}})
    lines = difference_lines(data)
    items = [line for line in lines if line.startswith("- ")]
    assert "(`returned_weights`)" in items[0] and "(`attn_mask_polarity`)" in items[1]
    assert items[2] == ("- [input layout](conventions/input_layout.md): `batch_first` "
                        "(3 systems)")
    assert not any("softcap" in line for line in lines)  # nobody has it: not listed


@pytest.mark.skipif(not LEDGER_FILE.exists(), reason="no committed conventions ledger")
def test_diff_torch_mha_keras_tensorflow_lists_the_porting_differences(capsys):
    assert main(["diff", "torch.mha", "keras.tensorflow", "--json"]) == 0
    guide = json.loads(capsys.readouterr().out)
    by_axis = {d["axis"]: d for d in guide["differences"]}
    for axis in ("attn_mask_polarity", "argument_order", "weight_layout",
                 "returned_weights", "fully_masked_row"):
        assert axis in by_axis, axis
        assert by_axis[axis]["a_evidence"] and by_axis[axis]["b_evidence"], axis
    assert by_axis["attn_mask_polarity"]["a"] == "true_blocks"
    assert "invert" in by_axis["attn_mask_polarity"]["advice"]
    assert "query, value, key" in by_axis["argument_order"]["advice"]
    assert "average_attn_weights=False" in by_axis["returned_weights"]["advice"]
    assert "'torch', 'keras'" in by_axis["weight_layout"]["advice"]
    assert main(["diff", "torch.mha", "torch.mha"]) == 0
    assert "nothing differs" in capsys.readouterr().out


@pytest.mark.skipif(not LEDGER_FILE.exists(), reason="no committed conventions ledger")
def test_the_typed_translation_and_the_converter_snippet_runs(tmp_path):
    data = json.loads(LEDGER_FILE.read_text(encoding="utf-8"))
    big = porting(data, "torch.mha", "keras.tensorflow",
                  "MultiHeadAttention(num_heads=4, key_dim=784)", 3136)
    assert [(r.system, r.parameters) for r in big.readings] == [
        ("torch.mha", 39350528), ("keras.tensorflow", 39350528)]
    small = porting(data, "torch.mha", "keras.tensorflow",
                    "MultiHeadAttention(num_heads=2, key_dim=3)", 6)
    script = tmp_path / "convert.py"
    script.write_text(small.snippet)
    done = subprocess.run([sys.executable, str(script)], capture_output=True, text=True,
                          cwd=ROOT, timeout=120)
    assert done.returncode == 0, done.stderr
    assert "query/kernel (6, 2, 3)" in done.stdout  # Keras's (E, H, d_k)
    matlab = porting(data, "matlab.selfAttentionLayer", "torch.sdpa", "selfAttentionLayer(4, 784)",
                     3136)
    assert matlab.readings[0].parameters == 9839984 and "no weight converter" in \
        matlab.snippet_note


def test_bad_names_and_calls_are_one_clear_error(capsys):
    with pytest.raises(PortingError, match="not a call"):
        parse_typed("num_heads=4", 8)
    with pytest.raises(PortingError, match="no system calls 'Nope'"):
        parse_typed("Nope(num_heads=4)", 8)
    if LEDGER_FILE.exists():
        assert main(["diff", "torch.mha", "no.such.runner"]) == 2
        assert "no system or runner 'no.such.runner'" in capsys.readouterr().err


@pytest.fixture(scope="module")
def rendered(tmp_path_factory):
    """The reports re-rendered from the committed results.json and conventions.json."""
    out = tmp_path_factory.mktemp("answers")
    for name in ("results.json", "conventions.json"):
        (out / name).write_bytes((ROOT / "reports" / name).read_bytes())
    if (ROOT / "reports" / "results").is_dir():  # row files (an older results.json: inline)
        shutil.copytree(ROOT / "reports" / "results", out / "results")
    assert main(["report", "--results", str(out / "results.json")]) == 0
    return out


MD_BUDGET, HTML_BUDGET = 60_000, 1_000_000  # bytes (deterministic: no time is asserted)


def test_budgets_hold_on_the_committed_results(rendered):
    index = (rendered / "index.md").read_text(encoding="utf-8")
    assert len(index.encode()) <= MD_BUDGET
    assert (rendered / "index.html").stat().st_size < HTML_BUDGET
    top = "\n".join(index.splitlines()[:40])
    for figure in ("9,839,984", "4,921,560", "39,350,528"):
        assert re.search(rf"[a-z][^|\n]*{figure}", top), figure  # in a sentence, not a cell
    polarity = next(line for line in top.splitlines() if "Mask polarity" in line)
    assert all(n in polarity for n in ("torch.mha", "torch.mha.fastpath",
                                       "torch.mha.no-weights"))
    for name in ("index.md", "details.md"):
        lines = (rendered / name).read_text(encoding="utf-8").splitlines()
        for n, line in enumerate(lines[:-1]):
            if line.startswith("| ") and lines[n + 1].startswith("|---"):
                assert line.count(" | ") <= 8, (name, line)  # first column + 8 data columns
            if line.startswith("| "):
                cells = re.split(r"(?<!\\) \| ", line.strip("| "))
                shown = [c.replace("\\|", "|").replace("&amp;", "&").replace("&lt;", "<")
                         .replace("&gt;", ">").replace("\\\\", "\\") for c in cells]
                assert max(len(c) for c in shown) <= 80, (name, line)


def test_the_drift_report_adds_one_headline_per_library_that_changed(tmp_path):
    """#23 part 4: each library whose probed conventions changed between releases gets
    one sentence naming the first release; an API that appeared is not a change."""
    import json

    from conformance.report.findings import drift_findings, read_drift

    drift = {"libraries": [
        {"id": "keras.jax", "changes": [
            {"kind": "convention", "cell": "float_mask", "old_value": "uniform_where_zero",
             "new_value": "cast_to_bool", "first_release": "3.7.0"}]},
        {"id": "onnx.reference", "changes": [
            {"kind": "api_added", "cell": "attention_op", "old_value": "api_absent",
             "new_value": "added", "first_release": "1.18.0"}]}]}
    (tmp_path / "drift.json").write_text(json.dumps(drift))
    found = drift_findings(read_drift(tmp_path))
    assert len(found) == 1 and "3.7.0" in found[0].text and "cast_to_bool" in found[0].text
    drift["libraries"][0]["changes"][0]["first_release"] = "3.8.0"  # the data moves it
    assert "3.8.0" in drift_findings(drift)[0].text
    (tmp_path / "drift.json").write_text("[not json")
    assert read_drift(tmp_path) is None and drift_findings(None) == []
