"""The ONNX `Attention` operator with a KV cache (#20), in onnxruntime and in onnx.reference.

Spec: https://onnx.ai/onnx/operators/onnx__Attention.html (the schema shipped with the
installed onnx, `onnx.defs.get_schema("Attention", 24).doc`, "With respect to KV cache
update, this operator allows the following two use cases").  Four rows, one class
parametrised by `engine` (as attention_op.py) and `cache`:

- `onnx.attention-op.cache.*` (cache="past", opset 23): decode cases only, a prefill then
  one position per step through the op's own `past_key`/`past_value` -> `present_key`/
  `present_value`, `is_causal=1` at every run ("offset = past_sequence_length when
  past_key is provided").
- `onnx.attention-op.static-cache.*` (cache="static", opset 24): an external cache, the
  errata path of onnx/onnx#8068: decode cases through preallocated buffers written by
  `TensorScatter` with `nonpad_kv_seqlen` and `is_causal=1` ("offset = nonpad_kv_seqlen -
  q_sequence_length (per batch) when an external cache is indicated by nonpad_kv_seqlen
  without past_key"); key padding (the case's valid lengths) as `nonpad_kv_seqlen`; a
  lower-right causal case with S >= T as keys of an external cache, nonpad_kv_seqlen = S.
  Both engines follow the errata (measured: the cache_causal_alignment and causal_flag
  probes); before it, onnx.reference aligned the external cache top-left.

The graphs are built per run (cache_graphs.py, or attention_op.build_model for the
one-call cases); nothing is exported, so nothing is cached.  onnx / onnxruntime are
imported inside the functions.
"""
from __future__ import annotations

import numpy as np

from conformance.contract.runner import (
    NotExpressible, Observation, Translation, harness_limit, to_numpy)
from conformance.runners._export import onnx_accounting
from conformance.runners.onnx.attention_op import (
    PROBE_TAKES, AttentionPlan, OnnxAttentionOp, staged)
from conformance.runners.onnx.common import built_parameters
from conformance.runners.onnx.graph_parts import ROPE_BUFFERS, rope_words

WORDS = {"past": "past_key/past_value in, present_key/present_value out [opset 23]",
         "static": "TensorScatter into preallocated key/value caches (B, H_kv, P + N, d), "
                   "nonpad_kv_seqlen = positions written [opset 24]"}


