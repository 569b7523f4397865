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
from conformance.contract.probing import feature_cells_from_names
from conformance.contract.runner import harness_limit, to_numpy
from conformance.runners.onnx.common import built_parameters
from conformance.runners._export.onnx_runtime import numpy_dtype, ort_session
from conformance.runners.onnx.graph_parts import ELEM, Graph, graph_inputs, in_out

FILL = -10000.0  # MultiHeadAttention's mask_filter_value default
# The op's attributes and inputs, as onnxruntime's operator documentation
# (ContribOperators.md, com.microsoft.MultiHeadAttention) lists them: the names the
# ledger's feature axes look for.
CONTRIB_MHA_NAMES = ["num_heads", "mask_filter_value", "scale", "unidirectional", "query", "key",
                     "value", "bias", "key_padding_mask", "attention_bias", "past_key",
                     "past_value", "past_sequence_length", "cache_indirection"]


def split_masks(allowed: np.ndarray | None):
    """(key_padding (B, S) int32 or None, attention_bias (B, 1, T, S) or None)."""
    if allowed is None:
        return None, None
    valid = allowed.any(axis=1)  # a key no query of the item may attend is padding
    rest = allowed | ~valid[:, None, :]
    kpm = None if valid.all() else valid.astype(np.int32)
    bias = None if rest.all() else np.where(rest, 0.0, FILL)[:, None]
    return kpm, bias


