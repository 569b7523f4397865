"""onnxruntime's contrib operator `com.microsoft.GroupQueryAttention`, on the CPU.

Spec: https://github.com/microsoft/onnxruntime/blob/main/docs/ContribOperators.md
(com.microsoft.GroupQueryAttention; the installed schema is read from
onnxruntime.capi.onnxruntime_pybind11_state.get_all_operator_schema()).  The graph is
built with onnx.helper from the canonical weights: MatMul (+ Add) projections to Q (B, T,
H*d), K and V (B, S, H_kv*d) outside the op; one GroupQueryAttention node with
`num_heads`, `kv_num_heads`, `causal` ("Must be 0 or 1. Default value is 1. Set to 0 for
bidirectional attention"), `seqlens_k` = S - 1 per item and `total_sequence_length` = S
(a prompt without a past); MatMul (+ Add) after it (the op has no output projection).
- Rotary: `do_rotary=1`, `rotary_interleaved`, cos/sin caches (max position + 1,
  rotary_dim / 2) and `position_ids` (B, T) at the case's positions.  The CPU kernel
  rotates only heads whose size is a multiple of 16, and cos_cache widths that are
  multiples of 8 (its own messages are quoted on the rows that hit them).
- QK-norm: `q_norm_weight` / `k_norm_weight` (head_size,): "per-head RMS normalization ...
  before any rotary embedding", epsilon `qk_norm_epsilon`.  LayerNorm or all-heads scope
  are not expressible.
- Masks: `causal=1` is the upper-left diagonal of a prompt (T = S, self-attention); every
  other mask goes into `attention_bias` (B, 1, T, S), 0 or the case's fill (default -inf).
Self-attention only (the op's key and value are the same sequence as the query here: no
past).  One plan dataclass (`GqaPlan`) holds the node's settings, so past/present,
local_window_size, softcap and head_sink (#20) can join it.
onnx / onnxruntime are imported inside the functions.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from conformance.contract.runner import (
    NotExpressible, NotExpressibleError, Observation, Runner, Translation, to_numpy)
from conformance.runners._export import onnx_accounting
from conformance.runners.onnx.common import built_parameters
from conformance.runners._export.onnx_runtime import numpy_dtype, ort_session, short
from conformance.runners.onnx.graph_parts import ROPE_BUFFERS, Graph, in_out, rope_caches

FILLS = {None: -np.inf, "-inf": -np.inf, "finfo_min": None, "-1e9": -1e9, "-1e4": -1e4}
ELEM = {"float32": 1, "float16": 10, "float64": 11, "bfloat16": 16}  # TensorProto codes


@dataclass(frozen=True)
class GqaPlan:
    """The GroupQueryAttention node's settings for the case."""

    num_heads: int
    kv_num_heads: int
    causal: bool = False  # causal=1: upper-left, a prompt with no past
    attention_bias: bool = False  # every other mask, 0 / fill, (B, 1, T, S)
    do_rotary: bool = False
    rotary_interleaved: bool = False
    qk_norm: bool = False  # q_norm_weight / k_norm_weight
    scale: float | None = None
    # set by the convention probes only (cases do not ask for them through this runner yet)
    softcap: float | None = None
    local_window_size: int | None = None
    head_sink: bool = False  # the canonical sink logits as the head_sink input

    def attributes(self, eps: float | None = None) -> dict:
        attrs = {"num_heads": self.num_heads, "kv_num_heads": self.kv_num_heads,
                 "causal": int(self.causal)}
        if self.do_rotary:
            attrs.update(do_rotary=1, rotary_interleaved=int(self.rotary_interleaved))
        if self.scale is not None:
            attrs["scale"] = float(self.scale)
        if self.qk_norm and eps is not None:
            attrs["qk_norm_epsilon"] = float(eps)
        if self.softcap is not None:
            attrs["softcap"] = float(self.softcap)
        if self.local_window_size is not None:
            attrs["local_window_size"] = int(self.local_window_size)
        return attrs

    def arguments(self) -> str:
        args = [", ".join(f"{k}={v!r}" for k, v in self.attributes().items())]
        if self.do_rotary:
            args.append("cos_cache, sin_cache, position_ids")
        if self.qk_norm:
            args.append("q_norm_weight, k_norm_weight")
        if self.attention_bias:
            args.append("attention_bias (B, 1, T, S) 0 / fill")
        return ", ".join(args)


def gqa_plan(case) -> GqaPlan | NotExpressible:
    a, i, m = case.attention, case.inputs, case.mask
    if not i.self_attention:
        return NotExpressible("GroupQueryAttention reads keys and values of the query's own "
                              "sequence (plus a past cache): cross-attention is not its call")
    if a.qk_head_dim != a.v_head_dim:
        return NotExpressible("GroupQueryAttention has one head_size for Q, K and V "
                              f"(d_k {a.qk_head_dim} != d_v {a.v_head_dim})")
    n = a.qk_norm
    if n is not None and (n.kind != "rms" or n.scope != "per_head"):
        return NotExpressible(f"QK-norm {n.kind} {n.scope}: GroupQueryAttention's "
                              "q_norm_weight / k_norm_weight are a 'per-head RMS "
                              "normalization' of shape (head_size)")
    causal = m.causal != "none" and not case.has_non_causal_mask
    return GqaPlan(a.num_heads, a.num_kv_heads, causal=causal,
                   attention_bias=m.causal != "none" and not causal or case.has_non_causal_mask,
                   do_rotary=a.rope is not None,
                   rotary_interleaved=a.rope is not None and a.rope.style == "interleaved",
                   qk_norm=n is not None, scale=a.scale)


