"""Your attention, judged (`python -m conformance probe`, `pytest --attention`): a textbook
NumPy attention reads like torch.sdpa; a port with three planted convention defects is
caught on each (a boolean mask read True = blocked, kv heads mapped h % H_kv, a -1e4 fill)
with its nearest known system; the same target through pytest gives the same ledger column;
torch's own nn.MultiheadAttention pointed at as a drop-in replacement reads as torch.mha;
an ONNX graph runs; a target that cannot be used is one line, never a traceback.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys

import numpy as np
import pytest

from conformance.paths import ROOT
from conformance.report.target import judge, measured_differences
from conformance.runners import load
from conformance.runners.target import TargetError, TargetSpec, check_spec
from conformance.runners.target.checks import first_call

from . import inprocess
from .helpers import require

PLANTED = "examples.planted:attention"
TEXTBOOK = "examples.textbook:attention"


def _probe(tmp_path, target, kind="sdpa", *extra, cwd=ROOT):
    out = tmp_path / "out"
    command = ["probe", target, "--kind", kind, "--out", str(out), *extra]
    if cwd == ROOT:  # the suite's own folder: this process will do
        return inprocess.cli(*command), out
    done = subprocess.run([sys.executable, "-m", "conformance", *command], cwd=cwd,
                          capture_output=True, text=True, timeout=300)
    return done, out


def _cells(out, name):
    ledger = json.loads((out / "conventions.json").read_text())
    return {c["axis"]: c["value"] for c in ledger["cells"] if c["system"] == name}


@pytest.fixture(scope="module")
def planted(tmp_path_factory):
    done, out = _probe(tmp_path_factory.mktemp("planted"), PLANTED)
    assert done.returncode == 0, done.stderr[-2000:]
    return done, out


def test_probe_writes_three_files_and_names_each_planted_defect(planted):
    done, out = planted
    for name in ("index.md", "conventions.json", "results.json"):
        assert (out / name).is_file()
    cells = _cells(out, "target.planted.attention")
    assert cells["attn_mask_polarity"] == "true_blocks"  # defect 1
    assert cells["kv_head_mapping"] == "tiled"  # defect 2: h % H_kv
    assert cells["mask_fill"] == "-1e4"  # defect 3, read behind the inverted mask
    index = (out / "index.md").read_text()
    assert "Nearest known system: **torch.sdpa**" in index
    sentence = next(line for line in index.splitlines() if "differs from torch.sdpa" in line)
    for axis, here, there in (("attn_mask_polarity", "true_blocks", "true_attends"),
                              ("kv_head_mapping", "tiled", "grouped"),
                              ("mask_fill", "-1e4", "-inf")):
        assert f"{axis}: {here} here, {there} in torch.sdpa" in sentence
    assert "Traceback" not in done.stdout + done.stderr
    assert "matches the oracle on" in done.stdout


def test_the_textbook_attention_has_none_of_the_defects(tmp_path):
    done, out = _probe(tmp_path, TEXTBOOK)
    assert done.returncode == 0, done.stderr[-2000:]
    cells = _cells(out, "target.textbook.attention")
    assert (cells["attn_mask_polarity"], cells["kv_head_mapping"], cells["mask_fill"]) == (
        "true_attends", "grouped", "-inf")
    assert cells["softmax_scale"] == "configurable" and cells["causal_flag"] == "upper_left"
    index = (out / "index.md").read_text()
    assert "Nearest known system: **torch.sdpa**" in index
    assert "attn_mask_polarity:" not in index.split("## Cases")[0]


def test_pytest_attention_gives_the_same_ledger_column(planted, tmp_path):
    _, probed = planted
    out = tmp_path / "pytest"
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "cases", "-q", "-p", "no:cacheprovider",
         "--attention", PLANTED, "--attention-kind", "sdpa",
         "--runner", "target.planted.attention", f"--report-dir={out}"],
        cwd=ROOT, capture_output=True, text=True, timeout=300,
        env={**os.environ, "CONFORMANCE_FIGURES": "0"})
    assert "judged in" in done.stdout, done.stdout[-2000:]
    assert _cells(out, "target.planted.attention") == _cells(
        probed, "target.planted.attention")


def test_torch_s_own_module_as_a_drop_in_reads_as_torch_mha(tmp_path):
    require("torch")
    done, out = _probe(tmp_path, "torch.nn:MultiheadAttention", "torch-mha")
    assert done.returncode == 0, done.stderr[-2000:]
    assert "Nothing measured on both sides differs from torch.mha" in done.stdout


def test_an_onnx_graph_of_query_key_value_runs_in_onnxruntime(tmp_path):
    onnx = pytest.importorskip("onnx")
    pytest.importorskip("onnxruntime")
    from onnx import TensorProto, helper

    names = [("query", "T"), ("key", "S"), ("value", "S")]
    graph = helper.make_graph(
        [helper.make_node("Attention", ["query", "key", "value", "attn_mask"], ["out"])],
        "sdpa", [helper.make_tensor_value_info(n, TensorProto.FLOAT, ["B", "H", L, "D"])
                 for n, L in names]
        + [helper.make_tensor_value_info("attn_mask", TensorProto.BOOL, ["B", 1, "T", "S"])],
        [helper.make_tensor_value_info("out", TensorProto.FLOAT, ["B", "H", "T", "D"])])
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 23)]),
              tmp_path / "sdpa.onnx")
    done, out = _probe(tmp_path, "sdpa.onnx", "onnx", cwd=tmp_path)
    assert done.returncode == 0, done.stderr[-2000:]
    cells = _cells(out, "target.sdpa")
    assert cells["attn_mask_polarity"] == "true_attends"  # the ONNX standard's polarity
    assert cells["float_mask"] == "refused"  # a boolean input: onnxruntime's own error


@pytest.mark.parametrize("source, expected", [
    ("", "importing 'missing_module_xyz' failed"),
    ("def attention(q, k):\n    return q\n", "takes 2 positional argument"),
    ("def attention(q, k, v):\n    raise RuntimeError('boom')\n", "raised on a first call"),
    ("def attention(q, k, v):\n    return q[0]\n", "returned shape (2, 3, 4)"),
    ("attention = 3\n", "is a int, not a function"),
])
def test_a_target_that_cannot_be_used_is_one_line(tmp_path, source, expected):
    module = "missing_module_xyz"
    if source:
        module = f"user_attention_{abs(hash(source)) % 10**8}"  # one module per source
        (tmp_path / f"{module}.py").write_text(source)
    with pytest.raises(TargetError, match=expected.replace("(", r"\(").replace(")", r"\)")):
        first_call(check_spec(TargetSpec(f"{module}:attention", "sdpa", cwd=str(tmp_path))))
    done, _ = _probe(tmp_path, f"{module}:attention", cwd=tmp_path)
    assert done.returncode == 2 and "Traceback" not in done.stderr
    assert done.stderr.startswith("probe: TARGET") and expected in done.stderr


def test_a_bad_option_is_named():
    with pytest.raises(TargetError, match="--kind 'sdp'"):
        check_spec(TargetSpec(TEXTBOOK, "sdp"))
    with pytest.raises(TargetError, match="--array jax: only a --kind sdpa"):
        check_spec(TargetSpec("x.onnx", "onnx", array="jax"))
    with pytest.raises(TargetError, match="module:attribute"):
        check_spec(TargetSpec("examples.textbook", "sdpa"))


def test_the_runner_translates_from_the_target_s_signature():
    """Only what the signature declares is passed; the raw probes get the arguments it has."""
    r = load(*TargetSpec(TEXTBOOK, "sdpa", cwd=str(ROOT)).line())
    assert r.answers == {"attn_mask", "is_causal"} and r.sets_scale
    assert "softcap" not in r.features and "window" in r.features  # windows: as the mask
    from conformance.case.loader import parse_case
    from conformance.oracle.canonical import case_data

    case = parse_case({"id": "c", "attention": {"num_heads": 2, "query_features": 8},
                       "inputs": {"batch": 1, "query_len": 3, "key_len": 5},
                       "mask": {"causal": "upper_left"}}, ROOT / "x.yaml")
    t = r.translate(case)
    assert t.plan.mask == "mask" and not t.plan.is_causal  # T != S: the causal part as mask
    assert "mask=bool (B, 1, T, S), True = attend" in t.call
    obs = r.run(case, t, case_data(case))
    assert obs.output.shape == (1, 3, 8) and np.isfinite(obs.output).all()


# -- the judgement, on hand-made ledgers ---------------------------------------------------
AXES = [{"id": a, "title": a} for a in ("attn_mask_polarity", "kv_head_mapping", "mask_fill",
                                        "softcap")]


def _ledger(cells: dict[str, dict[str, str]]) -> dict:
    return {"axes": AXES, "systems": [{"id": s} for s in cells],
            "cells": [{"system": s, "axis": a, "value": v, "evidence": f"{s} {a}"}
                      for s, row in cells.items() for a, v in row.items()]}


def test_the_nearest_system_has_most_words_equal_and_silent_cells_name_no_defect():
    known = _ledger({"torch.sdpa": {"attn_mask_polarity": "true_attends",
                                    "kv_head_mapping": "grouped", "mask_fill": "-inf"},
                     "torch.mha": {"attn_mask_polarity": "true_blocks",
                                   "kv_head_mapping": "not_applicable", "mask_fill": "-inf"}})
    mine = _ledger({"me": {"attn_mask_polarity": "true_blocks", "kv_head_mapping": "tiled",
                           "mask_fill": "-inf", "softcap": "not_applicable"}})
    j = judge("me", "m:f", "sdpa", mine, known, [])
    assert [(n.system, n.equal, n.compared) for n in j.nearest] == [
        ("torch.mha", 2, 2), ("torch.sdpa", 1, 3)]
    assert j.sharing["attn_mask_polarity"] == ["torch.mha"]
    by = {g.b: [d.axis for d in measured_differences(g)] for g in j.guides}
    assert by == {"torch.mha": [], "torch.sdpa": ["attn_mask_polarity", "kv_head_mapping"]}
    # planted: a wrong word of the target moves the nearest system
    wrong = _ledger({"me": {"attn_mask_polarity": "true_attends", "kv_head_mapping": "grouped",
                            "mask_fill": "-inf"}})
    assert judge("me", "m:f", "sdpa", wrong, known, []).nearest[0].system == "torch.sdpa"
