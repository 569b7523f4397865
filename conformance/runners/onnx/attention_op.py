"""The standard ONNX `Attention` operator (opset 23), in onnxruntime and in onnx's reference.

Spec: https://onnx.ai/onnx/operators/onnx__Attention.html (Attention-23; the
text quoted below is the schema shipped with the installed onnx,
`onnx.defs.get_schema("Attention", 23).doc`).

No framework exports this graph: it is built with onnx.helper from the
canonical weights, as a user writing ONNX by hand would: MatMul + Add
projections to 3-D Q (B, T, H*d_k), K (B, S, H_kv*d_k), V (B, S, H_kv*d_v);
one `Attention` node with q_num_heads / kv_num_heads ("Group-query Attention
... q_num_heads % kv_num_heads == 0", heads interleaved: query head h uses
key/value head h // (H / H_kv), as in the canonical weights); MatMul + Add
output projection.  The spec sizes V independently (`v_head_size`) and takes
the scale default "1/sqrt(head_size)" from Q/K, so per-head widths unrelated
to the input width are expressible.  The boolean attn_mask is ONNX polarity,
"a value of True indicates that the element should take part in attention",
the same as ours: key padding and explicit masks are ANDed into one
(B, 1, T, S) input.  Per-head weights come from the optional 4th output,
qk_matmul_output with qk_matmul_output_mode=3 ("the output after the softmax").

Causal alignment: `is_causal` is "bottom-right (offset-aware): query i attends
key j iff j <= i + past_sequence_length"; without a past cache the offset is
0, so for T != S it is upper-left.  lower_right is expressed through the
operator's own offset: the first S - T projected keys/values go in as
past_key/past_value (4-D, (B, H_kv, S - T, d)), the last T as K/V.  With
S < T no past length can be negative: not expressible.

Rotary embeddings and QK-norm: where the case asks, the projected Q and K pass through
standard opset-23 nodes before `Attention` (graph_parts.py): `RMSNormalization` /
`LayerNormalization` (QK-norm, per head through a reshape or over the projection) and
`RotaryEmbedding` (`interleaved`, `rotary_embedding_dim`, `position_ids` at the case's
absolute positions), as a user writing the graph of a Llama-style layer would.

Two rows, one graph, one class parametrised by `engine`: `onnx.attention-op.ort`
(engine="ort": onnxruntime CPU; its kernel has no bfloat16 path, and the row quotes ORT's own
error) and `onnx.attention-op.reference` (engine="reference":
onnx.reference.ReferenceEvaluator, NumPy).  onnx / onnxruntime are imported inside `run` only.

The ledger (conventions/probes/) judges every convention: it asks the graph through
translate/run (PROBE_TAKES; a probe's softcap call also returns qk_matmul_output at modes
0-2, which the ledger's softcap probe names) and `answer` (a raw attn_mask, is_causal,
window, or key_lengths as Attention-24's nonpad_kv_seqlen); the runner reports what its
graphs show with no oracle (attention_op_facts.py).
"""
from __future__ import annotations

from dataclasses import dataclass, replace

import numpy as np

from conformance.runners._export import onnx_accounting
from conformance.contract.runner import (
    NotExpressible, NotExpressibleError, Observation, Runner, Translation, harness_limit,
    to_numpy)
from conformance.runners.onnx.common import built_parameters
from conformance.runners._export.onnx_runtime import numpy_dtype, ort_session, short
from conformance.runners.onnx.graph_parts import (
    ELEM, ROPE_BUFFERS, Graph, float_attributes, graph_inputs, in_out,
    lone_node_verdict, positional_qk, rope_words)

OPSET = 23
SPEC_CAUSAL = ("is_causal: \"causal masking is applied with bottom-right (offset-aware) "
               "alignment: query `i` attends key `j` iff `j <= i + past_sequence_length`\"")
MASK_WORDS = "bool (B, 1, T, S), True = attend"
SPEC_URL = "https://onnx.ai/onnx/operators/onnx__Attention.html"
ANSWERS = frozenset({"attn_mask", "is_causal", "window", "key_lengths", "input_dtype",
                     "unbatched"})  # `answer` passes
