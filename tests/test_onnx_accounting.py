"""The ONNX helpers in isolation: cache, graph inventory, parameter accounting,
and the hand-built Attention-23 graph against the float64 reference."""
from __future__ import annotations

import numpy as np
import pytest

from conformance import cache
from conformance.runners._export.onnx_accounting import account, inventory, relation

from .helpers import make_case

onnx = pytest.importorskip("onnx", reason="onnx not installed (pip install -e '.[onnx]')")


def _graph(initializers: dict[str, np.ndarray], constant: np.ndarray | None = None):
    from onnx import TensorProto, helper, numpy_helper

    inits = [numpy_helper.from_array(a.astype(np.float32), n) for n, a in initializers.items()]
    inits.append(numpy_helper.from_array(np.array([2, 8], dtype=np.int64), "shape"))
    nodes = [helper.make_node("Reshape", ["x", "shape"], ["y"])]
    nodes += [helper.make_node("Identity", ["y"], ["z"])]
    if constant is not None:
        nodes.append(helper.make_node("Constant", [], ["c"], value=numpy_helper.from_array(
            constant.astype(np.float32))))
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT,
                                                                         [16])],
                              [helper.make_tensor_value_info("z", TensorProto.FLOAT, [2, 8])],
                              inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 20)])


def test_cache_roundtrip_is_atomic_and_keyed(tmp_path, monkeypatch):
    monkeypatch.setenv(cache.CACHE_ENV, str(tmp_path))
    store = cache.BytesCache("onnx", ".onnx")
    k = cache.key("runner", "case-fingerprint", "torch 2")
    assert k != cache.key("runner", "case-fingerprint", "torch 3")
    calls = []
    data, hit = store.get_or_make(k, lambda: calls.append(1) or b"graph")
    assert (data, hit) == (b"graph", False)
    data, hit = store.get_or_make(k, lambda: calls.append(1) or b"other")
    assert (data, hit, len(calls)) == (b"graph", True, 1)
    assert sorted(p.name for p in (tmp_path / "onnx").iterdir()) == [f"{k}.onnx",
                                                                     f"{k}.sha256"]  # no tmp


def test_cache_evicts_a_truncated_or_swapped_entry_and_names_it(tmp_path, monkeypatch, capsys):
    """#17: each entry is verified against a digest of key and bytes; a bad one is evicted,
    made again, and the eviction names the file."""
    monkeypatch.setenv(cache.CACHE_ENV, str(tmp_path))
    store = cache.BytesCache("onnx", ".onnx")
    a, b = cache.key("case-a"), cache.key("case-b")
    store.put(a, b"graph of a")
    store.put(b, b"graph of b")
    store.path(a).write_bytes(b"graph o")  # truncated
    assert store.get_or_make(a, lambda: b"graph of a") == (b"graph of a", False)
    assert str(store.path(a)) in capsys.readouterr().err
    assert store.get(a) == b"graph of a"  # the fresh entry verifies
    for suffix in (".onnx", ".sha256"):  # b's entry swapped in whole, digest file too
        (tmp_path / "onnx" / f"{a}{suffix}").write_bytes(
            (tmp_path / "onnx" / f"{b}{suffix}").read_bytes())
    assert store.get(a) is None and not store.path(a).exists()
    assert "another entry's" in capsys.readouterr().err


def test_cache_key_covers_the_generator_code(tmp_path, monkeypatch):
    """An entry keyed with `covers` is not reused once that code changes."""
    (tmp_path / "gen.py").write_text("SEED = 1\n")
    monkeypatch.setattr(cache, "ROOT", tmp_path)
    monkeypatch.setenv(cache.CACHE_ENV, str(tmp_path / "c"))
    store = cache.BytesCache("onnx", ".onnx", covers=("gen.py",))
    store.put("k", b"old weights")
    assert store.get("k") == b"old weights"
    (tmp_path / "gen.py").write_text("SEED = 2\n")
    cache.code_hash.cache_clear()
    assert store.get("k") is None
    cache.code_hash.cache_clear()


def test_inventory_counts_sorted():
    inv = inventory(_graph({}))
    assert inv == {"opset": {"ai.onnx": 20}, "ops": {"Identity": 1, "Reshape": 1}}


