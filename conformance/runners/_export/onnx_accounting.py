"""What an ONNX graph holds, against what the framework said it holds.

A framework counts its parameters; an exported graph holds initializers and
Constant tensors, renamed (`val_5`), transposed (MatMul wants (in, out)),
split (a packed in_proj_weight may become three MatMuls), reshaped, or gone
(an exporter's optimiser folds an all-zero bias away).  So the exported
element total can differ from the framework's count, and a reader needs to
know which parameter went where.  `account` answers that, as JSON-able data:

- `inventory`: the opset and the operator counts, sorted;
- every initializer and Constant tensor, split into *weights* (float tensors
  holding a framework parameter, wholly or in part) and *other constants*
  (shape vectors, axes, scalars such as the softmax scale);
- for each framework parameter, the tensor(s) that hold it and how (as is,
  transposed, rows a:b of a split, rearranged), or why none does.

ONNX runners put the result in Observation.graphs; the report sections that
tabulate it live in the report package.  numpy only at import; onnx is
imported inside the functions.
"""
from __future__ import annotations

import re
from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class GraphTensor:
    """One initializer or Constant-node tensor of a graph."""

    name: str  # initializer name, or the Constant node's output name
    kind: str  # "initializer" or "constant"
    is_float: bool  # a floating tensor (can hold a weight)
    array: np.ndarray  # its values as float64 (ints converted too)


def inventory(model) -> dict:
    """{"opset": {domain: version}, "ops": {op_type: count}}, both sorted."""
    ops: dict[str, int] = {}
    for node in model.graph.node:
        op = node.op_type if node.domain in ("", "ai.onnx") else f"{node.domain}.{node.op_type}"
        ops[op] = ops.get(op, 0) + 1
    opset = {(o.domain or "ai.onnx"): int(o.version) for o in model.opset_import}
    return {"opset": dict(sorted(opset.items())), "ops": dict(sorted(ops.items()))}


def _to_float64(array) -> np.ndarray:
    return np.asarray(array).astype(np.float64)


def graph_tensors(model) -> list[GraphTensor]:
    """Initializers and Constant tensors of the main graph, in graph order."""
    from onnx import helper, numpy_helper

    found = [GraphTensor(t.name, "initializer", t.data_type in _FLOAT_TYPES,
                         _to_float64(numpy_helper.to_array(t)))
             for t in model.graph.initializer]
    for node in model.graph.node:
        if node.op_type != "Constant" or node.domain not in ("", "ai.onnx"):
            continue
        for attr in node.attribute:
            if attr.name == "value":
                is_float = attr.t.data_type in _FLOAT_TYPES
                found.append(GraphTensor(node.output[0], "constant", is_float,
                                         _to_float64(numpy_helper.to_array(attr.t))))
            elif attr.name in ("value_float", "value_floats", "value_int", "value_ints"):
                value = np.atleast_1d(helper.get_attribute_value(attr))
                found.append(GraphTensor(node.output[0], "constant", "float" in attr.name,
                                         _to_float64(value).reshape(np.shape(value))))
    return found


_FLOAT_TYPES = {1, 10, 11, 16}  # FLOAT, FLOAT16, DOUBLE, BFLOAT16 (onnx.TensorProto)
_FLOAT_NAMES = {1: "float32", 10: "float16", 11: "float64", 16: "bfloat16"}


def held_scalars(model) -> tuple[float, ...]:
    """The distinct values of the graph's one-element float constants (a fill, a scale):
    what the exported program holds, whatever its source framework wrote."""
    return tuple(sorted({float(t.array.ravel()[0]) for t in graph_tensors(model)
                         if t.is_float and t.array.size == 1}))


def weights_dtype(model) -> str:
    """The element type of the float initializers holding most elements ("" if none)."""
    sizes: dict[str, int] = {}
    for t in model.graph.initializer:
        if t.data_type in _FLOAT_NAMES:
            name = _FLOAT_NAMES[t.data_type]
            sizes[name] = sizes.get(name, 0) + int(np.prod(t.dims))
    return max(sizes, key=sizes.get) if sizes else ""


_COUNTER = re.compile(r"__\d+(?=(:\d+)?$)")


def shown_name(name: str) -> str:
    """A tensor name as reports show it: a converter's process-wide counter suffix
    (tf2onnx's `Reshape__3113:0`) becomes `__#`, so the same graph reads the same
    whatever was converted before it in the process."""
    return _COUNTER.sub("__#", name)


def _norm(name: str) -> str:
    return re.sub(r"[^a-z0-9]", "", name.lower())


def _find_rows(big: np.ndarray, part: np.ndarray) -> int | None:
    """Offset o with big[o:o+len(part)] == part (same trailing shape), else None."""
    if big.ndim == 0 or big.ndim != part.ndim or big.shape[1:] != part.shape[1:] \
            or part.shape[0] >= big.shape[0]:
        return None
    n = part.shape[0]
    if n == 0:
        return None
    rows = big.reshape(big.shape[0], -1)
    first = np.flatnonzero((rows[: big.shape[0] - n + 1] == part.reshape(n, -1)[0]).all(axis=1))
    for o in first:  # candidate offsets: where the first row matches
        if np.array_equal(big[o:o + n], part):
            return int(o)
    return None