def _fill(case) -> float:
    f = FILLS[case.mask.fill]
    return float(np.finfo(case.inputs.dtype).min) if f is None else f


def _rope_inputs(g: Graph, case, args: list[str]) -> None:
    from onnx import numpy_helper

    from conformance.oracle.canonical import positions

    r, (qpos, _) = case.attention.rope, positions(case)
    cos, sin = rope_caches(qpos, r.rotary_dim, r.base)
    g.init("rope_cos", cos), g.init("rope_sin", sin)
    pos = np.broadcast_to(qpos.astype(np.int64), (case.inputs.batch, len(qpos)))
    g.inits.append(numpy_helper.from_array(np.ascontiguousarray(pos), "position_ids"))
    args += ["rope_cos", "rope_sin", "position_ids"]


def build_model(case, data, plan: GqaPlan):
    """(ModelProto, feed) of the GroupQueryAttention graph for the case."""
    from onnx import helper, numpy_helper

    a, i, w = case.attention, case.inputs, data.weights
    elem, b, t = ELEM[i.dtype], i.batch, i.query_len
    g = Graph(i.dtype)
    q = g.project("query", "q", in_out(w.wq), w.bq)
    k = g.project("query", "k", in_out(w.wk), w.bk)
    v = g.project("query", "v", in_out(w.wv), w.bv)
    g.inits += [numpy_helper.from_array(np.full(b, t - 1, np.int32), "seqlens_k"),
                numpy_helper.from_array(np.array(t, np.int32), "total_sequence_length")]
    args = [q, k, v, "", "", "seqlens_k", "total_sequence_length"]
    feed = {"query": data.inputs.query.astype(numpy_dtype(i.dtype))}
    inputs = [helper.make_tensor_value_info("query", elem, [b, t, a.query_features])]
    if plan.do_rotary:
        _rope_inputs(g, case, args)
    if plan.attention_bias:
        args += [""] * (10 - len(args)) + ["attention_bias"]
        bias = np.where(data.inputs.allowed, 0.0, _fill(case))[:, None]
        feed["attention_bias"] = bias.astype(numpy_dtype(i.dtype))
        inputs.append(helper.make_tensor_value_info("attention_bias", elem, [b, 1, t, t]))
    if plan.head_sink:
        args += [""] * (11 - len(args)) + [g.init("head_sink", w.sinks)]
    if plan.qk_norm:
        args += [""] * (14 - len(args))
        args += [g.init("q_norm_weight", w.q_norm), g.init("k_norm_weight", w.k_norm)]
    g.node("GroupQueryAttention", args, ["heads", "present_key", "present_value"],
           domain="com.microsoft", **plan.attributes(a.qk_norm.eps if a.qk_norm else None))
    out = g.project("heads", "o", w.wo.reshape(-1, a.output_features), w.bo)
    g.node("Identity", [out], ["output"])
    graph = helper.make_graph(g.nodes, "contrib_gqa", inputs, [helper.make_tensor_value_info(
        "output", elem, [b, t, a.output_features])], g.inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 21),
                                                    helper.make_opsetid("com.microsoft", 1)])
    return model, feed


class OnnxContribGQA(Runner):
    name = "onnx.contrib-gqa.ort"
    framework = "onnx"
    system = "onnxruntime com.microsoft.GroupQueryAttention"
    path = "graph"
    backend = "onnxruntime"
    requires = ("onnx", "onnxruntime")
    description = ("onnxruntime's contrib `com.microsoft.GroupQueryAttention` (self-attention, "
                   "`do_rotary` / `rotary_interleaved`; its CPU kernel refuses `q_norm_weight`)")
    seconds = 0.3
    no_parameters_label = "ORT contrib GroupQueryAttention"
    sets_scale = True  # the `scale` attribute (default 1/sqrt(head_size))
    features = Runner.features | {"rope", "position_offset", "qk_norm"}

    def translate(self, case):
        plan = gqa_plan(case)
        if isinstance(plan, NotExpressible):
            return plan
        return Translation(f"MatMul+Add -> com.microsoft.GroupQueryAttention(Q, K, V, "
                           f"seqlens_k, total_sequence_length, {plan.arguments()}) -> "
                           "MatMul+Add; run in onnxruntime CPUExecutionProvider", plan)

    def run(self, case, translation, data):
        model, feed = build_model(case, data, translation.plan)
        session = ort_session(model.SerializeToString(), f"GroupQueryAttention graph in "
                              f"{case.inputs.dtype}")
        acc = onnx_accounting.account(model, data.weights.arrays())
        try:
            (out,) = session.run(["output"], feed)
        except Exception as exc:  # the kernel's own checks (head_size, CPU limits)
            if type(exc).__name__ != "InvalidArgument":
                raise
            raise NotExpressibleError(f"onnxruntime's CPU GroupQueryAttention kernel refuses "
                                      f"the case: {short(exc, 300)}") from exc
        return Observation(
            output=to_numpy(out), parameters=built_parameters(model, ROPE_BUFFERS),
            weight_shapes={t.name: tuple(t.dims) for t in model.graph.initializer
                           if t.data_type not in (6, 7) and not t.name.endswith(ROPE_BUFFERS)},
            notes=["no output projection in the op: MatMul+Add after it",
                   "returns no attention weights (qk_output not requested)"],
            extras={"mask_polarity": "attention_bias: 0 attends"},
            graphs={"com.microsoft.GroupQueryAttention": acc})

    def conventions(self):
        from conformance.runners.onnx.gqa_probes import gqa_cells

        return gqa_cells(self)
