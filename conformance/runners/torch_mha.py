"""PyTorch `nn.MultiheadAttention`, in its ordinary path and its fast path.

Conventions this runner makes explicit:
- no head size argument: d_k = d_v = embed_dim / num_heads, and W_q is
  embed_dim x embed_dim (split between heads), so per-head widths, an output
  width other than embed_dim and grouped-query are not expressible;
- weights are stored (out, in): packed `in_proj_weight` (3E, E) when key and
  value widths equal embed_dim, else `q/k/v_proj_weight`; biases packed in
  `in_proj_bias` (3E);
- masks are True = *blocked* (the opposite of SDPA, Keras and ONNX), with
  `key_padding_mask` (B, S) separate from `attn_mask` ((T, S) or (B*H, T, S));
- attention weights come back averaged over heads unless
  `average_attn_weights=False`.
torch is imported inside `run` only.
"""
from __future__ import annotations

import numpy as np

from . import NotExpressible, NotExpressibleError, Observation, Runner, Translation, to_numpy


def import_torch():
    """torch with one intra-op thread: reductions then sum in one order on every
    machine, which keeps the reported figures identical wherever the matrix runs."""
    import torch

    torch.set_num_threads(1)
    return torch


def torch_dtype(torch, name: str):
    return getattr(torch, name)


def _limits(case) -> str | None:
    a = case.attention
    even = a.query_features % a.num_heads == 0 and a.query_features // a.num_heads
    if a.num_kv_heads != a.num_heads:
        return (f"grouped-query attention (num_kv_heads={a.num_kv_heads} < num_heads="
                f"{a.num_heads}): nn.MultiheadAttention has one key/value head per query head")
    if not even or a.qk_head_dim != even or a.v_head_dim != even:
        return (f"per-head widths qk_head_dim={a.qk_head_dim}, v_head_dim={a.v_head_dim}: "
                "nn.MultiheadAttention fixes head_dim = embed_dim // num_heads = "
                f"{a.query_features} // {a.num_heads}"
                + (f" = {even}" if even else " (does not divide: 'embed_dim must be divisible "
                   "by num_heads')"))
    if a.output_features != a.query_features:
        return (f"output_features={a.output_features} != query_features={a.query_features}: "
                "out_proj is Linear(embed_dim, embed_dim)")
    return None


def mha_translation(case) -> Translation | NotExpressible:
    reason = _limits(case)
    if reason:
        return NotExpressible(reason)
    a = case.attention
    kwargs = {"embed_dim": a.query_features, "num_heads": a.num_heads}
    if a.key_features != a.query_features or a.value_features != a.query_features:
        kwargs.update(kdim=a.key_features, vdim=a.value_features)
    if not a.bias:
        kwargs["bias"] = False
    kwargs["batch_first"] = True
    args = ", ".join(f"{k}={v!r}" for k, v in kwargs.items())
    return Translation(f"torch.nn.MultiheadAttention({args})", kwargs)


def build_mha(torch, case, translation: Translation, weights):
    """The module with the canonical weights loaded into torch's (out, in) layout."""
    dt = torch_dtype(torch, case.inputs.dtype)
    # Built in the case dtype, so float64 weights are never rounded through float32.
    mha = torch.nn.MultiheadAttention(**translation.kwargs, dtype=dt)
    h = case.attention.num_heads

    def out_in(w):  # (H, E_in, d) -> (H*d, E_in): head h owns rows h*d:(h+1)*d
        return w.transpose(0, 2, 1).reshape(-1, w.shape[1])

    q, k, v = out_in(weights.wq), out_in(weights.wk), out_in(weights.wv)
    state = {"out_proj.weight": weights.wo.reshape(h * case.attention.v_head_dim, -1).T}
    if mha._qkv_same_embed_dim:
        state["in_proj_weight"] = np.concatenate([q, k, v])
    else:
        state.update(q_proj_weight=q, k_proj_weight=k, v_proj_weight=v)
    if case.attention.bias:
        state["in_proj_bias"] = np.concatenate([weights.bq.ravel(), weights.bk.ravel(),
                                                weights.bv.ravel()])
        state["out_proj.bias"] = weights.bo
    mha.load_state_dict({n: torch.tensor(a, dtype=dt) for n, a in state.items()}, strict=True)
    shapes = {n: tuple(p.shape) for n, p in mha.named_parameters()}
    return mha.eval(), shapes


