"""What the ExecuTorch runner needs of ExecuTorch: lowering a torch module to a .pte program
through XNNPACK, the program's own accounting (which operators XNNPACK took, which stayed on
ExecuTorch's portable kernels, the float constants the program holds), and running a program
in ExecuTorch's Python runtime.  executorch and torch are imported inside the functions.

The cached artifact is one blob: an 8-byte length, the accounting as JSON, the .pte bytes
(the accounting is only known while lowering, and a warm run reads the blob alone).  The
blob is read back as data: the header is bounded and its fields are type-checked.
"""
from __future__ import annotations

import functools
import json
import struct

import numpy as np

from conformance.contract.runner import NotExpressibleError

DOC = "https://docs.pytorch.org/executorch/stable/backends-xnnpack.html"
HEADER_LIMIT = 1 << 16  # accounting JSON bytes
FIELDS = {"delegated_ops": list, "portable_ops": list, "delegates": int,
          "delegated_nodes": int, "constant_elements": int}


def short(exc: BaseException, limit: int = 500) -> str:
    text = " ".join(str(exc).split())
    return f"{type(exc).__name__}: {text[:limit]}" + ("..." if len(text) > limit else "")


def _op_name(target) -> str:
    return str(getattr(target, "__name__", target)).split(" at 0x")[0]


def accounting(program) -> dict:
    """Operators of the lowered edge program: inside XNNPACK delegates and outside them
    (ExecuTorch's portable kernels), and the float constants every part holds."""
    def calls(graph):
        return [n for n in graph.nodes if n.op == "call_function"]

    def constants(ep) -> int:
        tensors = list(ep.state_dict.values()) + list(ep.constants.values())
        return sum(int(t.numel()) for t in tensors
                   if hasattr(t, "is_floating_point") and t.is_floating_point() and t.dim())

    delegated, portable, total, nodes, count = set(), set(), constants(program), 0, 0
    for name, sub in program.graph_module.named_children():
        if not name.startswith("lowered_module"):
            continue
        count += 1
        inner = sub.original_module
        total += constants(inner)
        for n in calls(inner.graph):
            nodes += 1
            delegated.add(_op_name(n.target))
    for n in calls(program.graph):
        if "executorch_call_delegate" not in str(n.target) and "getitem" not in str(n.target):
            portable.add(_op_name(n.target))
    return {"delegated_ops": sorted(delegated), "portable_ops": sorted(portable),
            "delegates": count, "delegated_nodes": nodes, "constant_elements": total}


def lower(torch, module, args) -> bytes:
    """torch.export -> to_edge_transform_and_lower(XnnpackPartitioner) -> .pte, with its
    accounting in front (see the module doc)."""
    from executorch.backends.xnnpack.partition.xnnpack_partitioner import XnnpackPartitioner
    from executorch.exir import to_edge_transform_and_lower

    from conformance.runners._export.cia_once import cia_ops_listed_once

    try:
        exported = torch.export.export(module, tuple(args))
        with cia_ops_listed_once():  # five decompositions per lowering: the same program
            edge = to_edge_transform_and_lower(exported, partitioner=[XnnpackPartitioner()])
            info = accounting(edge.exported_program())
            pte = edge.to_executorch().buffer
    except Exception as exc:  # the exporter or the lowering rejected this configuration
        raise NotExpressibleError(f"torch.export + to_edge_transform_and_lower(XNNPACK) "
                                  f"failed: {short(exc)}") from exc
    header = json.dumps(info, sort_keys=True).encode()
    return struct.pack("<Q", len(header)) + header + bytes(pte)


def split(blob: bytes) -> tuple[dict, bytes]:
    """(accounting, .pte bytes) of a blob; a malformed header is a ValueError."""
    if len(blob) < 8:
        raise ValueError("ExecuTorch artifact shorter than its header length")
    (n,) = struct.unpack("<Q", blob[:8])
    if n > min(HEADER_LIMIT, len(blob) - 8):
        raise ValueError(f"ExecuTorch artifact header of {n} bytes (limit {HEADER_LIMIT})")
    info = json.loads(blob[8:8 + n].decode("utf-8"))
    if not isinstance(info, dict) or any(not isinstance(info.get(k), t)
                                         for k, t in FIELDS.items()):
        raise ValueError("ExecuTorch artifact header lacks its accounting fields")
    return {k: info[k] for k in FIELDS}, blob[8 + n:]


@functools.lru_cache(maxsize=16)
def _method(pte: bytes):
    from executorch.runtime import Runtime

    return Runtime.get().load_program(pte).load_method("forward")


def _tensor(torch, a: np.ndarray):
    if a.dtype.name == "bfloat16":  # ml_dtypes' bfloat16: torch takes it through float32
        return torch.from_numpy(a.astype(np.float32)).to(torch.bfloat16)
    return torch.from_numpy(np.ascontiguousarray(a))


def execute(blob: bytes, feed: dict, native: bool = False) -> list[np.ndarray]:
    """Run the program's forward on the feed's arrays, in order (the program's inputs are
    positional); ExecuTorch refusing to load or run it is not expressible, quoted.  Float
    outputs come back as float64, or (`native`) in the dtype the program gave them."""
    import torch

    _, pte = split(blob)
    try:
        outputs = _method(pte).execute([_tensor(torch, a) for a in feed.values()])
    except Exception as exc:  # the runtime's refusal (missing kernel, dtype)
        raise NotExpressibleError(f"ExecuTorch's runtime refuses the program: "
                                  f"{short(exc)}") from exc
    if native:
        return [_array(o.detach()) for o in outputs]
    return [o.detach().double().numpy() if o.is_floating_point() else o.numpy()
            for o in outputs]


def _array(t) -> np.ndarray:
    """A tensor as NumPy in its own dtype (bfloat16 as ml_dtypes' bfloat16)."""
    import torch

    if t.dtype == torch.bfloat16:
        import ml_dtypes

        return t.float().numpy().astype(ml_dtypes.bfloat16)
    return t.numpy()
