"""Giant layers (#12): counted without materialising weights; over the numbers
budget an item is a count-only row and nothing is allocated."""
from __future__ import annotations

import pytest

from conformance.run import counting
from conformance.run import evaluate as matrix
from conformance.case.loader import CaseError, load_budget, load_file
from conformance.paths import CASES_DIR
from conformance.oracle.reference import formula_parameters
from conformance.runners import load
from conformance.compare.verdict import Outcome

GPT3 = CASES_DIR / "gpt3_scale.yaml"
TORCH = "conformance.runners.torch.mha:TorchMHA"


@pytest.fixture
def gpt3():
    (case,) = load_file(GPT3)
    return case


def test_gpt3_case_loads_over_the_numbers_budget(gpt3):
    assert formula_parameters(gpt3) == 4 * 12288**2 + 4 * 12288 == 603_979_776 + 49_152
    assert counting.over_budget(gpt3).startswith("numbers skipped: 604,028,928 weight")


def test_torch_meta_count_equals_the_formula(gpt3):
    pytest.importorskip("torch")
    count = load(TORCH).count(gpt3)
    assert count.method == "meta device"
    assert count.parameters == formula_parameters(gpt3)
    assert count.weight_shapes["in_proj_weight"] == (3 * 12288, 12288)


def test_over_budget_item_is_a_count_only_row_and_allocates_nothing(gpt3, monkeypatch):
    pytest.importorskip("torch")

    def refuse(*_a, **_k):
        raise AssertionError("allocated: case_data / the reference was called")

    for name in ("case_data", "attention", "expected_for"):
        monkeypatch.setattr(matrix, name, refuse)
    row = matrix.evaluate(gpt3, load(TORCH))
    assert row.outcome is Outcome.PASS and row.count_method == "meta device"
    assert "--max-elements" in row.reason and "numbers skipped" in row.reason
    assert row.parameters == formula_parameters(gpt3) and row.max_abs_error is None


def test_formula_default_is_labelled(gpt3):
    runner = load("conformance.runners.onnx.attention_op:OnnxAttentionOp", {"engine": "reference"})
    if runner.available():  # the row would be a skip: nothing to count with
        pytest.skip(runner.available())
    row = matrix.evaluate(gpt3, runner)
    assert row.count_method == "formula (no allocation-free path)"
    assert row.outcome is Outcome.PASS


def test_max_elements_raises_the_budget(gpt3):
    counting.configure(10**9)
    try:
        assert counting.over_budget(gpt3) is None
    finally:
        counting.configure(None)
    with pytest.raises(ValueError, match="--max-elements"):
        counting.configure(0)


def test_loader_still_refuses_absurd_sizes(tmp_path):
    path = tmp_path / "absurd.yaml"
    path.write_text("id: absurd\nattention: {num_heads: 2, query_features: 1000000}\n")
    with pytest.raises(CaseError, match="loader's limit of 1,000,000,000,000 "
                       r"\(raise it with CONFORMANCE_MAX_LOAD_ELEMENTS"):
        load_file(path)
    assert load_budget().weights == 10**12


def test_the_loader_limit_is_refused_by_validate_and_collection_and_can_be_raised(tmp_path):
    """#13: refused by `validate` and by the matrix (the file's error item), naming the
    limit and the variable that raises it; raised, the case loads (and is counted only)."""
    import os
    import subprocess
    import sys

    (tmp_path / "absurd.yaml").write_text(
        "id: absurd\nattention: {num_heads: 2, query_features: 1000000}\n")
    env = {k: v for k, v in os.environ.items() if k != "CONFORMANCE_MAX_LOAD_ELEMENTS"}
    cli = [sys.executable, "-m", "conformance", "validate", str(tmp_path)]
    collect = [sys.executable, "-m", "pytest", "-p", "conformance.plugin", "-p",  # the file's
               "no:cacheprovider", "-q", str(tmp_path), "--cases-dir",  # one error item
               str(tmp_path), "-k", "case-file-error"]
    for command in (cli, collect):
        res = subprocess.run(command, capture_output=True, text=True, env=env, cwd=tmp_path)
        assert res.returncode != 0
        assert "over the loader's limit of 1,000,000,000,000" in res.stdout + res.stderr
        assert "CONFORMANCE_MAX_LOAD_ELEMENTS" in res.stdout + res.stderr
    raised = {**env, "CONFORMANCE_MAX_LOAD_ELEMENTS": str(10**13)}
    res = subprocess.run(cli, capture_output=True, text=True, env=raised, cwd=tmp_path)
    assert res.returncode == 0, res.stdout + res.stderr


