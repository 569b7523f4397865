"""nn.MultiheadAttention exported to ONNX by torch.onnx.export, run in onnxruntime.

What a user deploying a PyTorch attention layer gets: the *same* module the
`torch.mha` row runs (built by torch_mha.build_mha, so the canonical weights
are loaded), exported with the default dynamo exporter (`onnx.torch-export`)
or the TorchScript one (`onnx.torch-export-legacy`, dynamo=False, while this
torch still ships it), checked with onnx.checker and run in onnxruntime's
CPUExecutionProvider.

Each case exports two graphs, because `need_weights` changes the traced
program: the graph of `need_weights=False` (the inference form) gives the
row's output; the graph of `need_weights=True, average_attn_weights=False`
gives the per-head weights (B, H, T, S), and its output's difference from
the first graph is noted.  Masks are graph inputs in torch polarity
(True = blocked): `key_padding_mask` (B, S) and `attn_mask` ((T, S), or
(B*H, T, S) per item), exactly as torch_mha.torch_masks builds them.

Exports are cached (conformance/cache.py) by case content, runner, variant
and torch/onnx versions, so a second run does no export.  Each graph's
opset, operators and parameter accounting go to extras["graphs"]
(onnx_accounting.py).  An exporter or runtime that rejects a configuration
(e.g. onnxruntime has no bfloat16 kernel on CPU) makes the row not
expressible, quoting its own error.  torch, onnx, onnxruntime are imported
inside `run` only.
"""
from __future__ import annotations

import io

import numpy as np

from .. import onnx_accounting
from ..cache import BytesCache, key
from . import NotExpressible, NotExpressibleError, Observation, Runner, Translation, to_numpy
from .torch_mha import build_mha, import_torch, mha_translation, tensors, torch_masks

CACHE = BytesCache("onnx", ".onnx")
FORMAT = 1  # bump when what we export changes, to invalidate cached graphs
VARIANTS = {  # variant label -> forward keyword arguments
    "need_weights=False": {"need_weights": False},
    "need_weights=True, average_attn_weights=False": {"need_weights": True,
                                                      "average_attn_weights": False},
}


def short(exc: BaseException, limit: int = 600) -> str:
    """The first lines of an exception, as a one-line quote."""
    text = " ".join(str(exc).split())
    return f"{type(exc).__name__}: {text[:limit]}" + ("..." if len(text) > limit else "")


def numpy_dtype(name: str):
    if name == "bfloat16":
        import ml_dtypes

        return ml_dtypes.bfloat16
    return np.dtype(name)


def ort_session(model_bytes: bytes, what: str, exported: bool = True):
    """An onnxruntime CPU session.  A missing kernel (dtype) is not expressible;
    so is an exported graph ORT refuses to load (the exporter's doing), but a
    graph we built ourselves (exported=False) that fails to load is an error."""
    import onnxruntime as ort

    options = ort.SessionOptions()
    options.intra_op_num_threads = 1  # tiny graphs: threads cost more than they give
    options.log_severity_level = 3
    try:
        return ort.InferenceSession(model_bytes, options, providers=["CPUExecutionProvider"])
    except Exception as exc:  # ORT raises its own pybind classes (NotImplemented, Fail)
        if "NOT_IMPLEMENTED" in str(exc) or type(exc).__name__ == "NotImplemented":
            raise NotExpressibleError(f"onnxruntime {ort.__version__} CPUExecutionProvider "
                                      f"cannot run the {what}: {short(exc)}") from exc
        if exported:  # the exporter wrote a graph the runtime refuses to load
            raise NotExpressibleError(f"onnxruntime {ort.__version__} refuses to load the "
                                      f"{what}: {short(exc)}") from exc
        raise


def check(model_bytes: bytes):
    import onnx

    model = onnx.load_from_string(model_bytes)
    onnx.checker.check_model(model)
    return model


def _framework_params(mha) -> dict[str, np.ndarray]:
    return {n: p.detach().double().numpy() for n, p in mha.named_parameters()}


class _Wrapped:
    """Builds the nn.Module whose forward is the call a user would export."""

    @staticmethod
    def make(torch, mha, self_attention: bool, mask_names: tuple[str, ...], kwargs: dict):
        class Exported(torch.nn.Module):
            def __init__(self):
                super().__init__()
                self.mha = mha

            def forward(self, *args):
                n = 1 if self_attention else 3
                qkv = args[:1] * 3 if self_attention else args[:3]
                masks = dict(zip(mask_names, args[n:]))
                out, weights = self.mha(*qkv, **masks, **kwargs)
                return out if weights is None else (out, weights)

        return Exported().eval()


