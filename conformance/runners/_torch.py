"""What the torch runners share: the import, dtypes, the nn.MultiheadAttention
translation and build, masks in torch's polarity and the input tensors.

Used by torch_mha, torch_sdpa and onnx_export (which exports the very module
torch_mha runs).  torch is imported inside the functions only.
"""
from __future__ import annotations

import numpy as np

from ..contract import NotExpressible, Translation
from ..weights import combine_masks


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
    """nn.MultiheadAttention's constructor call; the plan is its keyword arguments."""
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
    mha = torch.nn.MultiheadAttention(**translation.plan, dtype=dt)
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
    allowed = combine_masks((inputs.causal, inputs.attn_mask))
    if allowed is None:
        return kpm, None
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
