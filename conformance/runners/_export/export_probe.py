"""The probe graphs of nn.MultiheadAttention exported by torch.onnx (onnx.torch-export,
-legacy, .opset23, .opset24), with no judgement: `ExportProbe.graph` exports a probe module
with the runner's own exporter (cached by label, case, call and versions, and by program
digest: same_graph.py), `run` runs it in onnxruntime on named inputs; where onnxruntime
fails inside a graph (the opset-23 Attention node on a (B, H, 1, S) key-padding mask) it
reads the graph in onnx.reference and keeps ORT's message (`ort_errors`, quoted by `said`
and `note`).  deployed.RuntimeProbe runs the same probe modules converted and run in
another runtime.  The ledger judges (conventions/probes/, through the runners' `answer`);
torch and onnx are imported inside the methods.
"""
from __future__ import annotations

import numpy as np

from conformance.oracle.canonical import case_data
from conformance.runners._export.onnx_runtime import short

PROBE_FORMAT = 1  # bump when an export probe graph changes


class ExportProbe:
    """Exports a probe module with the runner's exporter (cached), runs it in onnxruntime;
    where ORT fails inside the graph, runs it in onnx.reference and keeps ORT's message."""

    def __init__(self, runner, wrap, cache=None):
        import onnx

        from conformance.runners._export.onnx_runtime import CACHE
        from conformance.runners._export.torch_mha import import_torch

        self.runner, self.wrap, self.torch = runner, wrap, import_torch()
        self.versions = (self.torch.__version__, onnx.__version__)
        self.what = f"{runner.name} probe graph"
        self.ort_errors: dict[str, str] = {}
        # where its artefacts live: the ONNX exports' namespace checks that an entry is an
        # ONNX model, so another runtime's artefact (a .pte, an IR) keeps its own namespace
        self.cache = CACHE if cache is None else cache

    def graph(self, label: str, case, masks: dict, kwargs: dict, **ctor) -> bytes:
        import logging
        import warnings

        from conformance.cache import key
        from conformance.runners._export.onnx_runtime import FORMAT
        from conformance.runners._export.same_graph import SameGraph
        from conformance.runners._export.torch_mha import probe_mha

        torch = self.torch
        mha, qkv = probe_mha(torch, case, **ctor)
        args = qkv[:1] if case.inputs.self_attention else qkv
        names = ("query",) if case.inputs.self_attention else ("query", "key", "value")
        module = self.wrap(torch, mha, case.inputs.self_attention, tuple(masks), kwargs)

        def make() -> bytes:
            logging.getLogger("torch.onnx").setLevel(logging.ERROR)
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                return self.runner._export(torch, module, args + tuple(masks.values()),
                                           names + tuple(masks))

        k = key(self.runner.name, "probe", label, case.fingerprint(), sorted(kwargs.items()),
                sorted(ctor.items()), self.versions, FORMAT, PROBE_FORMAT)
        inputs = args + tuple(masks.values())  # probes of equal programs share one artifact
        return SameGraph(self.cache).get_or_make(k, torch, module, inputs, make,
                                                 self.runner.name, names + tuple(masks),
                                                 self.versions, FORMAT, PROBE_FORMAT)[0]

    def run(self, label: str, blob: bytes, feed: dict, index: int = 0,
            strict: bool = False) -> np.ndarray:
        from conformance.runners._export.onnx_runtime import ort_session

        import onnx

        names = {i.name for i in onnx.load_from_string(blob).graph.input}
        feed = {n: v for n, v in feed.items() if n in names}  # an unused mask is dropped
        try:
            return ort_session(blob, self.what).run(None, feed)[index]
        except Exception as exc:  # ORT failed inside the graph: read it in onnx.reference
            if strict:
                raise
            from onnx.reference import ReferenceEvaluator

            text = short(exc, 3000)  # ORT's head and its check's own words at the end
            self.ort_errors[label] = text if len(text) < 420 else f"{text[:200]} ... {text[-200:]}"
            model = onnx.load_from_string(blob)
            return ReferenceEvaluator(model).run(None, feed)[index]

    def outputs(self, blob: bytes, feed: dict) -> list[np.ndarray]:
        """Every output of one onnxruntime run of the graph on `feed`, in the dtypes the
        runtime gave; its error propagates (no onnx.reference reading)."""
        from conformance.runners._export.onnx_runtime import ort_session

        import onnx

        names = {i.name for i in onnx.load_from_string(blob).graph.input}
        return ort_session(blob, self.what).run(None, {n: v for n, v in feed.items()
                                                       if n in names})

    def holds(self, blob: bytes, op: str) -> str:
        """What the ONNX program holds of operator `op`, for the call's text."""
        import onnx

        n = sum(node.op_type == op for node in onnx.load_from_string(blob).graph.node)
        return f"; the ONNX program holds {n} {op} node{'' if n == 1 else 's'}"

    def said(self, label: str) -> str:
        """ORT's failure on a graph read in onnx.reference, for the call's text."""
        err = self.ort_errors.get(label)
        return f" [read in onnx.reference: onnxruntime fails inside the graph: {err}]" \
            if err else ""


def qkv_feed(case, dtype=np.float32, data=None) -> dict:
    """The probe graph's query (key, value) inputs of `case` (its canonical data, or
    `data`), in `dtype`."""
    x = (data or case_data(case)).inputs
    feed = {"query": x.query.astype(dtype)}
    if not case.inputs.self_attention:
        feed.update(key=x.key.astype(dtype), value=x.value.astype(dtype))
    return feed