def torch_masks(torch, case, inputs):
    """Canonical (True = attend) -> PyTorch MHA (True = blocked).

    Key padding goes to `key_padding_mask` (B, S); causal and explicit masks
    are merged into `attn_mask`, (T, S) when shared by the batch, else
    (B * H, T, S) as MHA requires for per-item masks.
    """
    kpm = None if inputs.key_valid is None else torch.from_numpy(~inputs.key_valid)
    parts = [p for p in (inputs.causal, inputs.attn_mask) if p is not None]
    if not parts:
        return kpm, None
    allowed = np.logical_and.reduce(np.broadcast_arrays(*parts)) if len(parts) > 1 else parts[0]
    if allowed.ndim == 3 and (allowed == allowed[:1]).all():
        allowed = allowed[0]
    if allowed.ndim == 3:
        allowed = np.repeat(allowed, case.attention.num_heads, axis=0)
    return kpm, torch.from_numpy(np.ascontiguousarray(~allowed))


def tensors(torch, case, inputs):
    dt = torch_dtype(torch, case.inputs.dtype)
    q = torch.tensor(inputs.query, dtype=dt)
    if case.inputs.self_attention:
        return q, q, q  # the same tensor object: MHA's fast path checks `query is key`
    return q, torch.tensor(inputs.key, dtype=dt), torch.tensor(inputs.value, dtype=dt)


class TorchMHA(Runner):
    name = "torch.mha"
    framework = "torch"
    requires = ("torch",)

    def translate(self, case):
        return mha_translation(case)

    def run(self, case, translation, data):
        torch = import_torch()

        try:
            mha, shapes = build_mha(torch, case, translation, data.weights)
        except (ValueError, RuntimeError, AssertionError) as exc:
            raise NotExpressibleError(f"torch rejected the configuration: {exc}") from exc
        q, k, v = tensors(torch, case, data.inputs)
        kpm, am = torch_masks(torch, case, data.inputs)
        with torch.no_grad():
            # train() keeps forward on the ordinary path (eval + no_grad + self-attention
            # would take the fast path, which is its own runner); dropout is 0.
            mha.train()
            out, per_head = mha(q, k, v, key_padding_mask=kpm, attn_mask=am,
                                need_weights=True, average_attn_weights=False)
            _, averaged = mha(q, k, v, key_padding_mask=kpm, attn_mask=am)
        return Observation(
            output=to_numpy(out), attention_weights=to_numpy(per_head),
            weights_returned="per_head",
            parameters=sum(p.numel() for p in mha.parameters()), weight_shapes=shapes,
            notes=[f"default need_weights=True returns weights averaged over heads, "
                   f"shape {tuple(averaged.shape)}; per-head {tuple(per_head.shape)} "
                   "needs average_attn_weights=False"],
            extras={"mask_polarity": "True = blocked",
                    "default_weights_shape": list(averaged.shape)})


class TorchMHAFastPath(Runner):
    """The inference fast path (`torch._native_multi_head_attention`).

    It engages only for self-attention, batch_first, eval, no grad, even
    num_heads, packed in_proj with biases; otherwise forward silently falls
    back.  We detect whether it ran by wrapping the native op for the call.
    """

    name = "torch.mha.fastpath"
    framework = "torch"
    requires = ("torch",)

    def translate(self, case):
        t = mha_translation(case)
        if isinstance(t, NotExpressible):
            return t
        a = case.attention
        why = None
        if not case.inputs.self_attention:
            why = "non-self attention was used (query, key, and value are not the same Tensor)"
        elif a.num_heads % 2:
            why = "self.num_heads is not even"
        elif not a.bias:
            why = ("bias=False leaves in_proj_bias None, and forward then skips the fast "
                   "path without saying why")
        if why:
            return NotExpressible(f"fast path not taken: {why}")
        return t

    def run(self, case, translation, data):
        torch = import_torch()

        mha, shapes = build_mha(torch, case, translation, data.weights)
        q, k, v = tensors(torch, case, data.inputs)
        kpm, am = torch_masks(torch, case, data.inputs)
        native, calls = torch._native_multi_head_attention, []

        def spy(*args, **kwargs):
            calls.append(1)
            return native(*args, **kwargs)

        torch._native_multi_head_attention = spy
        try:
            with torch.inference_mode():
                out, _ = mha(q, k, v, key_padding_mask=kpm, attn_mask=am, need_weights=False)
        finally:
            torch._native_multi_head_attention = native
        if not calls:
            raise NotExpressibleError("fast path not taken: forward fell back to the "
                                      "ordinary path for this configuration")
        return Observation(
            output=to_numpy(out), parameters=sum(p.numel() for p in mha.parameters()),
            weight_shapes=shapes, notes=["fast path taken (torch._native_multi_head_attention)"],
            extras={"mask_polarity": "True = blocked", "fast_path": True})
