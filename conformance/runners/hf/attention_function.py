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
    computes attention inline: BLOOM, MPT, asked through `hooked`)."""
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
    the case's projections and mask (`hooked` where it has none).  NotImplementedError where
    its scaling is not the case's (a harness limit: the probe's other forms are asked)."""
    dt = getattr(torch, case.inputs.dtype)
    plan = {**runner.config_call(case)[1], "attn_implementation": runner.attn_implementation,
            "dropout": 0.0}
    module = runner.build(torch, plan).to(dt).eval()  # its weights take no part in the call
    if hasattr(module, "values"):  # a ModuleDict of parts (BERT): the attention is first
        module = next(iter(module.values()))
    w, x = data.weights, data.inputs

    def heads(inputs, wt, b):
        y = np.einsum("ble,hed->bhld", inputs, wt) + (0 if b is None else b[None, :, None])
        return torch.tensor(y, dtype=dt)

    q, k, v = heads(x.query, w.wq, w.bq), heads(x.key, w.wk, w.bk), heads(x.value, w.wv, w.bv)
    allowed = x.allowed if x.allowed is not None else np.ones(
        q.shape[:1] + (q.shape[2], k.shape[2]), bool)
    mask, builder = built_mask(torch, allowed, runner.attn_implementation, dt)
    function = attention_function(module)
    scaling = getattr(module, "scaling" if function else runner.scale_attribute, None)
    scale = case.attention.scale or case.attention.qk_head_dim ** -0.5
    if scaling is None or abs(scaling - scale) > 1e-12 * scale:
        raise NotImplementedError(f"{runner.name}: {type(module).__name__} scales by "
                                  f"{scaling}, the case by {scale}")
    if function is None:  # the module computes attention inline: its projections hooked
        out, call = hooked(runner, torch, module, (q, k, v), mask)
    else:
        with torch.no_grad():
            out, _ = function(module, q, k, v, mask, scaling=scaling, dropout=0.0)
        out = out.reshape(*out.shape[:2], -1)
        call = CALL.format(function=getattr(function, "__qualname__", str(function)),
                           module=type(module).__name__, builder=builder)
    o = np.einsum("bthd,hde->bte", to_numpy(out).astype(np.float64).reshape(
        *out.shape[:2], w.wo.shape[0], -1), w.wo)
    return o if w.bo is None else o + w.bo, call


def hooked(runner, torch, module, qkv, mask):
    """A module that computes attention inside its forward (BLOOM, MPT): its forward run
    with its position signal neutral (`runner.neutral_forward`: a zero ALiBi tensor, no
    position bias), a forward hook on its fused q/k/v projection returning the case's
    projections in the module's own layout (`runner.fused_qkv`), and the context its output
    projection receives read by a pre-hook.  (context (B, T, H * d_v), the call)."""
    fused = runner.fused_qkv(torch, *qkv)
    if qkv[0].shape[2] != qkv[1].shape[2]:
        raise NotImplementedError(f"{runner.name}: one fused projection gives q, k and v of "
                                  "one length (T = S)")
    seen = {}
    into = getattr(module, runner.fused_projection).register_forward_hook(
        lambda mod, args, out: fused)
    out_of = getattr(module, runner.output_projection).register_forward_pre_hook(
        lambda mod, args: seen.setdefault("context", args[0]))
    try:
        with torch.no_grad():
            runner.neutral_forward(torch, module, torch.zeros(
                fused.shape[:2] + (runner.width(module),), dtype=fused.dtype), mask)
    finally:
        into.remove()
        out_of.remove()
    return seen["context"], (f"{type(module).__name__}.forward with "
                             f"{runner.neutral_words}; {runner.fused_projection}'s output "
                             "replaced (forward hook) by the case's q, k, v; the context "
                             f"{runner.output_projection} receives")
