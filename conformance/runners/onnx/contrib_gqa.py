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
- Softcap, sinks and windows: `softcap` (attribute), `head_sink` (input 11, the canonical sink
  logits), `local_window_size` (left_window_size "for causal local attention (like
  Mistral). Must be -1 when causal is 0"): since microsoft/onnxruntime#25927 ("Fix Local
  Attention off by 1 bug", 1.23) the window includes the current token, so w keys in all
  (the window_width probe measures it): a causal window {left: L} is local_window_size=L+1.
- Decode cases: one graph with dynamic lengths run as a prefill (past_key/past_value of
  length 0) then one position per step, present_key/present_value fed back as the past,
  `seqlens_k` = total - 1 and `total_sequence_length` = total as inputs, `position_ids` at
  the step's positions.
Self-attention only (the op's key and value are the query's own sequence plus the past).
The CPU kernel takes head sizes that are multiples of 8 only, 16 with do_rotary (its
message is quoted).
onnx / onnxruntime are imported inside the functions.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from conformance.contract.runner import (
    NotExpressible, NotExpressibleError, Observation, Runner, Translation, harness_limit,
    to_numpy)
from conformance.runners._export import onnx_accounting
from conformance.runners.onnx.common import built_parameters
from conformance.runners._export.onnx_runtime import numpy_dtype, ort_session, short
from conformance.runners.onnx.graph_parts import (
    ELEM, ROPE_BUFFERS, Graph, float_attributes, graph_inputs, in_out, rope_caches)
from conformance.runners.onnx.native_calls import NATIVE_CALLS, native_call

FILLS = {None: -np.inf, "-inf": -np.inf, "finfo_min": None, "-1e9": -1e9, "-1e4": -1e4}
GQA_DOC = ("https://github.com/microsoft/onnxruntime/blob/main/docs/ContribOperators.md"
           "#com.microsoft.GroupQueryAttention")
WINDOW_FIX = "microsoft/onnxruntime#25927"  # local_window_size includes the current token


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
    softcap: float | None = None
    local_window_size: int | None = None
    head_sink: bool = False  # the canonical sink logits as the head_sink input
    # seqlens_k (B,) as given (the ledger's key_lengths probe passes it raw); None: every
    # item's keys all valid, seqlens_k = T - 1 ("total_sequence_lengths - 1")
    seqlens_k: tuple[int, ...] | None = None

    def attributes(self, eps: float | None = None) -> dict:
        attrs = {"num_heads": self.num_heads, "kv_num_heads": self.kv_num_heads,
                 "causal": int(self.causal)}
        if self.do_rotary:
            attrs.update(do_rotary=1, rotary_interleaved=int(self.rotary_interleaved))
        attrs.update(float_attributes(scale=self.scale, softcap=self.softcap,
                                      qk_norm_epsilon=eps if self.qk_norm else None))
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
        if self.head_sink:
            args.append("head_sink (num_heads,)")
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
    window = _window(case)
    if isinstance(window, NotExpressible):
        return window
    if case.decode is not None and case.has_non_causal_mask:
        return NotExpressible(harness_limit("a decode here is causal self-attention with no other "
                                            "mask"))
    causal = m.causal != "none" and (window is not None or not case.has_non_causal_mask)
    return GqaPlan(a.num_heads, a.num_kv_heads, causal=causal,
                   attention_bias=m.causal != "none" and not causal or case.has_non_causal_mask,
                   do_rotary=a.rope is not None,
                   rotary_interleaved=a.rope is not None and a.rope.style == "interleaved",
                   qk_norm=n is not None, scale=a.scale, softcap=a.softcap,
                   local_window_size=window, head_sink=a.sinks)


def _window(case) -> int | None | NotExpressible:
    """local_window_size for the case's window: w keys, the query's own included
    (WINDOW_FIX), on the left of a causal mask only."""
    w = case.mask.window
    if w is None:
        return None
    if case.mask.causal == "none" or w.left is None:
        return NotExpressible(f"window left={w.left}, right={w.right} without a causal mask: "
                              "local_window_size 'for causal local attention ... Must be -1 "
                              "when causal is 0' (left keys only)")
    return w.left + 1


def _fill(case) -> float:
    f = FILLS[case.mask.fill]
    return float(np.finfo(case.inputs.dtype).min) if f is None else f


