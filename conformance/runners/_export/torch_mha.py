"""nn.MultiheadAttention as torch.mha runs it and the exports convert it: the import,
dtypes, the translation and build, masks in torch's polarity, the input tensors and what the
export probes build of the module (a probe case's module, a mask per head).

Used by runners/torch/ (torch.mha, torch.sdpa), runners/onnx/torch_export.py (which
exports the very module torch.mha runs) and runners/openvino/ (which compiles that
export).  torch is imported inside the functions only.
"""
from __future__ import annotations

import numpy as np

from conformance.contract.runner import NotExpressible, Translation
from conformance.convert.frameworks import to_torch
from conformance.oracle.canonical import combine_masks


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
    # the layout's one definition (convert/): packed in_proj_weight exactly when torch packs
    state = to_torch(weights, packed=mha._qkv_same_embed_dim)
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


# ---- what the export probes (export_probe.py) build of the module: its doc link, a
# probe case's module and inputs, a mask per head (no judgement: that is the probes')

MHA_DOC = "https://docs.pytorch.org/docs/stable/generated/torch.nn.MultiheadAttention.html"


def probe_mha(torch, case, **ctor):
    """nn.MultiheadAttention on a probe case (canonical weights, eval) and its q, k, v;
    `ctor` overrides constructor arguments (batch_first, dropout)."""
    from conformance.oracle.canonical import case_data

    data = case_data(case)
    t = mha_translation(case)
    mha, _ = build_mha(torch, case, Translation(t.call, {**t.plan, **ctor}), data.weights)
    return mha, tensors(torch, case, data.inputs)


def per_head(torch, case, mask: np.ndarray):
    """A probe's (B, T, S) mask as MHA's (B*H, T, S) attn_mask, passed raw (bool or float)."""
    return torch.from_numpy(np.ascontiguousarray(np.repeat(mask, case.attention.num_heads, 0)))
