"""nn.MultiheadAttention exported to ONNX by torch.onnx.export, run in onnxruntime.

What a user deploying a PyTorch attention layer gets: the *same* module the
`torch.mha` row runs (built by _export/torch_mha.py build_mha, so the canonical
weights are loaded), exported by _export/torch_onnx.py (shared with openvino.onnx)
with the default dynamo exporter (`onnx.torch-export`,
`OnnxTorchExport(dynamo=True)`) or the TorchScript one
(`onnx.torch-export-legacy`, dynamo=False, while this torch still ships it),
checked with onnx.checker and run in onnxruntime's CPUExecutionProvider.

Each case exports two graphs, because `need_weights` changes the traced
program: the graph of `need_weights=False` (the inference form) gives the
row's output; the graph of `need_weights=True, average_attn_weights=False`
gives the per-head weights (B, H, T, S), and its output's difference from
the first graph is noted.  Masks are graph inputs in torch polarity
(True = blocked): `key_padding_mask` (B, S) and `attn_mask` ((T, S), or
(B*H, T, S) per item), exactly as torch_mha.torch_masks builds them.

Exports are cached (conformance/cache.py) by case content, runner, variant
and torch/onnx versions, so a second run does no export.  Each graph's
opset, operators and parameter accounting go to Observation.graphs
(_export/onnx_accounting.py).  An exporter or runtime that rejects a configuration
(e.g. onnxruntime has no bfloat16 kernel on CPU) makes the row not
expressible, quoting its own error.  torch, onnx, onnxruntime are imported
inside `run` only.
"""
from __future__ import annotations

from conformance.contract.runner import (
    NotExpressible, NotExpressibleError, Observation, Runner, Translation)
from conformance.runners._export import onnx_accounting
from conformance.runners._export.onnx_runtime import check, combine_graphs, ort_session, short
from conformance.runners._export.torch_export_answers import (
    ANSWERS, answer, facts, signatures)
from conformance.runners._export.torch_mha import import_torch, mha_translation
from conformance.runners._export.torch_onnx import (
    VARIANTS, TorchOnnxExporter, framework_params, module_call, wrap_module)


def _upstream(exc) -> str:
    """What is known of an ORT run-time refusal: the opset-23/24 Attention node given a
    key-padding mask of shape (B, H, 1, S), which the spec allows ("broadcastable to
    (batch_size, q_num_heads, q_sequence_length, total_sequence_length)")."""
    if "inconsistent q_sequence_length (between attn_mask and Q)" not in str(exc):
        return ""
    return (" | the exported Attention node gets attn_mask (B, H, 1, S), which Attention-23 "
            "allows ('broadcastable to (batch_size, q_num_heads, q_sequence_length, "
            "total_sequence_length)'); ORT's CPU kernel requires attn_mask.shape[-2] == "
            "q_sequence_length; onnx.reference runs the same graph (1.2e-07 from torch); kernel: "
            "https://github.com/microsoft/onnxruntime/pull/25156 (no upstream issue found)")


class OnnxTorchExport(TorchOnnxExporter, Runner):
    """`dynamo=True`: the default exporter (onnx.torch-export, needs onnxscript);
    `dynamo=False`: the TorchScript one (onnx.torch-export-legacy), deprecated
    but still shipped."""

    framework = "onnx"
    system = "torch.nn.MultiheadAttention"
    path = "exported graph"
    backend = "onnxruntime"
    seconds = 0.4
    typed_system = "torch"
    dynamo = True
    opset: int | None = None  # None: the exporter's default opset

    def __init__(self, **params):
        super().__init__(**params)
        if "name" not in params:
            self.name = "onnx.torch-export" + ("" if self.dynamo else "-legacy") + (
                f".opset{self.opset}" if self.opset else "")
        self.description = (
            "the dynamo export at the opset its name gives, where it emits the ONNX "
            "`Attention` operator" if self.opset else "the `torch.mha` module exported (dynamo / "
            "TorchScript exporter), run in onnxruntime")
        # the TorchScript exporter needs no onnxscript
        self.requires = ("torch", "onnx", "onnxruntime") + (("onnxscript",) if self.dynamo
                                                             else ())

    def translate(self, case):
        t = mha_translation(case)
        if isinstance(t, NotExpressible):
            return t
        args = "(query,)" if case.inputs.self_attention else "(query, key, value)"
        opset = f", opset_version={self.opset}" if self.opset else ""
        call = (f"torch.onnx.export({t.call}, {args}, dynamo={self.dynamo}{opset}); "
                "onnxruntime.InferenceSession(..., providers=['CPUExecutionProvider'])")
        return Translation(call, t.plan)

    # the ledger asks through translate/run and `answer` (RAW_PROBES): probe graphs
    # exported like the rows' (_export/torch_export_answers.py); the float64 probe case
    # too for the dynamo exports (the TorchScript exporter refuses a float64 module with an
    # attn_mask, "Unsupported type for attn_mask: 7", so the ledger's causal float64 case
    # cannot show its arithmetic: its float64 rows settle it)
    answers = ANSWERS

    @property
    def probe_takes(self):  # type: ignore[override]
        return frozenset({"float64"} if self.dynamo else ())

    def probe(self):
        from conformance.runners._export.export_probe import ExportProbe

        return ExportProbe(self, wrap_module)

    def answer(self, case, data, raw):
        return answer(self.probe(), case, data, raw)

    def signatures(self):
        return signatures(import_torch())

    def conventions(self):
        """The exported module's API facts (_export/torch_export_answers.py): no oracle."""
        return facts(self.probe())

    def run(self, case, translation, data):
        import logging
        import warnings

        torch = import_torch()

        logging.getLogger("torch.onnx").setLevel(logging.ERROR)
        call = module_call(torch, case, translation, data)
        mask_names = call.names[1 if case.inputs.self_attention else 3:]
        params = framework_params(call.mha)
        graphs, results, notes, held = {}, {}, [], set()
        for variant, kwargs in VARIANTS.items():
            module = wrap_module(torch, call.mha, case.inputs.self_attention, mask_names, kwargs)
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                blob, _ = self._graph(torch, case, module, call.args, call.names, variant)
            model = check(blob)
            graphs[variant] = onnx_accounting.account(model, params)
            held.update(onnx_accounting.held_scalars(model))  # the numbers the graphs hold
            session = ort_session(blob, f"graph exported with {variant}")
            inputs = {i.name for i in session.get_inputs()}
            try:
                results[variant] = session.run(None, {n: a for n, a in call.feed.items()
                                                      if n in inputs})
            except Exception as exc:  # ORT's kernel refuses the exported graph at run time
                if "Non-zero status code returned while running" not in str(exc):
                    raise
                raise NotExpressibleError(f"onnxruntime refuses to run the graph exported with "
                                          f"{variant}: {short(exc, 900)}{_upstream(exc)}") from exc
        out, weights, delta = combine_graphs(results, graphs, notes, "torch", *VARIANTS)
        return Observation(
            output=out, attention_weights=weights, weights_returned="per_head",
            parameters=sum(p.numel() for p in call.mha.parameters()), weight_shapes=call.shapes,
            held_scalars=tuple(sorted(held)), weights_dtype=onnx_accounting.weights_dtype(model),
            notes=notes,
            extras={"mask_polarity": "True = blocked (torch polarity, as graph inputs)",
                    "graph_inputs": list(call.names),
                    "need_weights_output_delta": float(f"{delta:.2e}")},
            graphs=graphs)