def _rope_inputs(g: Graph, case, args: list[str], decode: bool) -> None:
    from onnx import TensorProto, helper, numpy_helper

    from conformance.oracle.canonical import positions

    r, (qpos, _) = case.attention.rope, positions(case)
    cos, sin = rope_caches(qpos, r.rotary_dim, r.base)
    g.init("rope_cos", cos), g.init("rope_sin", sin)
    args += ["rope_cos", "rope_sin", "position_ids"]
    if decode:  # fed per step
        g.inputs.append(helper.make_tensor_value_info("position_ids", TensorProto.INT64,
                                                      [case.inputs.batch, "T"]))
        return
    pos = np.broadcast_to(qpos.astype(np.int64), (case.inputs.batch, len(qpos)))
    g.inits.append(numpy_helper.from_array(np.ascontiguousarray(pos), "position_ids"))


def _lengths(g: Graph, case, decode: bool, seqlens_k: tuple[int, ...] | None = None
             ) -> list[str]:
    """seqlens_k (B,) = total - 1 (or `seqlens_k` as given) and total_sequence_length:
    constants for a prompt, inputs fed per step for a decode, which also takes past_key /
    past_value."""
    from onnx import TensorProto, helper, numpy_helper

    a, b, t = case.attention, case.inputs.batch, case.inputs.query_len
    if not decode:
        lens = (np.full(b, t - 1, np.int32) if seqlens_k is None else
                np.array(seqlens_k, np.int32))
        g.inits += [numpy_helper.from_array(lens, "seqlens_k"),
                    numpy_helper.from_array(np.array(t, np.int32), "total_sequence_length")]
        return ["", ""]
    elem, past = ELEM[case.inputs.dtype], [b, a.num_kv_heads, "P", a.qk_head_dim]
    g.inputs += [helper.make_tensor_value_info("past_key", elem, past),
                 helper.make_tensor_value_info("past_value", elem, past),
                 helper.make_tensor_value_info("seqlens_k", TensorProto.INT32, [b]),
                 helper.make_tensor_value_info("total_sequence_length", TensorProto.INT32, [])]
    return ["past_key", "past_value"]


def build_model(case, data, plan: GqaPlan, decode: bool = False):
    """(ModelProto, feed) of the GroupQueryAttention graph for the case; with `decode` the
    query length, past and lengths are graph inputs (the feed holds none of them)."""
    from onnx import helper

    a, i, w = case.attention, case.inputs, data.weights
    elem, b, t = ELEM[i.dtype], i.batch, i.query_len
    g = Graph(i.dtype)
    g.inputs, feed = graph_inputs(case, data, elem)
    if decode:
        g.inputs[0].type.tensor_type.shape.dim[1].dim_param = "T"
    q = g.project("query", "q", in_out(w.wq), w.bq)
    k = g.project("query", "k", in_out(w.wk), w.bk)
    v = g.project("query", "v", in_out(w.wv), w.bv)
    args = [q, k, v, *_lengths(g, case, decode, plan.seqlens_k), "seqlens_k",
            "total_sequence_length"]
    if plan.do_rotary:
        _rope_inputs(g, case, args, decode)
    if plan.attention_bias:
        args += [""] * (10 - len(args)) + ["attention_bias"]
        mask = data.inputs.non_causal if plan.local_window_size else data.inputs.allowed
        feed["attention_bias"] = np.where(mask, 0.0, _fill(case))[:, None].astype(
            numpy_dtype(i.dtype))
        g.inputs.append(helper.make_tensor_value_info("attention_bias", elem, [b, 1, t, t]))
    if plan.head_sink:
        args += [""] * (11 - len(args)) + [g.init("head_sink", w.sinks)]
    if plan.qk_norm:
        args += [""] * (14 - len(args))
        args += [g.init("q_norm_weight", w.q_norm), g.init("k_norm_weight", w.k_norm)]
    g.node("GroupQueryAttention", args, ["heads", "present_key", "present_value"],
           domain="com.microsoft", **plan.attributes(a.qk_norm.eps if a.qk_norm else None))
    g.project("heads", "o", w.wo.reshape(-1, a.output_features), w.bo, "output")
    outputs = [helper.make_tensor_value_info("output", elem, [b, "T" if decode else t,
                                                              a.output_features])]
    if decode:
        outputs += [helper.make_tensor_value_info(n, elem, None)
                    for n in ("present_key", "present_value")]
    return g.contrib_model("contrib_gqa", g.inputs, outputs, 21), feed


