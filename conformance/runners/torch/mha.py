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
The shared helpers live in common.py and _export/torch_mha.py (the module, shared with
the exports); torch is imported inside `run` only.
"""
from __future__ import annotations

from conformance.contract.runner import (
    NotExpressible, NotExpressibleError, Observation, Translation, to_numpy)
from conformance.runners.torch.common import TorchRunner, fast_call
from conformance.runners._export.torch_mha import (
    build_mha, import_torch, mha_translation, tensors, torch_masks)
from conformance.contract.probing import feature_cells
from conformance.runners.torch.mha_probes import mha_conventions


class TorchMHA(TorchRunner):
    name = "torch.mha"
    system = "torch.nn.MultiheadAttention"
    path = "ordinary"
    description = "`torch.nn.MultiheadAttention`, ordinary path, per-head weights"
    typed_system = "torch"
    need_weights = True  # False: torch.mha.no-weights, forward(..., need_weights=False)

    def __init__(self, **params):
        super().__init__(**params)
        if "name" not in params and not self.need_weights:
            self.name, self.path = "torch.mha.no-weights", "ordinary, need_weights=False"
            self.description = ("the same module called with `need_weights=False` (another "
                                "code path: a fully masked row gives `out_proj.bias`, not NaN)")

    def translate(self, case):
        t = mha_translation(case)
        if self.need_weights or isinstance(t, NotExpressible):
            return t
        return Translation(f"{t.call}; forward(query, key, value, ..., need_weights=False)",
                           t.plan)

    def count(self, case):
        """nn.MultiheadAttention on the meta device: torch's own count, no storage."""
        from conformance.runners.counting import torch_mha_count

        return torch_mha_count(import_torch(), case, mha_translation(case).plan)

    def conventions(self):
        torch = import_torch()
        mha = torch.nn.MultiheadAttention
        return mha_conventions(torch, "fast" if self.path == "fast path" else "ordinary",
                               self.need_weights) + feature_cells(
                                   "torch.nn.MultiheadAttention",
                                   mha.__init__, mha.forward)

    def run(self, case, translation, data):
        torch = import_torch()
        if not self.need_weights:
            return self._run_no_weights(torch, case, translation, data)

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

    def _run_no_weights(self, torch, case, translation, data):
        mha, shapes = build_mha(torch, case, translation, data.weights)
        q, k, v = tensors(torch, case, data.inputs)
        kpm, am = torch_masks(torch, case, data.inputs)
        with torch.no_grad():
            mha.train()  # the ordinary path (dropout is 0), as torch.mha
            out, weights = mha(q, k, v, key_padding_mask=kpm, attn_mask=am, need_weights=False)
        return Observation(
            output=to_numpy(out), parameters=sum(p.numel() for p in mha.parameters()),
            weight_shapes=shapes, notes=[f"need_weights=False returns {weights} for the weights"],
            extras={"mask_polarity": "True = blocked"})


class TorchMHAFastPath(TorchMHA):
    """The inference fast path (`torch._native_multi_head_attention`).

    It engages only for self-attention, batch_first, eval, no grad, even
    num_heads, packed in_proj with biases; otherwise forward silently falls
    back.  We detect whether it ran by wrapping the native op for the call.
    """

    name = "torch.mha.fastpath"
    path = "fast path"
    description = "the same module in its inference fast path (and whether it engaged)"

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
        out, _, engaged = fast_call(torch, mha, (q, k, v), key_padding_mask=kpm, attn_mask=am,
                                    need_weights=False)
        if not engaged:
            raise NotExpressibleError("fast path not taken: forward fell back to the "
                                      "ordinary path for this configuration")
        return Observation(
            output=to_numpy(out), parameters=sum(p.numel() for p in mha.parameters()),
            weight_shapes=shapes, notes=["fast path taken (torch._native_multi_head_attention)"],
            extras={"mask_polarity": "True = blocked", "fast_path": True})
