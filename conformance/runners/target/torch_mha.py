"""A --kind torch-mha target: a drop-in replacement for `torch.nn.MultiheadAttention`
(`module:Class`, the same constructor and forward), run as torch.mha runs torch's own: built
with nn.MultiheadAttention's keyword arguments (batch_first=True), the canonical weights
loaded into nn.MultiheadAttention's state dict names and layout (packed `in_proj_weight`
when key and value widths equal embed_dim), masks in nn.MultiheadAttention's polarity (True
= blocked: key_padding_mask (B, S), attn_mask (T, S) or (B*H, T, S)), forward(query, key,
value, ..., need_weights=True, average_attn_weights=False) in train() mode with dropout 0
(the weights it returns by default, from a second call as its users make it, read the
returned_weights axis).
What the replacement does with those is its convention: the ledger asks (attn_mask raw, the
scale, float64 arithmetic, the argument order...).
"""
from __future__ import annotations

import numpy as np

from conformance.contract.api_facts import ApiFact
from conformance.contract.runner import NotExpressibleError, Observation, to_numpy
from conformance.runners.target import TargetError, TargetRunner, TargetSpec


def module_class(spec: TargetSpec):
    """The class a torch-mha target names (TargetError when it is not one)."""
    from conformance.runners.target.loading import import_attribute, quoted

    cls = import_attribute(spec)
    if not isinstance(cls, type):
        raise TargetError(f"TARGET {spec.target}: is a {type(cls).__name__}, not a class "
                          "with nn.MultiheadAttention's constructor")
    try:
        import torch

        m = cls(embed_dim=8, num_heads=2, batch_first=True)
        x = torch.zeros(1, 3, 8)
        got = m(x, x, x)
    except Exception as exc:  # the user's code: named, no traceback
        cls_name = spec.target.rsplit(":", 1)[-1]
        raise TargetError(f"TARGET {spec.target}: {cls_name}(embed_dim=8, num_heads=2, "
                          f"batch_first=True)(x, x, x) raised: {quoted(exc)}") from None
    out = got[0] if isinstance(got, (tuple, list)) else got
    if tuple(getattr(out, "shape", ())) != (1, 3, 8):
        raise TargetError(f"TARGET {spec.target}: forward returned shape "
                          f"{tuple(getattr(out, 'shape', ()))} for (1, 3, 8) inputs; "
                          "nn.MultiheadAttention returns (attn_output, attn_weights)")
    return cls


