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
the exports).  The runners only answer: the ledger asks their conventions (through
translate/run, ANSWERS through `answer`), mha_observations.py reports what the
module's API shows.  torch is imported inside the methods only.
"""
from __future__ import annotations

from conformance.contract.runner import (
    NotExpressible, NotExpressibleError, Observation, Translation, to_numpy)
from conformance.runners.torch.common import TorchRunner, fast_call
from conformance.runners.torch.mha_observations import declined
from conformance.runners._export.torch_mha import (
    build_mha, import_torch, mha_translation, tensors, torch_masks)

# the raw arguments nn.MultiheadAttention answers (`answer`)
ANSWERS = frozenset({"attn_mask", "is_causal", "causal_hint", "dropout_training",
                     "input_dtype", "unbatched", "dropout_weights"})
NATIVE_CALLS = frozenset({"input_dtype", "unbatched", "dropout_weights"})  # -> Observation


class TorchMHA(TorchRunner):
    name = "torch.mha"
    system = "torch.nn.MultiheadAttention"
    path = "ordinary"
    description = "`torch.nn.MultiheadAttention`, ordinary path, per-head weights"
    typed_system = "torch"
    need_weights = True  # False: torch.mha.no-weights, forward(..., need_weights=False)
    probe_takes = frozenset({"key_padding"})  # key_padding_mask
    answers = ANSWERS
    # F.multi_head_attention_forward's _canonical_mask turns a boolean mask into a float one:
    # torch.zeros_like(mask, dtype=target_type).masked_fill_(mask, float("-inf"))
    documented_fill = ("-inf", "https://github.com/pytorch/pytorch/blob/v2.13.0/torch/nn/"
                       "functional.py")

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

    def signatures(self):
        mha = import_torch().nn.MultiheadAttention
        return "torch.nn.MultiheadAttention", (mha.__init__, mha.forward)

    def conventions(self):
        """What the module's API shows (mha_observations.py); the ledger asks the rest."""
        from conformance.runners.torch.mha_observations import mha_cells

        return mha_cells(import_torch(), "fast" if self.path == "fast path" else "ordinary",
                         self.need_weights)

    def answer(self, case, data, raw):
        """The module on the case's canonical weights with one argument passed raw (the
        ledger judges): a (B, T, S) attn_mask repeated per head to (B*H, T, S); is_causal
        alone; causal_hint (is_causal=True beside value['attn_mask'], and an all-False
        key_padding_mask where value['pad_nothing']); dropout_training (the module built
        with dropout=rate, train() or eval(), torch.manual_seed(0))."""
        torch = import_torch()
        if raw.argument not in self.answers:
            raise NotImplementedError(f"{self.name} passes no raw {raw.argument}")
        t = mha_translation(case)
        if isinstance(t, NotExpressible):
            raise NotImplementedError(t.reason)
        rate = raw.value["rate"] if raw.argument in ("dropout_training",
                                                     "dropout_weights") else 0.0
        mha, _ = build_mha(torch, case, Translation(t.call, {**t.plan, "dropout": rate}),
                           data.weights)
        if raw.argument in NATIVE_CALLS:
            return self._native_call(torch, mha, tensors(torch, case, data.inputs), raw, t)
        kw, said = raw_keywords(torch, case, raw)
        training = raw.argument != "dropout_training" or raw.value["training"]
        out = self._forward(torch, mha, tensors(torch, case, data.inputs), kw, training)
        return to_numpy(out), f"{t.call}; forward(q, k, v{said})"

    def _native_call(self, torch, mha, args, raw, t):
        """The calls answered with an Observation: the inputs cast to raw.value (one tensor
        stays one: self-attention keeps its identity), item 0 without the batch axis, or
        dropout in train() returning the weights the module gives (averaged, as by default;
        None with need_weights=False).  native_dtype is the output's own dtype."""
        def each(f):
            done = {}
            return tuple(done.setdefault(id(a), f(a)) for a in args)

        weights = None
        if raw.argument == "input_dtype":
            out = self._forward(torch, mha, each(lambda a: a.to(getattr(torch, raw.value))),
                                {}, False)
            said = f"forward(q, k, v as {raw.value})"
        elif raw.argument == "unbatched":
            out = self._forward(torch, mha, each(lambda a: a[0]), {}, False)
            said = "forward(q[0], k[0], v[0]): (T, E) inputs"
        else:
            out, weights = self._weights_forward(torch, mha, args)
            said = f"forward(q, k, v) with dropout={raw.value['rate']}, train() (seed 0)"
        return Observation(output=to_numpy(out), native_dtype=str(out.dtype).split(".")[-1],
                           attention_weights=None if weights is None else to_numpy(weights),
                           weights_returned="none" if weights is None else "averaged"
                           ), f"{t.call}; {said}"

    def _weights_forward(self, torch, mha, args):
        """train() under no_grad with the runner's need_weights: (output, weights or None)."""
        torch.manual_seed(0)
        mha.train()
        with torch.no_grad():
            return mha(*args, need_weights=self.need_weights)

    def _forward(self, torch, mha, args, kw, training: bool):
        """The ordinary path: train() under no_grad (dropout 0 unless set); eval() with grad
        enabled, which keeps forward off the fast path."""
        torch.manual_seed(0)
        if training:
            mha.train()
            with torch.no_grad():
                return mha(*args, need_weights=self.need_weights, **kw)[0]
        mha.eval()
        return mha(*args, need_weights=self.need_weights, **kw)[0].detach()

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

    def _forward(self, torch, mha, args, kw, training: bool):
        """The fast path as the runner calls it (eval, or train() for dropout, under
        inference_mode, need_weights=False); the system's decline raised in torch's words
        (a path taking only self-attention is asked the self-attention form: unasked)."""
        if args[0] is not args[1]:
            raise NotImplementedError(f"fast path: {declined('cross')}")
        mha.train(training and mha.dropout > 0)
        torch.manual_seed(0)
        out, _, ran = fast_call(torch, mha, args, need_weights=False, **kw)
        if not ran:
            mask = kw.get("attn_mask")
            why = "training" if mha.training else "float_attn_mask" if mask is not None and \
                mask.is_floating_point() else None
            raise NotExpressibleError(f"fast path not taken: {declined(why)}" if why else
                                      "fast path not taken: forward fell back to the ordinary "
                                      "path")
        return out

    def _weights_forward(self, torch, mha, args):
        """The fast path in train() with need_weights=False: it returns no weights."""
        return self._forward(torch, mha, args, {}, True), None

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


