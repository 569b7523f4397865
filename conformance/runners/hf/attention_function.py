"""RawCall attention_function: a transformers attention module's own attention function,
called directly with the module as its first argument, as the module's forward calls it
after projecting (and rotating, normalising or biasing) q and k.

A module that always rotates (GPT-J, GPT-NeoX), normalises (Qwen3, OLMo2) or adds ALiBi
cannot carry the ledger's mask probes through its forward: the oracle cannot tell the
rotation from the mask.  Every such module hands its projections to one function,
`ALL_ATTENTION_FUNCTIONS.get_interface(config._attn_implementation,
eager_attention_forward)` (transformers/models/<model>/modeling_<model>.py, the
`attention_interface(self, query_states, key_states, value_states, attention_mask,
scaling=self.scaling, ...)` call in <Model>Attention.forward), and that function is where
the mask meets the scores.  Here it gets the case's query, key and value projected by the
case's weights (three tensors: a key and a value part), the mask from transformers' own
builder for the implementation (masking_utils.eager_mask: 0 / finfo(dtype).min;
sdpa_mask: boolean), the module's own `scaling`; its (B, T, H, d) output goes through the
case's output projection.  The runner only calls; the ledger judges.  torch and
transformers are imported inside the function.
"""
from __future__ import annotations

import sys

import numpy as np

from conformance.contract.runner import to_numpy

CALL = ("{function}({module}, q, k, v, attention_mask=masking_utils.{builder}(...), "
        "scaling=module.scaling, dropout=0.0)")


def attention_function(module):
    """The function the module's forward calls for its configured implementation, or None
    where its modeling file defines no eager_attention_forward (an older module that
    computes attention inline: BLOOM, MPT)."""
    from transformers.modeling_utils import ALL_ATTENTION_FUNCTIONS

    eager = getattr(sys.modules[type(module).__module__], "eager_attention_forward", None)
    if eager is None:
        return None
    impl = getattr(getattr(module, "config", None), "_attn_implementation", "eager")
    return ALL_ATTENTION_FUNCTIONS.get_interface(impl, eager)


def built_mask(torch, allowed: np.ndarray, impl: str, dtype):
    """(B, 1, T, S): transformers' own builder for `impl` on the case's (B, T, S) pattern
    (True = attend), as its create_*_mask functions call it."""
    from transformers.masking_utils import eager_mask, sdpa_mask

    pattern = torch.from_numpy(np.ascontiguousarray(allowed))
    b, t, s = pattern.shape

    def attend(batch, head, q, kv):
        return pattern[batch, q, kv]

    if impl == "eager":
        return eager_mask(batch_size=b, q_length=t, kv_length=s, mask_function=attend,
                          dtype=dtype, use_vmap=True), "eager_mask"
    return sdpa_mask(batch_size=b, q_length=t, kv_length=s, mask_function=attend,
                     allow_is_causal_skip=False, use_vmap=True), "sdpa_mask"


def answer_function(runner, torch, case, data):
    """(output (B, T, E_o), the call): the module of the case's config call (built, not
    loaded: the function reads its settings, never its weights), its attention function on
    the case's projections and mask.  NotImplementedError where the module
    has no such function or its scaling is not the case's (a harness limit: the probe's
    other forms are asked)."""
    dt = getattr(torch, case.inputs.dtype)
    plan = {**runner.config_call(case)[1], "attn_implementation": runner.attn_implementation,
            "dropout": 0.0}
    module = runner.build(torch, plan).to(dt).eval()  # its weights take no part in the call
    if hasattr(module, "values"):  # a ModuleDict of parts (BERT): the attention is first
        module = next(iter(module.values()))
    function = attention_function(module)
    scaling = getattr(module, "scaling", None)
    scale = case.attention.scale or case.attention.qk_head_dim ** -0.5
    if function is None or scaling is None or abs(scaling - scale) > 1e-12 * scale:
        raise NotImplementedError(
            f"{runner.name}: {type(module).__name__} " + ("has no attention function of its "
                                                          "own module to call" if function is
                                                          None or scaling is None else
                                                          f"scales by {scaling}, the case by "
                                                          f"{scale}"))
    w, x = data.weights, data.inputs

    def heads(inputs, wt, b):
        y = np.einsum("ble,hed->bhld", inputs, wt) + (0 if b is None else b[None, :, None])
        return torch.tensor(y, dtype=dt)

    q, k, v = heads(x.query, w.wq, w.bq), heads(x.key, w.wk, w.bk), heads(x.value, w.wv, w.bv)
    mask, builder = built_mask(torch, x.allowed if x.allowed is not None else
                               np.ones(q.shape[:1] + (q.shape[2], k.shape[2]), bool),
                               runner.attn_implementation, dt)
    with torch.no_grad():
        out, _ = function(module, q, k, v, mask, scaling=scaling, dropout=0.0)
    o = np.einsum("bthd,hde->bte", to_numpy(out).astype(np.float64), w.wo)
    return o if w.bo is None else o + w.bo, CALL.format(
        function=getattr(function, "__qualname__", str(function)),
        module=type(module).__name__, builder=builder)