def build_model(case, data, unidirectional: int = 0):
    """The graph and its feed; `unidirectional=1` sets the op's causal attribute (the
    convention probe), `attention.scale` its `scale` attribute; no bias, no Add node."""
    from onnx import helper

    a, i, w = case.attention, case.inputs, data.weights
    elem, b, t, s = ELEM[i.dtype], i.batch, i.query_len, i.key_len
    g = Graph(i.dtype)
    inputs, feed = graph_inputs(case, data, elem)
    xk, xv = ("query", "query") if i.self_attention else ("key", "value")
    args = [g.project("query", "q", in_out(w.wq), w.bq), g.project(xk, "k", in_out(w.wk), w.bk),
            g.project(xv, "v", in_out(w.wv), w.bv), ""]
    kpm, bias = split_masks(data.inputs.allowed)
    args.append("key_padding_mask" if kpm is not None else "")
    args.append("attention_bias" if bias is not None else "")
    if kpm is not None:
        feed["key_padding_mask"] = kpm
        inputs.append(helper.make_tensor_value_info("key_padding_mask", 6, [b, s]))
    if bias is not None:
        feed["attention_bias"] = bias.astype(numpy_dtype(i.dtype))
        inputs.append(helper.make_tensor_value_info("attention_bias", elem, [b, 1, t, s]))
    while args[-1] == "":
        args.pop()
    attrs = {"unidirectional": unidirectional} if unidirectional else {}
    if a.scale is not None:
        attrs["scale"] = float(a.scale)
    g.node("MultiHeadAttention", args, ["heads"], domain="com.microsoft",
           num_heads=a.num_heads, **attrs)
    g.project("heads", "o", w.wo.reshape(-1, a.output_features), w.bo, "output")
    return g.contrib_model("contrib_mha", inputs, [helper.make_tensor_value_info(
        "output", elem, [b, t, a.output_features])], 17), feed


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

    def probe_output(self, case, translation, data):
        """The graph's raw output, for the mask-encoding probes (conventions/probes/masks.py): a
        non-finite float32 output is the observation there, not a refusal."""
        model, feed = build_model(case, data)
        session = ort_session(model.SerializeToString(), "MultiHeadAttention probe graph")
        return session.run(["output"], feed)[0]

    def run(self, case, translation, data):
        model, feed = build_model(case, data)
        session = ort_session(model.SerializeToString(), f"MultiHeadAttention graph in "
                              f"{case.inputs.dtype}")
        acc = onnx_accounting.account(model, data.weights.arrays())
        (out,) = session.run(["output"], feed)
        notes = ["no output projection in the op: MatMul+Add after it" if case.attention.bias
                 else "no output projection in the op: MatMul after it (no biases: no Add)",
                 "key padding adds mask_filter_value -10000: a fully padded item attends as "
                 "if unmasked"]
        if not np.isfinite(out).all() and case.inputs.dtype == "float32":
            raise NotExpressibleError(harness_limit(
                "non-finite output: this runner reports no output with NaN or inf in float32"))
        return Observation(
            output=to_numpy(out), parameters=built_parameters(model),
            weight_shapes={t.name: tuple(t.dims) for t in model.graph.initializer},
            notes=notes, extras={"mask_polarity": "key_padding_mask 1 = valid"},
            graphs={"com.microsoft.MultiHeadAttention": acc})

    def _graph_output(self, case, unidirectional: int = 0) -> np.ndarray:
        from conformance.oracle.canonical import case_data

        model, feed = build_model(case, case_data(case), unidirectional)
        session = ort_session(model.SerializeToString(), "MultiHeadAttention probe graph")
        return np.asarray(session.run(["output"], feed)[0], np.float64)

    def attribute_cells(self):
        """causal_flag from `unidirectional=1` with T != S, softmax_scale from `scale=1.0`:
        each run in onnxruntime, every reading's distance quoted."""
        from conformance.contract.runner import Convention
        from conformance.contract.probing import (
            causal_candidates, closest, distances, output_with, probe_case)
        from conformance.oracle.canonical import causal_mask

        case = probe_case("contrib-causal", inputs={"query_len": 5, "key_len": 7})
        out = self._graph_output(case, unidirectional=1)
        cell = closest("causal_flag", out, causal_candidates(case), "onnxruntime "
                       "com.microsoft.MultiHeadAttention, unidirectional=1, T=5 != S=7")
        ul = output_with(case, causal_mask(5, 7, "upper_left"))
        rows = ", ".join(f"{np.max(np.abs(out[:, t] - ul[:, t])):.1e}" for t in range(5))
        causal = Convention("causal_flag", cell.value, f"{cell.evidence}; per query row from "
                            f"upper_left: {rows} (the op's schema lists unidirectional)")
        one = probe_case("contrib-scale", attention={"scale": 1.0})
        d = distances(self._graph_output(one), {"none": output_with(one, None, scale=1.0),
                                                "inv_sqrt_head_dim": output_with(
            one, None, scale=1 / np.sqrt(one.attention.qk_head_dim))})
        dflt = distances(self._graph_output(probe_case("contrib-scale")), {
            "d": output_with(probe_case("contrib-scale"), None)})["d"]
        scale = Convention("softmax_scale", "configurable", "onnxruntime "
                           "com.microsoft.MultiHeadAttention, attribute scale: default (0) "
                           f"inv_sqrt_head_dim {dflt:.1e} from the oracle; scale=1.0: none "
                           f"{d['none']:.1e}, inv_sqrt_head_dim {d['inv_sqrt_head_dim']:.1e}")
        return [causal, scale]

    def mask3d_cell(self):
        """attn_mask_polarity: the op's key_padding_mask also takes "(batch_size,
        sequence_length, total_sequence_length)", a per-query mask (type M: int32; a bool
        tensor is refused at load, quoted): a (B, T, S) int32 pattern fed raw."""
        from onnx import helper

        from conformance.contract import probe_cells as _ledger
        from conformance.contract.probing import probe_case
        from conformance.oracle.canonical import case_data

        case = probe_case("contrib-mask3d")
        model, feed = build_model(case, case_data(case))
        node = next(n for n in model.graph.node if n.op_type == "MultiHeadAttention")
        del node.input[3:]
        node.input.extend(["", "key_padding_mask"])
        i = case.inputs
        model.graph.input.append(helper.make_tensor_value_info(
            "key_padding_mask", 6, [i.batch, i.query_len, i.key_len]))
        session = ort_session(model.SerializeToString(), "MultiHeadAttention probe graph")
        bool_model = type(model).FromString(model.SerializeToString())
        bool_model.graph.input[-1].type.tensor_type.elem_type = 9  # BOOL
        try:
            ort_session(bool_model.SerializeToString(), "MultiHeadAttention probe graph")
            bool_words = "a bool key_padding_mask loads"
        except Exception as exc:  # onnxruntime's type check (M: int32)
            bool_words = f"a bool key_padding_mask: {' '.join(str(exc).split(' : ')[-1].split())}"
        cell = _ledger.mask_polarity(
            case, lambda m: session.run(["output"], {**feed, "key_padding_mask": np.asarray(
                m, np.int32)})[0], "onnxruntime com.microsoft.MultiHeadAttention, "
            "key_padding_mask (B, T, S) int32 (True as 1) fed raw")
        from conformance.contract.runner import Convention

        return Convention(cell.axis, cell.value, f"{cell.evidence}; {bool_words}")

    def refusal_cells(self):
        """unbatched_input (a 2-D query into the node), mixed_dtype (float64 fed to the
        float32 graph), scale_precision (a float64 graph): onnxruntime refuses each."""
        import onnx

        from conformance.contract.probing import probe_case
        from conformance.oracle.canonical import case_data
        from conformance.runners._export.onnx_runtime import tried

        case = probe_case("contrib-refusals", inputs={"self_attention": True, "key_len": 3})
        model, feed = build_model(case, case_data(case))
        session = ort_session(model.SerializeToString(), "MultiHeadAttention probe graph")
        rankless = onnx.ModelProto.FromString(model.SerializeToString())
        rankless.graph.input[0].type.tensor_type.ClearField("shape")  # the node sees 2-D
        loose = ort_session(rankless.SerializeToString(), "MultiHeadAttention probe graph")
        x = feed["query"]
        c64 = probe_case("contrib-scale-precision", attention={"num_heads": 2,
                                                                "query_features": 6},
                         inputs={"dtype": "float64", "self_attention": True, "key_len": 3})
        what = "onnxruntime com.microsoft.MultiHeadAttention probe graph"
        return [
            tried("unbatched_input", lambda: loose.run(["output"], {"query": x[0]}),
                  f"{what}: a 2-D (T, E) query (the graph's query input without a declared "
                  "shape, so the node itself checks it)"),
            tried("mixed_dtype", lambda: session.run(["output"], {"query": x.astype(
                np.float64)}), f"{what}: float64 inputs fed to the float32 graph"),
            tried("scale_precision", lambda: [self.run(c64, self.translate(c64),
                                                       case_data(c64)).output],
                  f"{what}: a float64 graph, d_k = 3 (the axis needs a float64 layer; type T "
                  "of the schema is float / float16)")]

    def conventions(self):
        from dataclasses import replace

        from conformance.contract.axes import NA
        from conformance.contract.runner import Convention
        from conformance.contract.probing import closest, output_with, probe_case, probe_mask
        from conformance.oracle.canonical import case_data

        case = probe_case("contrib")
        data = case_data(case)
        kp = probe_mask(case)[:, 0, :]
        allowed = np.broadcast_to(kp[:, None, :], probe_mask(case).shape)
        run = self.run(case, self.translate(case), replace(data, inputs=replace(
            data.inputs, allowed=allowed)))
        what = "probe_case probe-contrib, key_padding_mask int32 (B, S) from True = valid"
        cells = [closest("key_padding_polarity", run.output,
                         {"true_attends": output_with(case, allowed),
                          "true_blocks": output_with(case, ~allowed)}, what)]
        full = allowed.copy()
        full[1] = False  # item 1 fully padded
        out = self.run(case, self.translate(case), replace(data, inputs=replace(
            data.inputs, allowed=full))).output
        dist = float(np.max(np.abs(out[1] - output_with(case, None)[1])))
        word = "unmasked" if dist < 1e-5 else "finite_other"  # as the matrix's verdict reads
        cells.append(Convention("fully_masked_row", word, f"probe_case probe-contrib, "
                                f"item 1 fully padded via key_padding_mask: max |output - "
                                f"unmasked oracle| {dist:.1e} (-10000 added to every key: "
                                "close to the unmasked output, but float32 rounding of score - "
                                "10000 moves it beyond float32 noise, 1e-5)"))
        na = {"weights_dropout": "returns no weights", "dropout": "an inference op: no dropout"}
        cells += [Convention(a, NA, f"com.microsoft.MultiHeadAttention (attributes and inputs: "
                             f"{', '.join(CONTRIB_MHA_NAMES)}): {e}") for a, e in na.items()]
        cells += [self.mask3d_cell(), *self.refusal_cells()]
        cells += feature_cells_from_names("com.microsoft.MultiHeadAttention", CONTRIB_MHA_NAMES,
                                          "attributes and inputs (ContribOperators.md)")
        cells += [Convention("size_arguments", "given_tensors", "Q/K/V are projected tensors "
                             "(B, L, H*d) with num_heads; the op splits heads"),
                  Convention("argument_order", "query_key_value", "inputs query, key, value"),
                  Convention("input_layout", "batch_first", "query (B, T, H*d_k)"),
                  Convention("float_mask", "added", "attention_bias is added to the scores"),
                  *self.attribute_cells(),
                  Convention("implicit_mask", "none", "an ONNX tensor carries no mask")]
        from conformance.contract.cache_probes import override
        from conformance.runners.onnx.cache_probes import contrib_cache_cells

        return override(cells, contrib_cache_cells())