def raw_keywords(torch, case, raw) -> tuple[dict, str]:
    """forward's keyword arguments for a raw call, and how the call shows them."""
    import numpy as np

    def per_head(mask):
        m = np.asarray(mask)
        m = m if m.dtype == bool else m.astype(case.inputs.dtype)
        return torch.from_numpy(np.ascontiguousarray(np.repeat(m, case.attention.num_heads, 0)))

    if raw.argument == "attn_mask":
        m = per_head(raw.value)
        return {"attn_mask": m}, f", attn_mask=<{str(m.dtype)[6:]} (B*H, T, S)>"
    if raw.argument == "is_causal":
        return {"is_causal": bool(raw.value)}, f", is_causal={bool(raw.value)}"
    if raw.argument == "causal_hint":
        kw = {"attn_mask": per_head(raw.value["attn_mask"]), "is_causal": True}
        said = ", attn_mask=<bool (B*H, T, S)>, is_causal=True"
        if raw.value.get("pad_nothing"):
            kw["key_padding_mask"] = torch.zeros(case.inputs.batch, case.inputs.key_len,
                                                 dtype=torch.bool)
            said += ", key_padding_mask=<all-False bool (B, S)>"
        return kw, said
    return {}, (f") with dropout={raw.value['rate']}, "
                f"{'train' if raw.value['training'] else 'eval'}() (seed 0")
