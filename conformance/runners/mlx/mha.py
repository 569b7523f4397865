"""`mlx.nn.MultiHeadAttention(dims, num_heads, query_input_dims, key_input_dims,
value_input_dims, value_dims, value_output_dims, bias)`.

`dims` is the query/key projection width over ALL heads (head dim = dims /
num_heads), `value_dims` the value width over all heads, `value_output_dims` the
output width; one `bias` flag for the four `nn.Linear` projections (default
False).  Weights are `query_proj.weight` (dims, query_input_dims), (out, in).
The call `mha(queries, keys, values, mask)` hands `mask` to
`mx.fast.scaled_dot_product_attention` unchanged (boolean True = attend, additive,
or "causal", lower-right aligned), with scale 1/sqrt(head dim) and no way to
change it.  No grouped-query heads, no rotary or ALiBi argument (mlx-lm applies
those in its own modules, the mlx.sdpa row).  mlx is imported inside functions.
"""
from __future__ import annotations

import numpy as np

from conformance.contract.runner import Count, NotExpressible, Observation, Translation
from conformance.runners.mlx.common import (
    MHA as CTOR, MlxAnswers, MlxRunner, build, core_plan, held_dtype, import_mlx, mask_array,
    mha_kwargs, to_f64, to_mx)


class MlxMHA(MlxAnswers, MlxRunner):
    name = "mlx.mha"
    system = CTOR
    description = "`mlx.nn.MultiHeadAttention` (`dims` = total over heads)"
    typed_system = "mlx"

    def translate(self, case):
        a = case.attention
        if case.grouped:
            return NotExpressible(
                f"grouped-query (num_kv_heads={a.num_kv_heads} < num_heads={a.num_heads}): "
                f"{CTOR} has one key/value head per query head (no num_kv_heads argument); "
                "mx.fast.scaled_dot_product_attention takes untiled k, v (runner mlx.sdpa)")
        if a.scale is not None:
            return NotExpressible(f"attention.scale={a.scale}: {CTOR}.__call__ fixes "
                                  "scale = sqrt(1 / queries.shape[-1])")
        kw = mha_kwargs(case)
        return Translation(f"{CTOR}(" + ", ".join(f"{k}={v!r}" for k, v in kw.items()) + ")",
                           core_plan(case))

    def count(self, case):
        """MLX allocates on construction but evaluates lazily: the layer's own
        parameter tree, sizes read without evaluating an array."""
        _, nn = import_mlx()
        from mlx.utils import tree_flatten

        layer = nn.MultiHeadAttention(**mha_kwargs(case))
        shapes = {n: tuple(v.shape) for n, v in tree_flatten(layer.parameters())}
        return Count(sum(int(np.prod(s)) for s in shapes.values()), shapes,
                     "mlx parameter tree (lazy arrays, never evaluated)")

    def run(self, case, translation, data):
        mx, _ = import_mlx()
        dtype, x = case.inputs.dtype, data.inputs
        layer, shapes = build(case, data.weights, dtype)
        q = to_mx(mx, x.query, dtype)
        k, v = (q, q) if case.inputs.self_attention else (to_mx(mx, x.key, dtype),
                                                          to_mx(mx, x.value, dtype))
        mask = mask_array(mx, translation.plan, case, x.allowed, dtype)
        out = layer(q, k, v, mask=mask)
        mx.eval(out)
        held = held_dtype(out)
        notes = ["returns no attention weights"]
        if held != dtype:
            notes.append(f"output computed in {held}, not the requested {dtype}")
        return Observation(
            output=to_f64(mx, out), parameters=sum(int(np.prod(s)) for s in shapes.values()),
            weight_shapes=shapes, notes=notes,
            extras={"mask_polarity": "True = attend", "output_dtype": held,
                    "mask": translation.plan.mask})

    def answer_with(self, mx, case, data, mask):
        """The layer holding the canonical weights, called with the mask raw."""
        dtype, x = case.inputs.dtype, data.inputs
        layer, _ = build(case, data.weights, dtype)
        q, k, v = (to_mx(mx, getattr(x, n), dtype) for n in ("query", "key", "value"))
        return layer(q, k, v, mask=mask), f"{CTOR}(...)(queries, keys, values, {{mask}})"

    def native_inputs(self, mx, case, data, raw):
        """The layer built in the case's dtype, called on the inputs cast to raw.value or
        on item 0 without its batch axis."""
        dtype, x = case.inputs.dtype, data.inputs
        layer, _ = build(case, data.weights, dtype)
        if raw.argument == "input_dtype":
            args = (to_mx(mx, getattr(x, n), raw.value) for n in ("query", "key", "value"))
            said = f"queries, keys, values as {raw.value}"
        else:
            args = (to_mx(mx, getattr(x, n)[0], dtype) for n in ("query", "key", "value"))
            said = "queries[0], keys[0], values[0]: (T, E) inputs"
        return layer(*args), f"{CTOR}(...)({said})"

    def signatures(self):
        _, nn = import_mlx()
        return CTOR, (nn.MultiHeadAttention.__init__, nn.MultiHeadAttention.__call__)

    def conventions(self):
        """What the layer's API shows (observations.py) on 2 heads of 3 over 8 features;
        the ledger asks the rest."""
        from conformance.case.loader import parse_case
        from conformance.oracle.canonical import case_data
        from conformance.runners.mlx.observations import mha_cells

        case = parse_case({"id": "mlx-mha-api", "attention": {
            "num_heads": 2, "query_features": 8, "qk_head_dim": 3, "v_head_dim": 3},
            "inputs": {"batch": 2, "query_len": 3, "key_len": 5, "seed": 7}}, "<api>")
        return mha_cells(case, case_data(case))