class OnnxAttentionCache(OnnxAttentionOp):
    """engine: "ort" / "reference"; cache: "past" (opset 23) / "static" (opset 24)."""
    decodes_only = True  # translate refuses a case without a decode section

    path = "KV cache"
    cache = "past"
    seconds = 0.3
    features = OnnxAttentionOp.features - {"window"} | {"decode"}

    def __init__(self, **params):
        super().__init__(**params)
        if "name" not in params:
            kind = "cache" if self.cache == "past" else "static-cache"
            self.name = f"onnx.attention-op.{kind}.{self.engine}"
        self.system = f"onnx Attention-{23 if self.cache == 'past' else 24}"
        self.description = DESCRIPTIONS[self.cache]
        # the ledger asks the cache axes and float64_compute through translate/run (the
        # runner's own decode: conventions/probes/cache.py, scores.py); the external cache
        # also its valid lengths and an item with none (rows.py); the one-call axes through
        # the op every step calls (probe_translate), attn_mask and is_causal raw (`answer`)
        self.probe_takes = PROBE_TAKES | (
            {"key_padding", "masked_rows"} if self.cache == "static" else set())

    @property
    def answers(self) -> frozenset[str]:
        """attn_mask and is_causal on the Attention op this runner calls (its one-call graph,
        no past: attention_op's `answer`); the external cache's is_causal beside
        nonpad_kv_seqlen = S; the past rows' step_mask (their decode, each step's attn_mask
        its mask row: `step_masked`).  The external cache's own mask is nonpad_kv_seqlen, its
        one-call key padding (static_plan), which the single-call probes ask."""
        return frozenset({"attn_mask", "is_causal", "input_dtype", "unbatched"}) | (
            {"step_mask"} if self.cache == "past" else set())

    def probe_translate(self, case):
        """A ledger probe's case: the rows' translation where it takes the case (a decode; the
        external cache's key padding or lower-right causal case); a case with no mask at all
        as one call of the op every step calls (attention_op's graph, no past)."""
        t = self.translate(case)
        unmasked = case.mask.causal == "none" and not case.has_non_causal_mask
        if isinstance(t, NotExpressible) and case.decode is None and unmasked:
            return staged(OnnxAttentionOp.translate(self, case))
        return t

    def translate(self, case):
        if case.decode is not None:
            if case.has_non_causal_mask:
                return NotExpressible(harness_limit("a decode here is causal self-attention, no "
                                                    "other mask"))
            d, before = case.decode, rope_words(case)
            return Translation(
                f"per run: MatMul+Add -> {before + ' -> ' if before else ''}Attention(Q, K, V, "
                f"is_causal=1, {WORDS[self.cache]}) -> MatMul+Add; prefill {d.prefill}, then "
                f"{d.steps} steps of 1 position, present_* fed back; run in {self.runs_in}",
                ("decode", d))
        if self.cache == "past":
            return NotExpressible(harness_limit(
                "this runner decodes through past_key/past_value: the case has no decode "
                f"section (one call: onnx.attention-op.{self.engine})"))
        plan = static_plan(case)
        if isinstance(plan, NotExpressible):
            return plan
        return Translation(
            f"MatMul+Add -> {rope_words(case) + ' -> ' if rope_words(case) else ''}Attention("
            f"Q, K, V, {plan.arguments()}) -> MatMul+Add; run in {self.runs_in}", plan)

    def run(self, case, translation, data):
        if isinstance(translation.plan, AttentionPlan):
            obs = super().run(case, translation, data)
            if translation.plan.is_causal:
                obs.notes.append(NOTES[self.cache])
            return obs
        from conformance.runners.onnx.cache_graphs import decode

        out, shapes, model = decode(case, data, self.cache,
                                    lambda m, f, n: self.evaluate(m, f, n, case.inputs.dtype))
        layout = f"present_key after each run: {shapes}"
        return Observation(
            output=to_numpy(out), parameters=built_parameters(model, ROPE_BUFFERS),
            weight_shapes={t.name: tuple(t.dims) for t in model.graph.initializer
                           if t.data_type != 7 and not t.name.endswith(ROPE_BUFFERS)},
            notes=[f"prefill {case.decode.prefill}, then {case.decode.steps} steps: "
                   f"{WORDS[self.cache]}; {layout}", NOTES[self.cache]],
            extras={"cache_note": layout, "cache_shapes": shapes,
                    "cache_tensors": CACHE_WORDS[self.cache],
                    "cache_preallocated": self.cache == "static"},
            graphs={f"Attention-{model.opset_import[0].version}":
                    onnx_accounting.account(model, data.weights.arrays())})

    def evaluate(self, model, feed, names, dtype: str = "float32"):
        """Run `model` in this runner's engine (the session's refusals quoted)."""
        if self.engine == "reference":
            from onnx.reference import ReferenceEvaluator

            return ReferenceEvaluator(model).run(names, feed)
        from conformance.runners._export.onnx_runtime import ort_session

        return ort_session(model.SerializeToString(), f"{self.cache}-cache Attention graph in "
                           f"{dtype}", exported=False).run(names, feed)

    def answer(self, case, data, raw):
        """is_causal on the external-cache graph (Attention-24, nonpad_kv_seqlen = S for every
        item: an external cache holding the S keys, no other mask)."""
        if raw.argument == "step_mask" and self.cache == "past":
            return step_masked(self, case, data, raw.value), (
                "Attention-23(Q, K, V, attn_mask=<bool (B, 1, 1, t + 1) row t, True = attend>, "
                "past_key, past_value, is_causal=1) at each step")
        if raw.argument != "is_causal" or self.cache != "static":
            return super().answer(case, data, raw)
        b, s = case.inputs.batch, case.inputs.key_len
        a = case.attention
        plan = AttentionPlan(a.num_heads, a.num_kv_heads, is_causal=bool(raw.value),
                             nonpad=(s,) * b)
        call = (f"Attention-24(Q, K, V, is_causal={int(bool(raw.value))}, nonpad_kv_seqlen="
                f"{[s] * b}, no past_key: an external cache)")
        return super().run(case, Translation(call, plan), data).output, call

    def conventions(self):
        """The Attention op's facts (the op this runner calls: attention_op_facts), with what
        the schema this runner's graphs import states in their place (attention_cache_facts);
        the ledger measures every other axis."""
        from conformance.runners.onnx.attention_cache_facts import facts

        mine = facts(self)
        about = {f.about for f in mine}
        return [f for f in super().conventions() if f.about not in about] + mine


