"""What nn.MultiheadAttention (torch.mha, torch.mha.no-weights, torch.mha.fastpath) reports
of its API for the ledger, with no oracle and no reading of an output against one: the
size arguments (a weight's shape, the divisibility error), the constructor's default
layout and the key-padding polarity (its documentation), what the default call returns
besides the output, a tensor's lack of an implicit mask; on the fast path whether it ran
(the spy of common.fast_call) and torch's own reason where it declines. The ledger asks
the rest (conventions/probes/, the runners' `probe_takes` and `answers`: a float64 input,
a 2-D input and the weights under dropout through mha.TorchMHA._native_call).  What
torch's documentation states is data (the `documented:` section of expectations/<runner>.yaml).
torch arrives as an argument.
"""
from __future__ import annotations

import numpy as np

from conformance.contract.api_facts import ApiFact
from conformance.runners.torch.common import fast_call

MHA = "nn.MultiheadAttention"
# torch's own reasons for declining the fast path (`why_not_fast_path` in
# MultiheadAttention.forward, torch/nn/modules/activation.py, torch 2.13 lines 1326-1395):
# no error is raised, forward falls back to the ordinary path
DECLINES = {"float_attn_mask": "floating-point masks are not supported for fast path.",
            "training": "training is enabled",
            "cross": "non-self attention was used (query, key, and value are not the same "
                     "Tensor)"}


def declined(why: str) -> str:
    """The fast path's decline, in torch's words."""
    return (f"torch declines the fast path (why_not_fast_path: '{DECLINES[why]}'), no error "
            "raised; forward falls back to the ordinary path")


class _Calls:
    """Forward of a seeded module (8 features, 2 heads, batch_first) on (2, 5, 8) inputs in
    the runner's mode: "ordinary" train() under no_grad, "fast" eval under inference_mode
    with need_weights=False; `ran` says whether the fast path ran on the last call."""

    def __init__(self, torch, mode: str, need_weights: bool):
        self.torch, self.mode, self.need_weights, self.ran = torch, mode, need_weights, False
        rng = np.random.default_rng(0)
        self.x = torch.from_numpy(rng.standard_normal((2, 5, 8)).astype(np.float32))
        self.what = ("fast path (eval, inference_mode, need_weights=False)" if mode == "fast"
                     else f"ordinary path, need_weights={need_weights}")

    def module(self, **ctor):
        self.torch.manual_seed(0)
        return self.torch.nn.MultiheadAttention(8, 2, batch_first=True, **ctor)

    def __call__(self, mha, x, **kw):
        torch = self.torch
        if self.mode == "fast":
            mha.eval()
            out, weights, self.ran = fast_call(torch, mha, (x, x, x), need_weights=False, **kw)
            return out, weights
        mha.train()
        with torch.no_grad():
            return mha(x, x, x, need_weights=self.need_weights, **kw)


def mha_cells(torch, mode: str, need_weights: bool = True) -> list[ApiFact]:
    """Every fact of the module's API in `mode` ("ordinary" or "fast")."""
    calls = _Calls(torch, mode, need_weights)
    return [_sizes(torch), _layout(torch, mode), _key_padding(torch), _returned(calls),
            ApiFact("mask_on_tensor", "none", "a torch.Tensor carries no mask (nothing "
                    "like Keras's _keras_mask); forward reads masks only from "
                    "key_padding_mask and attn_mask")]


def _sizes(torch) -> ApiFact:
    size = torch.nn.MultiheadAttention(8, 2)
    try:
        torch.nn.MultiheadAttention(10, 4)
        odd = "MultiheadAttention(10, 4) constructs"
    except AssertionError as exc:
        odd = f"MultiheadAttention(10, 4): AssertionError: {exc}"
    return ApiFact("head_size_from", "derived_from_width", f"MultiheadAttention(8, 2): "
                   f"head_dim {size.head_dim}, in_proj_weight "
                   f"{tuple(size.in_proj_weight.shape)}; {odd}; no head-size argument")


def _layout(torch, mode: str) -> ApiFact:
    default = torch.nn.MultiheadAttention(8, 2).batch_first
    fast = "; the fast path itself needs batch_first=True ('batch_first was not True' " \
        "declines it)" if mode == "fast" else ""
    return ApiFact("tensor_layout", "batch_first" if default else "sequence_first",
                   f"MultiheadAttention(8, 2).batch_first is {default} (the constructor's "
                   f"default): query (L, N, E) by its documentation unless batch_first="
                   f"True; the runner passes batch_first=True{fast}")


def _key_padding(torch) -> ApiFact:
    doc = " ".join((torch.nn.MultiheadAttention.forward.__doc__ or "").split())
    said = "True`` value indicates that the corresponding ``key`` value will be ignored"
    found = said in doc
    return ApiFact("padding_argument", "true_blocks" if found else "not_probed",
                   f"{MHA}.forward's key_padding_mask (N, S) (torch/nn/modules/activation.py): "
                   + (f"'For a binary mask, a ``{said}'" if found else
                      "its docstring states no polarity"))


def _returned(calls: _Calls) -> ApiFact:
    """What the default call returns besides the output: the shape of the weights torch
    gives back (3-D: averaged over heads; 4-D: per head; None: none)."""
    torch = calls.torch
    mha = calls.module()
    if calls.mode == "fast":
        mha.eval()
        _, w, ran = fast_call(torch, mha, (calls.x,) * 3)  # the default need_weights=True
        what = (f"eval, inference_mode, default need_weights=True on (B, T, E) = (2, 5, 8), "
                f"2 heads: weights {None if w is None else tuple(w.shape)}, fast path ran: "
                f"{ran}")
    else:
        _, w = calls(mha, calls.x)
        what = (f"{calls.what}: weights {None if w is None else tuple(w.shape)} for "
                "(B, H, T, S) = (2, 2, 5, 5)")
    word = "none" if w is None else ("head_averaged" if w.dim() == 3 else "per_head")
    return ApiFact("weights_returned", word, what)