def decode_run(session, case, feed) -> tuple[np.ndarray, list[tuple[int, ...]]]:
    """The prefill, then one position per step, through the op's past/present: the
    concatenated output (B, T, E) and present_key's shape after each run."""
    from conformance.oracle.canonical import positions

    a, b = case.attention, case.inputs.batch
    npdt, x = numpy_dtype(case.inputs.dtype), feed["query"]
    past = np.zeros((b, a.num_kv_heads, 0, a.qk_head_dim), npdt)
    past_k = past_v = past
    qpos, p = positions(case)[0].astype(np.int64), case.decode.prefill
    outs, shapes = [], []
    for lo, hi in [(0, p)] + [(s, s + 1) for s in range(p, case.inputs.query_len)]:
        step = {"query": x[:, lo:hi], "past_key": past_k, "past_value": past_v,
                "seqlens_k": np.full(b, hi - 1, np.int32),
                "total_sequence_length": np.array(hi, np.int32)}
        if a.rope is not None:
            step["position_ids"] = np.ascontiguousarray(np.broadcast_to(qpos[lo:hi],
                                                                        (b, hi - lo)))
        out, past_k, past_v = session.run(["output", "present_key", "present_value"], step)
        outs.append(out)
        shapes.append(tuple(past_k.shape))
    return np.concatenate(outs, axis=1), shapes