def test_relation_words():
    rng = np.random.default_rng(0)
    p = rng.standard_normal((6, 4))
    assert relation(p, p) == "as is"
    assert relation(p, p.T) == "transposed"
    assert relation(p, p[2:4]).startswith("as is, rows 2:4")
    assert relation(p, p[:, None, :].reshape(4, 6)) is not None
    assert relation(p, rng.standard_normal((6, 4))) is None


def test_account_finds_moved_split_and_missing_parameters():
    rng = np.random.default_rng(1)
    packed = rng.standard_normal((6, 4)).astype(np.float32).astype(np.float64)
    params = {"in_proj_weight": packed, "out_proj.weight": packed[:4].T * 2,
              "out_proj.bias": np.zeros(4)}
    model = _graph({"q": packed[:2], "kv": packed[2:].T.copy(),
                    "val_7": params["out_proj.weight"].T.copy()},
                   constant=np.array(0.5))
    acc = account(model, params)
    assert acc["framework_parameters"] == 24 + 16 + 4
    assert acc["exported_weights"] == 24 + 16
    assert acc["other_constants"] == 2 + 1  # the shape vector and the scalar
    assert [h["tensor"] for h in acc["mapping"]["in_proj_weight"]] == ["q", "kv"]
    assert acc["mapping"]["out_proj.weight"][0]["how"] == "transposed"
    assert acc["mapping"]["out_proj.bias"].startswith("missing (4 elements, all zeros)")
    assert "out_proj.bias" in acc["explanation"] and "-4" in acc["explanation"]


def test_zero_parameter_is_not_matched_by_an_unrelated_zero_tensor():
    params = {"bias": np.zeros(4), "w": np.arange(8.0).reshape(2, 4)}
    acc = account(_graph({"mask_zeros": np.zeros(8), "w": params["w"]}), params)
    assert isinstance(acc["mapping"]["bias"], str)
    assert acc["exported_weights"] == 8


@pytest.mark.parametrize("mask, attention", [
    ({"causal": "lower_right"}, {"num_heads": 2, "query_features": 8}),
    ({"key_padding": [6, 3]}, {"num_heads": 4, "num_kv_heads": 2, "query_features": 8,
                                "qk_head_dim": 3, "v_head_dim": 5, "output_features": 7}),
])
def test_attention_op_graph_matches_reference(mask, attention):
    from conformance.oracle.reference import attention as reference
    from conformance.runners.onnx.attention_op import OnnxAttentionOp
    from conformance.oracle.canonical import case_data

    case = make_case(attention=attention, inputs={"batch": 2, "query_len": 3, "key_len": 6,
                                                  "dtype": "float64"}, mask=mask)
    runner = OnnxAttentionOp(engine="reference")
    obs = runner.run(case, runner.translate(case), case_data(case))
    exp = reference(case)
    np.testing.assert_allclose(obs.output, exp.output, rtol=1e-10, atol=1e-12)
    np.testing.assert_allclose(obs.attention_weights, exp.weights, rtol=1e-10, atol=1e-12)
    assert obs.parameters == case_data(case).weights.count()


def test_attention_op_rejects_negative_causal_offset():
    from conformance.contract.runner import NotExpressible
    from conformance.runners.onnx.attention_op import OnnxAttentionOp

    case = make_case(inputs={"query_len": 6, "key_len": 3}, mask={"causal": "lower_right"})
    t = OnnxAttentionOp(engine="ort").translate(case)
    assert isinstance(t, NotExpressible) and "past_sequence_length" in t.reason


def test_onnx_runners_are_parameters_with_typed_descriptors():
    from conformance.runners.onnx.attention_op import AttentionPlan, OnnxAttentionOp
    from conformance.runners.onnx.torch_export import OnnxTorchExport

    legacy, dynamo = OnnxTorchExport(dynamo=False), OnnxTorchExport(dynamo=True)
    assert (legacy.name, dynamo.name) == ("onnx.torch-export-legacy", "onnx.torch-export")
    assert "onnxscript" in dynamo.requires and "onnxscript" not in legacy.requires
    assert (dynamo.system, dynamo.path, dynamo.backend) == (
        "torch.nn.MultiheadAttention", "exported graph", "onnxruntime")
    ort, ref = OnnxAttentionOp(engine="ort"), OnnxAttentionOp(engine="reference")
    assert [(r.name, r.backend, r.requires) for r in (ort, ref)] == [
        ("onnx.attention-op.ort", "onnxruntime", ("onnx", "onnxruntime")),
        ("onnx.attention-op.reference", "onnx.reference", ("onnx",))]
    case = make_case(inputs={"query_len": 3, "key_len": 6, "batch": 2},
                     mask={"causal": "lower_right", "key_padding": [6, 4]})
    t = ref.translate(case)
    assert t.plan == AttentionPlan(2, 2, is_causal=True, past_length=3, attn_mask=True)
    assert t.call == (
        "MatMul+Add -> Attention(Q, K, V, q_num_heads=2, kv_num_heads=2, is_causal=1, "
        "attn_mask=bool (B, 1, T, S), True = attend, past_key/past_value = first 3 projected "
        "keys/values (lower-right offset)) [opset 23] -> MatMul+Add; run in "
        "onnx.reference.ReferenceEvaluator")


