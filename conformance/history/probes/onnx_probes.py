"""onnxruntime's contrib `com.microsoft.MultiHeadAttention` and the ONNX `Attention`
operator (opset 23) in onnxruntime and in `onnx.reference`, on projected tensors.

Graphs are built with onnx.helper at the lowest IR version the release accepts, so the
same probe runs from onnxruntime 1.16 on; a missing operator is `api_absent`.
"""
from __future__ import annotations

import numpy as np
from common import (Absent, attention, causal_kind, causal_masks, close, float_mask_probe,
                    fully_masked_probe, inputs, polarity_kind, row_kind, row_references)

PACKAGES = ("onnxruntime", "onnx", "numpy")
T, S, H, D = 3, 4, 2, 4


def _qkv(t=T):
    q, kv = inputs(t=t)
    return q, kv, q.reshape(1, t, H, D).transpose(0, 2, 1, 3), \
        kv.reshape(1, S, H, D).transpose(0, 2, 1, 3)


def _run(model, feeds, engine):
    """Run the one-node model; a model the release cannot load is `api_absent` (its opset,
    IR version or operator is newer than the release), an error while running is not."""
    try:
        if engine == "reference":
            from onnx.reference import ReferenceEvaluator
            session = ReferenceEvaluator(model)
        else:
            import onnxruntime as ort
            session = ort.InferenceSession(model.SerializeToString(),
                                           providers=["CPUExecutionProvider"])
    except Exception as e:
        op = model.graph.node[0].op_type
        raise Absent(f"cannot load a {op} graph (opset "
                     f"{max(o.version for o in model.opset_import)}): {str(e)[:200]}") from e
    return session.run(None, feeds)[0]


def _contrib(mask_input, mask, t=T):
    from onnx import TensorProto, helper
    q, kv, qh, kh = _qkv(t)
    names = ["q", "k", "v", "", "", ""]
    names[4 if mask_input == "key_padding_mask" else 5] = "m"
    node = helper.make_node("MultiHeadAttention", names, ["y"], domain="com.microsoft",
                            num_heads=H)
    etype = TensorProto.INT32 if mask.dtype == np.int32 else TensorProto.FLOAT
    ins = [helper.make_tensor_value_info(n, TensorProto.FLOAT, None) for n in "qkv"]
    ins.append(helper.make_tensor_value_info("m", etype, None))
    graph = helper.make_graph([node], "g", ins,
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17),
                                                    helper.make_opsetid("com.microsoft", 1)])
    model.ir_version = 8
    out = _run(model, {"q": q, "k": kv, "v": kv, "m": mask}, "ort")
    return out.reshape(1, t, H, D).transpose(0, 2, 1, 3), qh, kh


def _op(mask, engine, t=T, **attrs):
    from onnx import TensorProto, helper
    if engine == "reference":
        from onnx.reference.ops import load_op
        try:
            load_op("", "Attention", 23)
        except Exception as e:
            raise Absent(f"onnx.reference has no Attention-23: {str(e)[:120]}") from e
    q, kv, qh, kh = _qkv(t)
    names = ["q", "k", "v"] + (["m"] if mask is not None else [])
    node = helper.make_node("Attention", names, ["y"], **attrs)
    ins = [helper.make_tensor_value_info(n, TensorProto.FLOAT, None) for n in "qkv"]
    feeds = {"q": qh, "k": kh, "v": kh}
    if mask is not None:
        mtype = TensorProto.BOOL if mask.dtype == bool else TensorProto.FLOAT
        ins.append(helper.make_tensor_value_info("m", mtype, None))
        feeds["m"] = mask
    graph = helper.make_graph([node], "g", ins,
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 23)])
    model.ir_version = 10
    return _run(model, feeds, engine), qh, kh


def _op_probes(engine):
    def polarity():
        out, qh, kh = _op(np.ones((T, S), bool), engine)
        return polarity_kind(out, None, attention(qh, kh, kh)), "all-True boolean attn_mask"

    def causal():
        upper, lower = causal_masks(2, S)
        out, qh, kh = _op(None, engine, t=2, is_causal=1)
        return causal_kind(out, attention(qh, kh, kh, upper), attention(qh, kh, kh, lower),
                           attention(qh, kh, kh)), "is_causal=1 with T=2, S=4"
    return {"fully_masked_row": fully_masked_probe(lambda m: _op(m, engine), T, S),
            "float_mask": float_mask_probe(lambda m: _op(m, engine), T, S, "0/-1e9 float mask"),
            "attn_mask_polarity": polarity, "causal_flag": causal}


def _contrib_probes():
    def fully_masked():
        out, qh, kh = _contrib("key_padding_mask", np.zeros((1, S), np.int32))
        uniform, unmasked = row_references(out, qh, kh)
        kind = row_kind(out[:, :, 0], uniform, unmasked)
        if kind == "finite_other" and close(out[:, :, 0], unmasked, tol=1e-3):
            return "unmasked", ("key_padding_mask all 0: every score gets the same -10000, so "
                                "the row attends as if unmasked (scores rounded near -1e4 in "
                                "float32: agrees to 1e-3)")
        return kind, "key_padding_mask all 0 (every key of the batch row padded)"

    def bias(m):
        return _contrib("attention_bias", np.broadcast_to(m, (1, H, T, S)).copy())

    def polarity():
        out, qh, kh = _contrib("key_padding_mask", np.ones((1, S), np.int32))
        return polarity_kind(out, None, attention(qh, kh, kh)), "key_padding_mask all 1"
    return {"fully_masked_row": fully_masked,
            "float_mask": float_mask_probe(bias, T, S, "0/-1e9 float mask"),
            "key_padding_polarity": polarity}


def probes(library):
    if library == "onnx":
        return {f"attention_op.reference.{k}": v for k, v in _op_probes("reference").items()}
    cells = {f"contrib_mha.{k}": v for k, v in _contrib_probes().items()}
    cells.update({f"attention_op.{k}": v for k, v in _op_probes("ort").items()})
    return cells


IMPORTS = ("onnx", "onnxruntime")
IMPORTS_BY_LIBRARY = {"onnx": ("onnx",)}  # the reference evaluator needs no onnxruntime