def step_masked(runner, case, data, nan=None) -> Observation:
    """The past-cache decode (cache_graphs.decode), each single-position step's Attention
    given its mask row as attn_mask (input 3, bool (B, 1, 1, t + 1)) and returning its
    qk_matmul_output at mode 2 (the scores after the mask, before the softmax); `nan`
    ({'nan': 'key' or 'value', 'item', 'slot'}): NaN written into present_key or
    present_value after the prefill, fed back as past_*.  extras["masked_scores_hold"]: the
    number the masked scores hold (attention_op_facts.held_number), read off the output."""
    from onnx import TensorProto, helper

    from conformance.runners.onnx.attention_op_facts import held_number
    from conformance.runners.onnx.cache_graphs import empty_caches, spans, step_model
    from conformance.runners.onnx.graph_parts import ELEM

    caches, outs, held = empty_caches(case, "past"), [], []
    names = ["output", "present_key", "present_value"]
    for start, end in spans(case):
        model, feed = step_model(case, data, start, end, "past")
        step = end - start == 1
        if step:
            node = next(n for n in model.graph.node if n.op_type == "Attention")
            node.input[3] = "step_mask"
            node.output.append("qk")
            node.attribute.append(helper.make_attribute("qk_matmul_output_mode", 2))
            model.graph.input.append(helper.make_tensor_value_info(
                "step_mask", TensorProto.BOOL, [case.inputs.batch, 1, 1, end]))
            model.graph.output.append(helper.make_tensor_value_info(
                "qk", ELEM[case.inputs.dtype], None))
            rows = np.ascontiguousarray(data.inputs.allowed[:, None, start:end, :end])
            feed["step_mask"] = rows
        got = runner.evaluate(model, {**feed, **caches}, names + ["qk"] * step,
                              case.inputs.dtype)
        pk, pv = np.array(got[1]), np.array(got[2])
        if step:
            scores = np.asarray(got[3], np.float64)
            held.append(scores[~np.broadcast_to(rows, scores.shape)])
        if nan and start == 0:
            (pk if nan["nan"] == "key" else pv)[nan["item"], :, nan["slot"]] = np.nan
        caches = {"past_key": pk, "past_value": pv}
        outs.append(np.asarray(got[0]))
    return Observation(output=np.concatenate(outs, axis=1), extras={
        "masked_scores_hold": held_number(np.concatenate(held))})


def static_plan(case) -> AttentionPlan | NotExpressible:
    """The one-call cases of the static-cache rows: key padding alone as nonpad_kv_seqlen,
    or lower-right causal over S >= T keys as an external cache of S valid keys."""
    a, i, m = case.attention, case.inputs, case.mask
    other = (m.attn_mask_density is not None or m.attn_mask_matrix is not None
             or bool(m.masked_rows))
    base = {"q_num_heads": a.num_heads, "kv_num_heads": a.num_kv_heads, "scale": a.scale,
            "softcap": a.softcap}
    if m.key_padding is not None and m.causal == "none" and not other:
        return AttentionPlan(nonpad=tuple(int(n) for n in m.key_padding), **base)
    if m.causal == "lower_right" and i.key_len >= i.query_len and not case.has_non_causal_mask:
        return AttentionPlan(is_causal=True, nonpad=(i.key_len,) * i.batch, **base)
    return NotExpressible(harness_limit(
        "this runner calls Attention-24 with nonpad_kv_seqlen (an external cache's valid "
        "lengths): a decode, key padding alone, or lower-right causal over S >= T keys (an "
        "external cache's offset nonpad_kv_seqlen - q_sequence_length, onnx/onnx#8068); "
        "other masks: onnx.attention-op.*"))


DESCRIPTIONS = {
    "past": "the ONNX `Attention` operator decoding through its own cache (`past_key`/"
            "`past_value` in, `present_key`/`present_value` out, opset 23, `is_causal=1`), "
            "prefill then one position per step, in onnxruntime and in `onnx.reference`",
    "static": "the ONNX `Attention` operator with an external cache (opset 24): "
              "`TensorScatter` into preallocated buffers, `nonpad_kv_seqlen` and `is_causal=1` "
              "(bottom-right per the onnx/onnx#8068 errata) for decode cases, key padding as "
              "`nonpad_kv_seqlen`; in onnxruntime and in `onnx.reference`"}
CACHE_WORDS = {"past": "two tensors (past_key, past_value in; present_key, present_value out)",
               "static": "two preallocated tensors (key and value caches written by "
                         "TensorScatter, returned whole)"}
NOTES = {"past": "is_causal=1 with a past: offset = past_sequence_length (lower-right)",
         "static": "is_causal=1 with nonpad_kv_seqlen and no past: offset = nonpad_kv_seqlen - "
                   "q_sequence_length per item (onnx/onnx#8068 errata)"}