def test_one_element_parameters_are_held_by_their_named_tensors():
    """1 head, 1 feature, with bias: every parameter is one element (a scalar
    in disguise, reshaped from (1, 1, 1) to (1, 1)); the graphs hold all 8."""
    from conformance.runners.onnx.attention_op import OnnxAttentionOp
    from conformance.runners.onnx.contrib_mha import OnnxContribMHA
    from conformance.oracle.canonical import case_data

    case = make_case(attention={"num_heads": 1, "query_features": 1, "bias": True},
                     inputs={"batch": 1, "query_len": 1, "key_len": 1, "dtype": "float32"})
    data = case_data(case)
    assert data.weights.count() == 8
    runners = [OnnxAttentionOp(engine="reference")]
    if OnnxContribMHA().available() is None:
        runners += [OnnxContribMHA()]
    for runner in runners:
        obs = runner.run(case, runner.translate(case), data)
        assert obs.parameters == 8, runner.name
        (acc,) = obs.graphs.values()
        assert acc["exported_weights"] == acc["framework_parameters"] == 8, runner.name
        assert {n: h[0]["tensor"] for n, h in acc["mapping"].items()} == {
            "wq": "W_q", "wk": "W_k", "wv": "W_v", "wo": "W_o",
            "bq": "b_q", "bk": "b_k", "bv": "b_v", "bo": "b_o"}, runner.name


def test_equal_one_element_parameters_go_to_their_named_tensors():
    """Two one-element parameters of one value: each is held by the tensor
    named after it, not by the first tensor of that value and shape."""
    params = {"bq": np.full((1,), 0.5), "bk": np.full((1,), 0.5), "w": np.arange(8.0)}
    acc = account(_graph({"b_k": np.full(1, 0.5), "b_q": np.full(1, 0.5), "w": params["w"]}),
                  params)
    assert acc["mapping"]["bq"][0]["tensor"] == "b_q"
    assert acc["mapping"]["bk"][0]["tensor"] == "b_k"
    assert acc["exported_weights"] == acc["framework_parameters"] == 10


def test_one_element_parameter_found_under_another_name_and_shape():
    """tf2onnx keeps a (1, 1, 1) Keras kernel as `query_1/Reshape:0` (1, 1);
    a 0.5 or a 0 is not matched that way (a scale, a folded zero)."""
    params = {"mha/query/kernel": np.full((1, 1, 1), np.float32(0.7749536)),
              "half": np.full((1, 1, 1), 0.5), "zero": np.zeros((1, 1, 1))}
    acc = account(_graph({"query_1/Reshape:0": np.full((1, 1), np.float32(0.7749536)),
                          "scale": np.full((1, 1), 0.5), "pad": np.zeros((1, 1))}), params)
    assert acc["mapping"]["mha/query/kernel"][0]["tensor"] == "query_1/Reshape:0"
    assert isinstance(acc["mapping"]["half"], str) and isinstance(acc["mapping"]["zero"], str)
    assert acc["exported_weights"] == 1


def test_converter_counter_suffixes_are_not_part_of_the_shown_names():
    """tf2onnx numbers the tensors it makes from a process-wide counter: the same graph
    converted after another gets `Reshape__9` for `Reshape__8`.  Reports show `__#`."""
    from conformance.runners._export.onnx_accounting import shown_name

    assert shown_name("Reshape__3113:0") == shown_name("Reshape__8:0") == "Reshape__#:0"
    assert shown_name("Reshape__12") == "Reshape__#"
    for kept in ("functional_1/mha_1/key_1/Reshape:0", "val_5", "a__b", "in_proj_weight"):
        assert shown_name(kept) == kept