# the axes the ledger asks through translate/run (probe_translate: a decode through the op's
# own past/present; the sizes, scale, softcap, float64, heads, rotary and QK-norm probe
# cases through the one-call graph; scale_precision reads the output and the mode-3 weights)
# and `answer` (softcap_order: a float mask beside the case's softcap).  size_arguments and
# input_layout confirm the reading conventions() reports
PROBE_TAKES = frozenset({"grouped", "rotary_dim", "decode", "cache_tensors", "float64"})
PAST_WORDS = "two tensors (past_key, past_value in; present_key, present_value out)"
# engine -> (backend, what the call says it runs in, modules it needs)
ENGINES = {"ort": ("onnxruntime", "onnxruntime CPUExecutionProvider", ("onnx", "onnxruntime")),
           "reference": ("onnx.reference", "onnx.reference.ReferenceEvaluator", ("onnx",))}


@dataclass(frozen=True)
class AttentionPlan:
    """The Attention node's arguments a user would choose for the case."""

    q_num_heads: int
    kv_num_heads: int
    is_causal: bool = False
    past_length: int = 0  # lower-right causal: the first S - T keys/values go in as the past
    attn_mask: bool = False  # a boolean (B, 1, T, S) graph input, True = attend
    scale: float | None = None  # the `scale` attribute, only when the case sets one
    softcap: float | None = None  # the `softcap` attribute (Attention-23 has it)
    # Attention-24's nonpad_kv_seqlen (B,): valid keys per item, an external cache's lengths
    nonpad: tuple[int, ...] | None = None
    # Attention-25's left_window_size / right_window_size (-1: that side unbounded)
    window: tuple[int, int] | None = None
    qk_mode: int = 3  # qk_matmul_output_mode: 3 the softmax weights, 0-2 the scores' stages
    stages: bool = False  # a probe's call: the scores at modes 0, 1, 2 too (run's extras)

    @property
    def opset(self) -> int:
        return 25 if self.window is not None else OPSET if self.nonpad is None else 24

    def attributes(self) -> dict[str, int | float]:
        """The node's attributes (qk_matmul_output_mode aside)."""
        attrs: dict[str, int | float] = {"q_num_heads": self.q_num_heads,
                                         "kv_num_heads": self.kv_num_heads}
        if self.is_causal:
            attrs["is_causal"] = 1
        if self.window is not None:
            attrs.update(left_window_size=self.window[0], right_window_size=self.window[1])
        return {**attrs, **float_attributes(scale=self.scale, softcap=self.softcap)}

    def arguments(self) -> str:
        """As the call shows them."""
        args = [", ".join(f"{k}={v!r}" for k, v in self.attributes().items())]
        if self.attn_mask:
            args.append(f"attn_mask={MASK_WORDS}")
        if self.past_length:
            args.append(f"past_key/past_value = first {self.past_length} projected keys/"
                        "values (lower-right offset)")
        if self.nonpad is not None:
            args.append(f"nonpad_kv_seqlen={list(self.nonpad)} [opset 24]")
        return ", ".join(args)


def attention_plan(case) -> AttentionPlan:
    a, i = case.attention, case.inputs
    causal = case.mask.causal != "none"
    past = i.key_len - i.query_len if case.mask.causal == "lower_right" else 0
    return AttentionPlan(a.num_heads, a.num_kv_heads, is_causal=causal,
                         past_length=max(past, 0), attn_mask=case.has_non_causal_mask,
                         scale=a.scale, softcap=a.softcap, window=_window(case))


def _window(case) -> tuple[int, int] | None:
    """mask.window as Attention-25's (left_window_size, right_window_size): "Maximum number
    of positions to the left of the current absolute query position that may be attended
    ... -1 leaves the left side unbounded" (the same reading as the case's)."""
    w = case.mask.window
    return None if w is None else (-1 if w.left is None else w.left,
                                   -1 if w.right is None else w.right)


def _split_past(g: Graph, case, k: str, v: str, past: int) -> None:
    """Lower-right causal: the first `past` keys/values become past_k/past_v
    (B, H_kv, past, d); the rest k_now/v_now."""
    a, b, s = case.attention, case.inputs.batch, case.inputs.key_len
    splits = g.const("split", [past, s - past])
    for x, d, tag in ((k, a.qk_head_dim, "k"), (v, a.v_head_dim, "v")):
        g.node("Split", [x, splits], [f"{tag}_past3", f"{tag}_now"], axis=1)
        g.node("Reshape", [f"{tag}_past3", g.const(
            f"{tag}_past_shape", [b, past, a.num_kv_heads, d])], [f"{tag}_past4"])
        g.node("Transpose", [f"{tag}_past4"], [f"past_{tag}"], perm=[0, 2, 1, 3])