class OnnxTorchExport(Runner):
    name = "onnx.torch-export"
    framework = "onnx"
    requires = ("torch", "onnx", "onnxruntime", "onnxscript")
    dynamo = True
    sections = onnx_accounting.SECTIONS

    def translate(self, case):
        t = mha_translation(case)
        if isinstance(t, NotExpressible):
            return t
        args = "(query,)" if case.inputs.self_attention else "(query, key, value)"
        call = (f"torch.onnx.export({t.call}, {args}, dynamo={self.dynamo}); "
                "onnxruntime.InferenceSession(..., providers=['CPUExecutionProvider'])")
        return Translation(call, dict(t.kwargs))

    def _export(self, torch, module, args, names) -> bytes:
        if self.dynamo:
            program = torch.onnx.export(module, args, dynamo=True, input_names=list(names),
                                        verbose=False)
            return program.model_proto.SerializeToString()
        buf = io.BytesIO()
        try:
            torch.onnx.export(module, args, buf, dynamo=False, input_names=list(names))
        except TypeError as exc:  # a torch that dropped the TorchScript exporter
            if "dynamo" in str(exc):
                raise NotExpressibleError(f"torch {torch.__version__} has no TorchScript "
                                          f"exporter: {short(exc)}") from exc
            raise
        return buf.getvalue()

    def _graph(self, torch, case, module, args, names, variant) -> tuple[bytes, bool]:
        import onnx

        k = key(self.name, variant, case.fingerprint(), torch.__version__, onnx.__version__,
                FORMAT)

        def make() -> bytes:
            try:
                return self._export(torch, module, args, names)
            except NotExpressibleError:
                raise
            except Exception as exc:  # the exporter rejected this configuration
                raise NotExpressibleError(f"torch.onnx.export(dynamo={self.dynamo}, {variant}) "
                                          f"failed: {short(exc)}") from exc

        return CACHE.get_or_make(k, make)

    def run(self, case, translation, data):
        import logging
        import warnings

        torch = import_torch()

        logging.getLogger("torch.onnx").setLevel(logging.ERROR)
        mha, shapes = build_mha(torch, case, translation, data.weights)
        q, k, v = tensors(torch, case, data.inputs)
        kpm, am = torch_masks(torch, case, data.inputs)
        masks = {n: m for n, m in (("key_padding_mask", kpm), ("attn_mask", am)) if m is not None}
        args = (q,) if case.inputs.self_attention else (q, k, v)
        names = ("query",) if case.inputs.self_attention else ("query", "key", "value")
        args, names = args + tuple(masks.values()), names + tuple(masks)
        params = _framework_params(mha)
        feed_all = {n: a.numpy() if a.dtype == torch.bool else
                    a.double().numpy().astype(numpy_dtype(case.inputs.dtype))
                    for n, a in zip(names, args)}
        graphs, results, notes = {}, {}, []
        for variant, kwargs in VARIANTS.items():
            module = _Wrapped.make(torch, mha, case.inputs.self_attention, tuple(masks), kwargs)
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                blob, _ = self._graph(torch, case, module, args, names, variant)
            model = check(blob)
            graphs[variant] = onnx_accounting.account(model, params)
            session = ort_session(blob, f"graph exported with {variant}")
            inputs = {i.name for i in session.get_inputs()}
            results[variant] = session.run(None, {n: a for n, a in feed_all.items() if n in inputs})
        out, weights, delta = combine_graphs(results, graphs, notes, "torch", *VARIANTS)
        return Observation(
            output=out, attention_weights=weights, weights_returned="per_head",
            parameters=sum(p.numel() for p in mha.parameters()), weight_shapes=shapes,
            notes=notes,
            extras={"mask_polarity": "True = blocked (torch polarity, as graph inputs)",
                    "graph_inputs": list(names), "graphs": graphs,
                    "need_weights_output_delta": float(f"{delta:.2e}")})


def combine_graphs(results: dict, graphs: dict, notes: list[str], framework: str,
                   plain: str, with_weights: str):
    """Output from the graph exported without weights, per-head weights from the
    one exported with them; notes say so, how far the two outputs differ, and
    where the exported weight total differs from the framework's count."""
    out = to_numpy(results[plain][0])
    delta = float(np.nanmax(np.abs(to_numpy(results[with_weights][0]) - out), initial=0.0))
    notes.append(f"output from the {plain} graph; per-head weights from the {with_weights} "
                 f"graph (its output differs from the first by at most {delta:.2e})")
    acc = graphs[plain]
    if acc["exported_weights"] != acc["framework_parameters"]:
        notes.append(f"graph weights differ from {framework}'s count: {acc['explanation']}")
    return out, to_numpy(results[with_weights][1]), delta


class OnnxTorchExportLegacy(OnnxTorchExport):
    """The TorchScript exporter (dynamo=False), deprecated but still shipped."""

    name = "onnx.torch-export-legacy"
    requires = ("torch", "onnx", "onnxruntime")  # no onnxscript: TorchScript exporter
    dynamo = False