def relation(param: np.ndarray, tensor: np.ndarray) -> str | None:
    """How `tensor` holds (part of) `param`, in words, or None."""
    views = [("as is", tensor)] + ([("transposed", tensor.T)] if tensor.ndim == 2 else [])
    for how, view in views:
        if view.shape == param.shape and np.array_equal(view, param):
            return how
        o = _find_rows(param, view)
        if o is not None:
            return f"{how}, rows {o}:{o + view.shape[0]} of the parameter (split)"
        o = _find_rows(view, param)
        if o is not None:
            return f"{how}, packed with others at rows {o}:{o + param.shape[0]}"
    if tensor.size == param.size and tensor.size and tensor.min() == param.min() \
            and tensor.max() == param.max() and np.array_equal(  # min/max: a cheap filter
                np.sort(tensor.ravel()), np.sort(param.ravel())):
        return f"rearranged (reshaped/transposed to {list(tensor.shape)})"
    return None


def account(model, params: dict[str, np.ndarray]) -> dict:
    """The accounting of one graph against the framework's named parameters."""
    tensors = graph_tensors(model)
    holders: dict[str, list[dict]] = {name: [] for name in params}
    weight_tensors: set[str] = set()
    claimed: set[str] = set()
    # Degenerate parameters (all one value, e.g. zero biases, or any one-element
    # parameter) would match any tensor of that value; they are matched only by
    # name, or else by an unclaimed tensor of exactly their shape, after every
    # other parameter.
    order = sorted(params, key=lambda n: np.ptp(params[n]) == 0 if params[n].size else True)
    for name in order:
        p = np.asarray(params[name], dtype=np.float64)
        for t, how in _holders(name, p, tensors, claimed):
            holders[name].append({"tensor": shown_name(t.name), "kind": t.kind, "how": how,
                                  "shape": list(t.array.shape)})
            weight_tensors.add(t.name)
            claimed.add(t.name)
    weights = [t for t in tensors if t.name in weight_tensors]
    others = [t for t in tensors if t.name not in weight_tensors]
    framework = int(sum(np.asarray(p).size for p in params.values()))
    exported = int(sum(t.array.size for t in weights))
    mapping = {}
    for name in params:
        p = np.asarray(params[name])
        if holders[name]:
            mapping[name] = holders[name]
        else:
            why = "all zeros" if p.size and not p.any() else (
                f"all equal to {p.flat[0]:g}" if p.size and np.ptp(p) == 0 else "values not found")
            mapping[name] = f"missing ({p.size} elements, {why}): not in the graph"
    return {
        **inventory(model),
        "framework_parameters": framework,
        "exported_weights": exported,
        "weight_tensors": len(weights),
        "other_constants": int(sum(t.array.size for t in others)),
        "other_constant_tensors": len(others),
        "other_constants_detail": _constants_detail(others),
        "mapping": mapping,
        "explanation": _explain(params, mapping, framework, exported),
    }


def _holders(name: str, p: np.ndarray, tensors: list[GraphTensor], claimed: set[str]):
    """(tensor, how) for the float tensors holding (part of) parameter `name`.

    A degenerate parameter (no spread: every one-element parameter too) takes
    one tensor: the first whose name contains the parameter's name, else the
    first unclaimed one of exactly its shape; a relation in values alone would
    match any tensor holding that value.  A one-element parameter of a value no
    graph would hold by chance (not 0, not a power of two such as a scale of
    1 or 0.5) may also be an unclaimed one-element tensor of another shape
    (tf2onnx's `query_1/Reshape:0` for a (1, 1, 1) kernel)."""
    floats = [t for t in tensors if t.is_float]
    if p.size and np.ptp(p) != 0:
        return [(t, how) for t in floats if (how := relation(p, t.array)) is not None]
    named = [t for t in floats if _norm(name) in _norm(t.name)]
    shaped = [t for t in floats if t.array.shape == p.shape and t.name not in claimed]
    if p.size == 1 and p.flat[0] != 0 and not np.log2(abs(p.flat[0])).is_integer():
        shaped += [t for t in floats if t.array.size == 1 and t.name not in claimed]
    for t in named + shaped:
        how = relation(p, t.array)
        if how is not None:
            return [(t, how)]
    return []


def _constants_detail(others: list[GraphTensor]) -> dict[str, int]:
    """Counts of non-weight tensors by sort: scalars, integer vectors, float tensors."""
    detail = {"float scalars": 0, "integer scalars": 0, "integer tensors": 0, "float tensors": 0}
    for t in others:
        scalar = t.array.size == 1
        kind = ("float" if t.is_float else "integer") + (" scalars" if scalar else " tensors")
        detail[kind] += 1
    return {k: v for k, v in detail.items() if v}


def _explain(params, mapping, framework: int, exported: int) -> str:
    missing = [f"{n} {m.split(': ')[0].split(' ', 1)[1]}"
               for n, m in mapping.items() if isinstance(m, str)]
    moved = sorted({h["how"].split(",")[0].split(" (")[0] for held in mapping.values()
                    if isinstance(held, list) for h in held} - {"as is"})
    split = [n for n, held in mapping.items() if isinstance(held, list) and len(held) > 1]
    parts = []
    if exported == framework:
        parts.append(f"exported weights {exported} = framework count {framework}")
    else:
        parts.append(f"exported weights {exported} vs framework count {framework} "
                     f"(difference {exported - framework:+d})")
    if missing:
        parts.append("not in the graph: " + "; ".join(missing)
                     + " (folded away by the exporter)")
    if split:
        parts.append("split over several tensors: " + ", ".join(split))
    if moved:
        parts.append("held " + ", ".join(moved))
    extra = exported - framework + sum(np.asarray(params[n]).size for n, m in mapping.items()
                                       if isinstance(m, str))
    if extra > 0:
        parts.append(f"{extra} elements hold a parameter more than once")
    return "; ".join(parts)