# ---- allocation-free counts of the HF and Flax runners (#12 part 1) --------------------------

SMALL = {"attention": {"num_heads": 2, "query_features": 8}, "inputs": {"self_attention": True}}
NATIVE = [  # (target, params, a small case it expresses, method, a weight name at GPT-3 scale)
    ("hf.bert:HFBert", {"attn_implementation": "eager"}, SMALL, "meta device",
     "self.query.weight"),
    ("hf.bert:HFBert", {"attn_implementation": "sdpa"}, SMALL, "meta device",
     "output.dense.weight"),
    ("hf.llama:HFLlama", {}, {"attention": {"num_heads": 4, "query_features": 8,
                                            "num_kv_heads": 2}, "inputs": SMALL["inputs"]},
     "meta device", "q_proj.weight"),
    ("hf.marian:HFMarian", {}, SMALL, "meta device", "out_proj.weight"),
    ("hf.gpt2:HFGpt2", {}, {**SMALL, "mask": {"causal": "upper_left"}}, "meta device", None),
    ("hf.t5:HFT5", {}, {"attention": {"num_heads": 2, "query_features": 8, "qk_head_dim": 3,
                                      "bias": False, "scale": 1.0},
                        "inputs": SMALL["inputs"]}, "meta device", None),
    ("flax.linen:FlaxLinen", {}, {"attention": {"num_heads": 2, "query_features": 8,
                                                "key_features": 6, "value_features": 5,
                                                "output_features": 5}}, "jax.eval_shape",
     "query/kernel"),
    ("flax.nnx:FlaxNnx", {}, {"attention": {"num_heads": 4, "query_features": 8,
                                            "num_kv_heads": 2, "key_features": 6,
                                            "value_features": 6}}, "jax.eval_shape",
     "query/kernel"),
]
NATIVE_IDS = [f"{t.split(':')[1]}{'-' + p['attn_implementation'] if p else ''}"
              for t, p, *_ in NATIVE]


def native(target: str, params: dict):
    runner = load(f"conformance.runners.{target}", params)
    if runner.available():
        pytest.skip(runner.available())
    return runner


@pytest.mark.parametrize("target, params, raw, method, _name", NATIVE, ids=NATIVE_IDS)
def test_native_count_equals_the_run_on_a_small_case(target, params, raw, method, _name):
    from conformance.contract.runner import NotExpressible
    from conformance.oracle.canonical import case_data

    from .helpers import make_case

    runner, case = native(target, params), make_case(**raw)
    translation = runner.translate(case)
    assert not isinstance(translation, NotExpressible), translation
    obs, count = runner.run(case, translation, case_data(case)), runner.count(case)
    assert count.method == method
    assert (count.parameters, count.weight_shapes) == (obs.parameters, obs.weight_shapes)
    assert count.parameters == formula_parameters(case)


GIANT = [n for n in NATIVE if n[4]]


@pytest.mark.parametrize("target, params, _raw, method, name", GIANT,
                         ids=[i for i, n in zip(NATIVE_IDS, NATIVE) if n[4]])
def test_native_count_at_gpt3_scale_allocates_nothing(gpt3, target, params, _raw, method, name):
    """A count-only row by the runner's own method; the process's peak memory does not
    grow by the layer's 2.4 GB of float32 weights (a floor: an earlier peak hides it)."""
    import resource

    runner = native(target, params)
    runner.count(gpt3)  # imports the framework before the peak is read
    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    row = matrix.evaluate(gpt3, runner)
    grown_kib = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before
    assert row.outcome is Outcome.PASS and row.count_method == method, row.reason
    assert row.parameters == formula_parameters(gpt3)
    shapes = runner.count(gpt3).weight_shapes  # nnx's names end in "/.value"
    assert next(s for n, s in shapes.items() if n.startswith(name))[0] == 12288
    assert grown_kib < 512 * 1024