def build_model(case, data, plan: AttentionPlan, mask: np.ndarray | None = None):
    """(ModelProto, feed) for the case; initializers in the case dtype.  With plan.attn_mask,
    the attn_mask input is the case's boolean mask, or `mask` ((B, 1, T, S), bool or the
    case dtype) as given, the input typed by its dtype."""
    from onnx import TensorProto, helper

    a, i, w = case.attention, case.inputs, data.weights
    elem = ELEM[i.dtype]
    b, t, s = i.batch, i.query_len, i.key_len
    g = Graph(i.dtype)
    inputs, feed = graph_inputs(case, data, elem)
    xk, xv = ("query", "query") if i.self_attention else ("key", "value")
    q = g.project("query", "q", in_out(w.wq), w.bq)
    k = g.project(xk, "k", in_out(w.wk), w.bk)
    v = g.project(xv, "v", in_out(w.wv), w.bv)
    q, k = positional_qk(g, case, w, q, k)  # QK-norm, RotaryEmbedding: when the case asks
    if plan.attn_mask:
        feed["attn_mask"] = m = data.inputs.non_causal[:, None] if mask is None else mask
        inputs.append(helper.make_tensor_value_info(
            "attn_mask", TensorProto.BOOL if m.dtype == bool else elem, [b, 1, t, s]))
    mask_in = "attn_mask" if plan.attn_mask else ""
    args, outs = [q, k, v, mask_in], ["heads", "", "", "weights"]
    if plan.past_length:  # lower-right causal: the first S - T keys/values become the "past"
        _split_past(g, case, k, v, plan.past_length)
        args = [q, "k_now", "v_now", mask_in, "past_k", "past_v"]
        outs = ["heads", "present_key", "present_value", "weights"]
    if plan.nonpad is not None:  # an external cache: K, V whole, its valid lengths
        feed["nonpad_kv_seqlen"] = np.array(plan.nonpad, np.int64)
        inputs.append(helper.make_tensor_value_info("nonpad_kv_seqlen", TensorProto.INT64, [b]))
        args = [q, k, v, mask_in, "", "", "nonpad_kv_seqlen"]
    g.node("Attention", args, outs, qk_matmul_output_mode=plan.qk_mode, **plan.attributes())
    out = g.project("heads", "o", w.wo.reshape(-1, a.output_features), w.bo)
    g.node("Identity", [out], ["output"])
    graph = helper.make_graph(
        g.nodes, "canonical_attention", inputs,
        [helper.make_tensor_value_info("output", elem, [b, t, a.output_features]),
         helper.make_tensor_value_info("weights", elem, [b, a.num_heads, t, s])], g.inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", plan.opset)],
                              producer_name="attention-conformance")
    return model, feed


def staged(t):
    """A probe's translation with the scores' stages asked (AttentionPlan.stages) where the
    case sets a softcap."""
    plan = getattr(t, "plan", None)
    if isinstance(plan, AttentionPlan) and plan.softcap is not None:
        return Translation(t.call, replace(plan, stages=True))
    return t