class OnnxContribGQA(Runner):
    name = "onnx.contrib-gqa.ort"
    framework = "onnx"
    system = "onnxruntime com.microsoft.GroupQueryAttention"
    path = "graph"
    backend = "onnxruntime"
    requires = ("onnx", "onnxruntime")
    description = ("onnxruntime's contrib `com.microsoft.GroupQueryAttention` (self-attention, "
                   "`do_rotary` / `rotary_interleaved`, `softcap`, `head_sink`, "
                   "`local_window_size`, decode through past/present with `seqlens_k`; its CPU "
                   "kernel refuses `q_norm_weight` and head sizes not a multiple of 8, 16 with "
                   "`do_rotary`)")
    seconds = 0.3
    no_parameters_label = "ORT contrib GroupQueryAttention"
    sets_scale = True  # the `scale` attribute (default 1/sqrt(head_size))
    features = Runner.features | {"rope", "position_offset", "qk_norm", "softcap", "sinks",
                                  "window", "decode"}
    # the ledger asks these through translate/run (conventions/probes/cache.py: the op's own
    # past/present decode; capped.py, softcap.py, scores.py, rows.py, heads.py,
    # positions.py, qk_norm.py) and `answer` (below); the API facts are gqa_facts.py's
    probe_takes = frozenset({"cache_tensors", "masked_rows", "grouped", "rotary_dim",
                             "float64"})
    # window_settings.py: local_window_size; key_padding.py: seqlens_k as given; flags.py /
    # causal_self.py: the causal attribute on a prompt (T = S: K and V are the query's
    # positions, keys before them come only as past)
    answers = frozenset({"window_setting", "key_lengths", "is_causal", "input_dtype",
                         "unbatched"})
    # the CPU kernel takes head sizes that are multiples of 8 only: the ledger's probe cases
    # whose readings do not depend on the head size are asked at 2 heads of 8
    probe_needs = {"query_features": 16}
    # and rotates heads of multiples of 16 with cos_cache widths of multiples of 8: a probe
    # fixing its own head size (2, 8; rotary_dim 4 of 8) the kernel refused is asked at
    # head size 32 (rotary_dim 16 of 32) after (conventions/probes/needs.py)
    probe_head_size = 32

    def translate(self, case):
        plan = gqa_plan(case)
        if isinstance(plan, NotExpressible):
            return plan
        d = case.decode
        how = "" if d is None else (f"; prefill {d.prefill} (past_key/past_value of length 0), "
                                    f"then {d.steps} steps of 1 position, present_* fed back "
                                    "as past_*")
        return Translation(f"MatMul+Add -> com.microsoft.GroupQueryAttention(Q, K, V, "
                           f"{'past_key, past_value, ' if d else ''}seqlens_k, "
                           f"total_sequence_length, {plan.arguments()}) -> MatMul+Add{how}; run "
                           "in onnxruntime CPUExecutionProvider", plan)

    def run(self, case, translation, data):
        decode = case.decode is not None
        model, feed = build_model(case, data, translation.plan, decode)
        session = ort_session(model.SerializeToString(), f"GroupQueryAttention graph in "
                              f"{case.inputs.dtype}")
        acc = onnx_accounting.account(model, data.weights.arrays())
        extras = {"mask_polarity": "attention_bias: 0 attends", "mask_passed":
                  f"additive {case.mask.fill or 'finfo_min'} mask in {case.inputs.dtype}"}
        try:
            if decode:
                out, shapes = decode_run(session, case, feed)
                extras.update(cache_shapes=shapes, cache_note=f"present_key after each run: "
                              f"{shapes}", cache_tensors="two tensors (present_key, "
                              "present_value)")
            else:
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
            extras=extras, graphs={"com.microsoft.GroupQueryAttention": acc})

    def window_settings(self, w: int) -> dict[str, bool]:
        """The op's one window setting: local_window_size, "for causal local attention (like
        Mistral). Must be -1 when causal is 0", so its builder is the causal one."""
        return {f"local_window_size={w}, causal=1": True}

    def answer(self, case, data, raw):
        """The case's prompt graph, no other mask, the output as float64, with one setting
        passed as given: window_setting, local_window_size = the number (no +1 of the
        runner's) and causal=1; key_lengths, seqlens_k = the (B,) values and causal=0;
        is_causal, the causal attribute (a prompt has T = S: the op's K and V are the
        query's positions, so a case with T != S is not asked); input_dtype and unbatched
        on the case's graph (native_calls.py)."""
        if raw.argument in NATIVE_CALLS:
            t = self.translate(case)
            if isinstance(t, NotExpressible):
                raise NotImplementedError(f"{self.name}: {t.reason}")
            model, feed = build_model(case, data, t.plan)
            return native_call(model, feed, raw, "onnxruntime GroupQueryAttention graph")
        if raw.argument not in self.answers:
            return super().answer(case, data, raw)
        from dataclasses import replace

        raw_prompt = raw.argument in ("key_lengths", "is_causal")
        if raw_prompt and (case.inputs.query_len != case.inputs.key_len
                           or not case.inputs.self_attention):
            raise NotImplementedError(
                f"{self.name}: GroupQueryAttention's K and V are the projections of the "
                "query's positions (self-attention, T = S); keys before them come only as "
                "past_key / past_value")
        t = self.translate(case)
        if isinstance(t, NotExpressible):
            raise NotImplementedError(f"{self.name}: {t.reason}")
        if raw.argument == "window_setting":
            plan = replace(t.plan, causal=True, attention_bias=False,
                           local_window_size=int(raw.value["window"]))
        elif raw.argument == "key_lengths":
            plan = replace(t.plan, causal=False, attention_bias=False,
                           seqlens_k=tuple(int(n) for n in raw.value))
        else:
            plan = replace(t.plan, causal=bool(raw.value), attention_bias=False)
        model, feed = build_model(case, data, plan)
        session = ort_session(model.SerializeToString(), "GroupQueryAttention graph")
        lens = f"={list(plan.seqlens_k)}" if plan.seqlens_k is not None else ""
        return (np.asarray(session.run(["output"], feed)[0], np.float64),
                f"MatMul+Add -> com.microsoft.GroupQueryAttention(Q, K, V, seqlens_k{lens}, "
                f"total_sequence_length, {plan.arguments()}) -> MatMul+Add; run in "
                "onnxruntime CPUExecutionProvider")

    def graph(self, case, data, plan: GqaPlan, decode: bool = False):
        """(model, feed): the graph `run` builds, for probes that run it in another way."""
        return build_model(case, data, plan, decode)

    def conventions(self):
        """The op's schema and the weights its output_qk returns (gqa_facts.py); the ledger
        asks the rest (probe_takes, answers)."""
        from conformance.runners.onnx.gqa_facts import gqa_facts

        return gqa_facts(self)

    def schema_names(self) -> tuple[str, list[str], str]:
        """The feature axes' argument names, for the ledger (conventions/probes/features.py):
        the installed onnxruntime's schema of the op."""
        from conformance.runners.onnx.gqa_facts import SCHEMA, schema_names

        return SCHEMA, schema_names(), "attributes and inputs (onnxruntime schema)"