class TargetTorchMHA(TargetRunner):
    path = "the user's module, called as torch.nn.MultiheadAttention"
    description = "your attention: a drop-in nn.MultiheadAttention you point the suite at"
    requires = ("torch",)
    extras = "torch"
    seconds = 0.05
    answers = frozenset({"attn_mask"})
    probe_takes = frozenset({"float64"})

    @staticmethod
    def check(spec) -> None:
        module_class(spec)

    def load(self):
        return module_class(self.target_spec)

    def cls(self):
        return self.loaded()

    def signatures(self):
        try:
            c = self.cls()
        except TargetError:
            return ()
        return (self.system, (c.__init__, c.forward))

    def translate(self, case):
        from conformance.runners._export.torch_mha import mha_translation

        t = mha_translation(case)
        if hasattr(t, "call"):
            return type(t)(t.call.replace("torch.nn.MultiheadAttention", self.system), t.plan)
        return t

    def build(self, torch, case, plan, weights):
        from conformance.convert.frameworks import to_torch
        from conformance.runners._export.torch_mha import torch_dtype

        dt = torch_dtype(torch, case.inputs.dtype)
        try:
            m = self.cls()(**plan, dtype=dt)
        except TypeError:
            m = self.cls()(**plan).to(dt)
        packed = getattr(m, "_qkv_same_embed_dim", "in_proj_weight" in dict(
            m.named_parameters()))
        state = to_torch(weights, packed=bool(packed))
        try:
            m.load_state_dict({n: torch.tensor(a, dtype=dt) for n, a in state.items()},
                              strict=True)
        except RuntimeError as exc:
            raise NotExpressibleError(f"{self.system} does not take nn.MultiheadAttention's "
                                      f"state dict: {' '.join(str(exc).split())[:300]}") from exc
        return m, {n: tuple(p.shape) for n, p in m.named_parameters()}

    def forward(self, torch, case, data, m, kpm, am, **flags):
        from conformance.runners._export.torch_mha import tensors

        q, k, v = tensors(torch, case, data.inputs)
        with torch.no_grad():
            m.train()  # nn.MultiheadAttention's ordinary path; dropout is 0
            got = m(q, k, v, key_padding_mask=kpm, attn_mask=am, **flags)
        out, weights = (got[0], got[1] if len(got) > 1 else None) \
            if isinstance(got, (tuple, list)) else (got, None)
        return out, weights

    def run(self, case, translation, data):
        from conformance.runners._export.torch_mha import import_torch, torch_masks

        torch = import_torch()
        m, shapes = self.build(torch, case, translation.plan, data.weights)
        kpm, am = torch_masks(torch, case, data.inputs)
        out, weights = self.forward(torch, case, data, m, kpm, am, need_weights=True,
                                    average_attn_weights=False)
        _, default = self.forward(torch, case, data, m, kpm, am)  # as its users call it
        a, i = case.attention, case.inputs
        per_head = weights is not None and tuple(weights.shape) == (
            i.batch, a.num_heads, i.query_len, i.key_len)
        return Observation(
            output=to_numpy(out), attention_weights=to_numpy(weights) if per_head else None,
            weights_returned="per_head" if per_head else "none",
            parameters=sum(p.numel() for p in m.parameters()), weight_shapes=shapes,
            notes=["masks passed as nn.MultiheadAttention takes them (True = blocked)"],
            extras={"mask_polarity": "True = blocked", "default_weights_shape":
                    list(default.shape) if default is not None else None})

    def answer(self, case, data, raw):
        if raw.argument != "attn_mask":
            raise NotImplementedError(f"{self.name} passes no raw {raw.argument}")
        from conformance.runners._export.torch_mha import import_torch, mha_translation

        torch = import_torch()
        t = mha_translation(case)
        if not hasattr(t, "plan"):
            raise NotImplementedError(t.reason)
        m, _ = self.build(torch, case, t.plan, data.weights)
        mask = np.asarray(raw.value)
        if mask.dtype != bool:
            mask = mask.astype(case.inputs.dtype)
        mask = np.repeat(mask, case.attention.num_heads, axis=0)  # (B*H, T, S)
        out, _ = self.forward(torch, case, data, m, None, torch.from_numpy(mask))
        return to_numpy(out), f"{self.system}(...)(q, k, v, attn_mask=<{mask.dtype} (B*H, T, S)>)"

    def conventions(self):
        """What the replacement's constructor shows: its parameters and the weight shapes of
        one built with embed_dim=8, num_heads=2 (no head-size argument: head_dim = embed_dim
        / num_heads, as in nn.MultiheadAttention).  The ledger's asked probe confirms it by
        running the replacement (a head size apart from the width fails it).  A class that
        cannot be built reports nothing."""
        import inspect

        try:
            cls = self.cls()
            names = [n for n in inspect.signature(cls.__init__).parameters if n != "self"]
            m = cls(embed_dim=8, num_heads=2, batch_first=True)
            shapes = {n: tuple(p.shape) for n, p in m.named_parameters()}
        except Exception:  # the user's code: no reading, the probe says so
            return []
        head = getattr(m, "head_dim", None)
        return [ApiFact("head_size_from", "derived_from_width",
                        f"{self.system}({', '.join(names)}): built with embed_dim=8, "
                        f"num_heads=2: {'head_dim ' + str(head) + ', ' if head else ''}"
                        f"parameters {shapes}")]