class OnnxAttentionOp(Runner):
    """engine="ort": onnxruntime's CPU kernel; engine="reference": the same graph
    in onnx.reference.ReferenceEvaluator (the spec's NumPy code)."""

    framework = "onnx"
    system = f"onnx Attention-{OPSET}"
    path = "graph"
    description = ("a graph around the ONNX `Attention` operator (opset 23; its `softcap` "
                   "attribute, and opset 25's `left_window_size` / `right_window_size` where "
                   "a case asks) in onnxruntime "
                   "and in `onnx.reference` (`RotaryEmbedding` and `RMSNormalization` / "
                   "`LayerNormalization` nodes before it where a case asks for RoPE or QK-norm)")
    seconds = 0.4
    no_parameters_label = "ONNX Attention op"
    engine = "ort"
    sets_scale = True  # the node's `scale` attribute ("default 1/sqrt(head_size)")
    # RotaryEmbedding-23 and RMSNormalization/LayerNormalization-23 nodes before the node
    features = Runner.features | {"rope", "position_offset", "qk_norm", "softcap", "window"}
    probe_takes = PROBE_TAKES

    def __init__(self, **params):
        super().__init__(**params)
        if "name" not in params:
            self.name = f"onnx.attention-op.{self.engine}"
        self.backend, self.runs_in, self.requires = ENGINES[self.engine]

    def translate(self, case):
        i = case.inputs
        if case.mask.causal == "lower_right" and i.key_len < i.query_len:
            return NotExpressible(
                f"lower-right causal with key_len {i.key_len} < query_len {i.query_len}: "
                f"Attention-23 {SPEC_CAUSAL}, and past_sequence_length cannot be negative")
        plan = attention_plan(case)
        before = rope_words(case)
        call = (f"MatMul+Add -> {before + ' -> ' if before else ''}"
                f"Attention(Q, K, V, {plan.arguments()}) "
                f"[opset {plan.opset}] -> MatMul+Add; run in {self.runs_in}")
        return Translation(call, plan)

    @property
    def answers(self) -> frozenset[str]:
        """ANSWERS (the cache rows, attention_cache.py, answer their own)."""
        return ANSWERS

    def answer(self, case, data, raw):
        """The Attention graph (build_model) on `data` with only `raw`: attn_mask fed as
        given as the node's (B, 1, T, S) input (a float mask in Q's dtype: the schema's type
        U is bool or T), key_lengths as Attention-24's nonpad_kv_seqlen, the window as
        Attention-25's, or is_causal set, with no mask and no past; the output as float64.
        It only calls: the ledger's probes judge."""
        a = case.attention
        plan = AttentionPlan(a.num_heads, a.num_kv_heads, scale=a.scale, softcap=a.softcap)
        mask = None
        if raw.argument not in self.answers:
            raise NotImplementedError(f"{self.name} passes no raw {raw.argument}")
        if raw.argument in ("input_dtype", "unbatched"):
            return self.native_call(case, data, plan, raw)
        if raw.argument == "attn_mask":
            m = np.asarray(raw.value)
            mask = (m if m.dtype == bool else m.astype(numpy_dtype(case.inputs.dtype)))[:, None]
            plan, arg = replace(plan, attn_mask=True), f"attn_mask=<{mask.dtype} (B, 1, T, S)>"
        elif raw.argument == "key_lengths":  # Attention-24's nonpad_kv_seqlen (B,) int64
            plan = replace(plan, nonpad=tuple(int(n) for n in np.asarray(raw.value)))
            arg = f"nonpad_kv_seqlen={list(plan.nonpad)}, no attn_mask"
        elif raw.argument == "window":  # Attention-25 takes two numbers: one is both sides
            left, right = (raw.value,) * 2 if np.ndim(raw.value) == 0 else raw.value
            causal = case.mask.causal != "none"
            plan = replace(plan, window=(int(left), int(right)), is_causal=causal)
            arg = ("the one number as both sides, " if np.ndim(raw.value) == 0 else "") + (
                "is_causal=1, " if causal else "") + "no attn_mask"
        else:
            plan = replace(plan, is_causal=bool(raw.value))
            arg = f"is_causal={int(bool(raw.value))}, no attn_mask, no past_key"
        model, feed = build_model(case, data, plan, mask)
        attrs = ", ".join(f"{k}={v!r}" for k, v in plan.attributes().items() if k != "is_causal")
        out = self.execute(model, feed, case.inputs.dtype)[0]
        return (np.asarray(out, np.float64), f"MatMul+Add -> Attention(Q, K, V, {attrs}, "
                f"{arg}) [opset {plan.opset}] -> MatMul+Add; run in {self.runs_in}")

    def native_call(self, case, data, plan, raw):
        """The graph with no mask fed every input cast to raw.value, or every input's item 0
        (2-D): an Observation with the output's own dtype, and the call."""
        model, feed = build_model(case, data, plan, None)
        if raw.argument == "input_dtype":
            feed, said = {n: np.asarray(v, raw.value) for n, v in feed.items()}, raw.value
        else:
            feed, said = {n: np.asarray(v)[0] for n, v in feed.items()}, "2-D (item 0)"
        out = np.asarray(self.execute(model, feed, case.inputs.dtype)[0])
        return Observation(output=out.astype(np.float64), native_dtype=str(out.dtype)), (
            f"MatMul+Add -> Attention(Q, K, V) [opset {plan.opset}] -> MatMul+Add, every "
            f"input fed {said} to the {case.inputs.dtype} graph; run in {self.runs_in}")

    def conventions(self):
        """What the graphs show with no oracle (attention_op_facts.py); the ledger judges."""
        from conformance.runners.onnx.attention_op_facts import facts

        def graph(case, data, mask=None, **fields):
            return build_model(case, data, replace(attention_plan(case), **fields), mask)

        return facts(self, graph, fill=getattr(self, "cache", None) is None)

    def schema_names(self):
        from conformance.runners.onnx.attention_op_facts import schema_names

        return schema_names()

    def probe_translate(self, case):
        """A ledger probe's case: the matrix's call; for the one-call rows also a decode
        through the op's own past_key/past_value -> present_key/present_value (Attention-23,
        is_causal=1 at every run: cache_graphs.decode, the graphs of the cache rows)."""
        if case.decode is None or getattr(self, "cache", None) is not None:
            return staged(self.translate(case))
        if case.has_non_causal_mask or not case.inputs.self_attention:
            return NotExpressible(harness_limit(
                "a decode is causal self-attention with no other mask"))
        d = case.decode
        return Translation(f"per run: MatMul+Add -> Attention(Q, K, V, is_causal=1, past_key/"
                           "past_value in, present_key/present_value out) [opset 23] -> "
                           f"MatMul+Add; prefill {d.prefill}, then {d.steps} steps of 1 "
                           f"position, present_* fed back; run in {self.runs_in}", ("decode", d))

    def decode_observation(self, case, data) -> Observation:
        """The prefill and every step through past/present (cache_graphs.decode): every
        position's output, present_key's shape after each run in extras."""
        from conformance.runners.onnx.cache_graphs import decode

        def evaluate(model, feed, names):
            if self.engine == "reference":
                from onnx.reference import ReferenceEvaluator

                return ReferenceEvaluator(model).run(names, feed)
            return ort_session(model.SerializeToString(), "past-cache Attention graph",
                               exported=False).run(names, feed)

        out, shapes, model = decode(case, data, "past", evaluate)
        return Observation(output=to_numpy(out), parameters=built_parameters(model, ROPE_BUFFERS),
                           extras={"cache_shapes": shapes, "cache_tensors": PAST_WORDS,
                                   "cache_note": f"present_key after each run: {shapes}"})

    def execute(self, model, feed, dtype: str):
        if self.engine == "reference":
            from onnx.reference import ReferenceEvaluator

            try:
                return ReferenceEvaluator(model).run(["output", "weights"], feed)
            except NotImplementedError as exc:
                raise NotExpressibleError(f"ReferenceEvaluator cannot run the {dtype} graph: "
                                          f"{short(exc)}") from exc
        try:
            session = ort_session(model.SerializeToString(), f"Attention-{OPSET} graph in {dtype}",
                                  exported=False)
        except NotExpressibleError as exc:  # say whether the Attention kernel itself lacks it
            raise NotExpressibleError(f"{exc}; a lone Attention node in {dtype}: "
                                      f"{lone_node_verdict(model, OPSET)}") from exc
        return session.run(["output", "weights"], feed)

    def run(self, case, translation, data):
        import onnx

        if isinstance(translation.plan, tuple):  # a decode (probe_translate)
            return self.decode_observation(case, data)
        plan: AttentionPlan = translation.plan
        model, feed = build_model(case, data, plan)
        try:
            onnx.checker.check_model(model, full_check=True)
        except onnx.checker.ValidationError as exc:
            raise NotExpressibleError(f"onnx.checker rejects the graph: {short(exc)}") from exc
        acc = onnx_accounting.account(model, data.weights.arrays())
        out, weights = self.execute(model, feed, case.inputs.dtype)
        notes = ["per-head weights from qk_matmul_output (qk_matmul_output_mode=3)",
                 "holds the canonical weights as initializers, rearranged to (in, heads*d)"]
        if plan.past_length:
            notes.append("lower-right causal via past_key/past_value: is_causal's offset is "
                         "past_sequence_length (upper-left without a past)")
        return Observation(
            output=to_numpy(out), attention_weights=to_numpy(weights), weights_returned="per_head",
            parameters=built_parameters(model, ROPE_BUFFERS),
            weight_shapes={t.name: tuple(t.dims) for t in model.graph.initializer
                           if t.data_type != onnx.TensorProto.INT64
                           and not t.name.endswith(ROPE_BUFFERS)},
            notes=notes, extras={"mask_polarity": "True = attend", **self.stages(case, data, plan)},
            graphs={f"Attention-{plan.opset}": acc})

    def stages(self, case, data, plan: AttentionPlan) -> dict:
        """A probe's call with a softcap (probe_translate): qk_matmul_output at modes 0, 1, 2
        as float64 (the ledger's softcap probe reads them: capped.py)."""
        if not plan.stages:
            return {}
        return {"score_stages": {m: np.asarray(self.execute(*build_model(case, data, replace(
            plan, qk_mode=m, stages=False)), case.inputs.dtype)[1], np.float64)
            for m in range(3)}}
