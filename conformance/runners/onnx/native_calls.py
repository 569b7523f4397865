"""The native calls an onnxruntime graph answers with an Observation, for the ledger's
probes of mixed_dtype and unbatched_input (conventions/probes/native_inputs.py judges): the
graph's query fed in another dtype, or without its batch axis to a copy of the graph whose
query input declares no shape (so the node itself checks the rank).  A graph of one query
input only (self-attention: the node's key and value are the query); a cross-attention
case is not asked.  onnx and onnxruntime are imported inside the functions.
"""
from __future__ import annotations

import numpy as np

from conformance.contract.runner import Observation
from conformance.runners._export.onnx_runtime import ort_session

NATIVE_CALLS = frozenset({"input_dtype", "unbatched"})


def native_call(model, feed: dict, raw, what: str) -> tuple[Observation, str]:
    """`model` run on `feed` with raw.argument applied to its query: -> (an Observation
    with the output's own dtype, the call)."""
    import onnx

    if set(feed) != {"query"}:
        raise NotImplementedError(f"{what}: the native calls feed the graph's one query "
                                  f"input (self-attention); this graph takes {sorted(feed)}")
    x = feed["query"]
    if raw.argument == "input_dtype":
        session = ort_session(model.SerializeToString(), what)
        out = session.run(["output"], {"query": x.astype(raw.value)})[0]
        said = f"the query fed as {raw.value} to the {x.dtype} graph"
    elif raw.argument == "unbatched":
        rankless = onnx.ModelProto.FromString(model.SerializeToString())
        rankless.graph.input[0].type.tensor_type.ClearField("shape")
        out = ort_session(rankless.SerializeToString(), what).run(["output"], {"query": x[0]})[0]
        said = ("a 2-D (T, E) query (the graph's query input without a declared shape, so "
                "the node itself checks it)")
    else:
        raise NotImplementedError(f"{what} passes no raw {raw.argument}")
    out = np.asarray(out)
    return Observation(output=out.astype(np.float64), native_dtype=str(out.dtype)), \
        f"{what}: {said}"
