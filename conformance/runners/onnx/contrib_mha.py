"""onnxruntime's contrib operator `com.microsoft.MultiHeadAttention`, on the CPU.

Spec: https://github.com/microsoft/onnxruntime/blob/main/docs/ContribOperators.md
(com.microsoft.MultiHeadAttention).  The graph is built with onnx.helper from
the canonical weights: MatMul + Add projections to Q (B, T, H*d_k), K (B, S,
H*d_k), V (B, S, H*d_v) outside the op (the op's own packed `bias` input is
left empty); one MultiHeadAttention node with `num_heads`; the op has no output
projection, so MatMul + Add follow it.  Masks: keys that no query of a batch
item may attend go to `key_padding_mask` (int32 (B, S), 1 = valid); whatever
else the case masks goes to `attention_bias` (B, 1, T, S), 0 or -10000 (the
op's own mask_filter_value default).  Key padding *adds* mask_filter_value
(-10000) instead of removing the key; softmax is shift-invariant, so a fully
padded item attends as if unmasked (finite_other in the case files).  There
is no float64 kernel (ORT's message is quoted), no grouped-query (a separate
GroupQueryAttention op) and no way to return weights.
onnx / onnxruntime are imported inside `run` only.
"""
from __future__ import annotations

import numpy as np

from conformance.runners._export import onnx_accounting
from conformance.contract.runner import (
    NotExpressible, NotExpressibleError, Observation, Runner, Translation)
from conformance.contract.runner import harness_limit, to_numpy
from conformance.runners.onnx.common import built_parameters
from conformance.runners._export.onnx_runtime import ort_session

from conformance.runners.onnx.contrib_mha_graph import (  # noqa: F401 - its names
    CONTRIB_DOC, CONTRIB_MHA_NAMES, FILL, OP_NAME, PROBE, DECODE, build_model, split_masks)


class OnnxContribMHA(Runner):
    name = "onnx.contrib-mha.ort"
    framework = "onnx"
    system = "onnxruntime com.microsoft.MultiHeadAttention"
    path = "graph"
    backend = "onnxruntime"
    requires = ("onnx", "onnxruntime")
    description = ("onnxruntime's contrib `com.microsoft.MultiHeadAttention` (projections "
                   "around it; key padding adds -10000)")
    seconds = 0.4
    no_parameters_label = "ORT contrib MultiHeadAttention"
    sets_scale = True  # the op's `scale` attribute (default 0: 1/sqrt(head_size))
    # the ledger asks these through translate/run (probe_translate: the matrix's graph, and a
    # decode through the op's own past/present) and `answer` (a raw mask, unidirectional)
    probe_takes = frozenset({"key_padding", "masked_rows", "decode", "cache_tensors"})
    answers = frozenset({"attn_mask", "is_causal", "input_dtype", "unbatched"})

    def translate(self, case):
        a = case.attention
        if a.num_kv_heads != a.num_heads:
            return NotExpressible("grouped-query attention: MultiHeadAttention has one key/value "
                                  "head per query head (com.microsoft.GroupQueryAttention is "
                                  "another op)")
        if a.qk_head_dim != a.v_head_dim and case.inputs.dtype != "float32":
            return NotExpressible("d_k != d_v outside float32")
        masks = ", key_padding_mask (B, S) int32 1 = valid, attention_bias (B, 1, T, S) " \
            "0 / -10000" if case.has_non_causal_mask or case.mask.causal != "none" else ""
        add = "+Add" if a.bias else ""
        scale = f", scale={a.scale:g}" if a.scale is not None else ""
        return Translation(f"MatMul{add} -> com.microsoft.MultiHeadAttention(Q, K, V, "
                           f"num_heads={a.num_heads}{scale}{masks}) -> MatMul{add}; run in "
                           "onnxruntime CPUExecutionProvider", None)

    def probe_translate(self, case):
        """A ledger probe's case: the matrix's graph (its run then reports a non-finite
        output as it is: the observation of the mask probes), and a decode case through the
        op's own past_key/past_value -> present_key/present_value, unidirectional=1 at
        every run (the node attribute its users' graph carries), one position per step."""
        t = self.translate(case)
        if isinstance(t, NotExpressible) or case.decode is None:
            return t if isinstance(t, NotExpressible) else Translation(t.call, PROBE)
        if case.has_non_causal_mask or not case.inputs.self_attention:
            return NotExpressible(harness_limit(
                "a decode is causal self-attention with no other mask"))
        d = case.decode
        return Translation(f"MatMul -> com.microsoft.MultiHeadAttention(Q, K, V, past_key, "
                           f"past_value, num_heads={case.attention.num_heads}, "
                           f"unidirectional=1) -> MatMul: prefill {d.prefill} (no past), then "
                           f"{d.steps} steps of 1 position, present_* fed back as past_*; run "
                           "in onnxruntime CPUExecutionProvider", DECODE)

    def run(self, case, translation, data):
        if translation.plan == DECODE:
            from conformance.runners.onnx.contrib_mha_calls import decode_observation

            return decode_observation(case, data)
        model, feed = build_model(case, data)
        session = ort_session(model.SerializeToString(), f"MultiHeadAttention graph in "
                              f"{case.inputs.dtype}")
        acc = onnx_accounting.account(model, data.weights.arrays())
        (out,) = session.run(["output"], feed)
        notes = ["no output projection in the op: MatMul+Add after it" if case.attention.bias
                 else "no output projection in the op: MatMul after it (no biases: no Add)",
                 "key padding adds mask_filter_value -10000: a fully padded item attends as "
                 "if unmasked"]
        if (not np.isfinite(out).all() and case.inputs.dtype == "float32"
                and translation.plan != PROBE):
            raise NotExpressibleError(harness_limit(
                "non-finite output: this runner reports no output with NaN or inf in float32"))
        return Observation(
            output=to_numpy(out), parameters=built_parameters(model),
            weight_shapes={t.name: tuple(t.dims) for t in model.graph.initializer},
            notes=notes, extras={"mask_polarity": "key_padding_mask 1 = valid",
                                 # every mask goes in as attention_bias 0 / -10000
                                 "mask_passed": f"additive -10000 mask in {case.inputs.dtype}"},
            graphs={"com.microsoft.MultiHeadAttention": acc})

    def answer(self, case, data, raw):
        """The graph with `raw` fed as the system takes it (contrib_mha_calls.raw_output)."""
        if raw.argument not in self.answers:
            return super().answer(case, data, raw)
        from conformance.runners.onnx.contrib_mha_calls import raw_output

        return raw_output(case, data, raw.argument, raw.value)

    def schema_names(self):
        """(what, the op's attribute and input names, where they are listed): the ledger's
        feature axes read them (conventions/probes/features.py)."""
        return (OP_NAME, CONTRIB_MHA_NAMES, "attributes and inputs (ContribOperators.md)")

    def conventions(self):
        """What the op's schema and onnxruntime show (contrib_mha_calls.facts); the ledger
        asks the rest."""
        from conformance.runners.onnx.contrib_mha_calls import facts

        return facts(self, CONTRIB_MHA_NAMES)
