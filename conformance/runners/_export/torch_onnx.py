"""nn.MultiheadAttention exported by torch.onnx, as a user deploys it: the module call
(masks in torch polarity, True = blocked, as graph inputs), the two export variants, the
wrapper whose forward is the exported call, and the exporter with its cache.

Used by onnx.torch-export* (runners/onnx/torch_export.py), which runs the graphs in
onnxruntime, and openvino.onnx (runners/openvino/mha.py), which compiles the very same
cached graphs (the cache key holds the exporter's name, so they cost no second export).
torch and onnx are imported inside the functions only.
"""
from __future__ import annotations

import io
from dataclasses import dataclass

import numpy as np

from conformance.cache import key
from conformance.contract.runner import NotExpressibleError
from conformance.runners._export.onnx_runtime import CACHE, FORMAT, numpy_dtype, short
from conformance.runners._export.same_graph import SameGraph
from conformance.runners._export.torch_mha import build_mha, tensors, torch_masks
from conformance.runners._export.cia_once import cia_ops_listed_once
from conformance.runners._export.torchlib_once import torchlib_listed_once

SAME_ONNX = SameGraph(CACHE)  # cases with equal programs share one export
VARIANTS = {  # variant label -> forward keyword arguments
    "need_weights=False": {"need_weights": False},
    "need_weights=True, average_attn_weights=False": {"need_weights": True,
                                                      "average_attn_weights": False},
}


@dataclass
class ModuleCall:
    """The canonical nn.MultiheadAttention of a case and the graph inputs a user feeds."""

    mha: object
    shapes: dict
    args: tuple  # torch tensors, in `names` order
    names: tuple[str, ...]
    feed: dict  # name -> NumPy array in the case dtype (bool masks as they are)


def module_call(torch, case, translation, data) -> ModuleCall:
    """The module loaded with the canonical weights, and its export arguments: query (key,
    value) then the masks torch_masks builds, named as the graph's inputs."""
    mha, shapes = build_mha(torch, case, translation, data.weights)
    q, k, v = tensors(torch, case, data.inputs)
    kpm, am = torch_masks(torch, case, data.inputs)
    masks = {n: m for n, m in (("key_padding_mask", kpm), ("attn_mask", am)) if m is not None}
    args = ((q,) if case.inputs.self_attention else (q, k, v)) + tuple(masks.values())
    names = (("query",) if case.inputs.self_attention else ("query", "key", "value")) + tuple(
        masks)
    feed = {n: a.numpy() if a.dtype == torch.bool else
            a.double().numpy().astype(numpy_dtype(case.inputs.dtype)) for n, a in zip(names, args)}
    return ModuleCall(mha, shapes, args, names, feed)


def framework_params(mha) -> dict[str, np.ndarray]:
    """The module's parameters by name, in float64: what the graph accounting matches."""
    return {n: p.detach().double().numpy() for n, p in mha.named_parameters()}


def wrap_module(torch, mha, self_attention: bool, mask_names: tuple[str, ...], kwargs: dict):
    """The nn.Module whose forward is the call a user would export: mha(q, k, v, masks,
    **kwargs), taking query alone for self-attention, then the masks in `mask_names` order."""
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


class TorchOnnxExporter:
    """torch.onnx.export of a wrapped module, cached by exporter name, variant, case and
    torch/onnx versions.  `dynamo=True`: the default exporter (needs onnxscript), at
    `opset` (None: its default); `dynamo=False`: the TorchScript one, deprecated but still
    shipped."""

    name = "onnx.torch-export"  # keys the cache (the runner's name)
    dynamo = True
    opset: int | None = None

    def _export(self, torch, module, args, names) -> bytes:
        if self.dynamo:
            extra = {"opset_version": self.opset} if self.opset else {}
            # the same graph, 1.4 s of CPU sooner (torchlib) and 0.1 s (the CIA list)
            with torchlib_listed_once(), cia_ops_listed_once():
                program = torch.onnx.export(module, args, dynamo=True,
                                            input_names=list(names), verbose=False, **extra)
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

        return SAME_ONNX.get_or_make(k, torch, module, args, make, self.name, variant, names,
                                     torch.__version__, onnx.__version__, FORMAT)
