"""A --kind sdpa target: the user's `f(q, k, v, *, mask=None, is_causal=False, scale=None,
...)` on (batch, heads, length, head_dim) arrays of NumPy, torch, JAX or MLX.

The runner calls it the way a caller of `torch.nn.functional.scaled_dot_product_attention`
would: the canonical projections computed in float64 NumPy and rounded to the case's dtype
(so the only arithmetic below float64 is the target's), k and v with the case's kv heads
(untiled: a grouped case asks the target's own head mapping; `enable_gqa=True` where it
declares it), a causal self-attention case as `is_causal=True` where it declares it and
T == S, every other mask (padding, explicit, windows, causal with T != S) as ONE boolean
mask (B, 1, T, S) with True = attend, the mask keyword being the first of `mask`,
`attn_mask`, `attention_mask` it declares; `scale=` only when the case sets a scale;
`softcap=` and `sinks=` (one logit per head) where it declares them.  The output heads go
back through the canonical output projection in float64.

What the target's conventions are is not declared by the user: the ledger asks (its raw
probes pass a mask of either polarity, a float mask, the causal switch; its asked probes
the scale, the head mapping, float64 arithmetic...).  A matrix row holds what the target
gives when called as above, so a target reading masks the other way fails the mask cases
and the ledger's attn_mask_polarity names why.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from conformance.contract.api_facts import ApiFact
from conformance.contract.runner import Count, NotExpressible, Observation, Translation
from conformance.runners.target import TargetError, TargetRunner
from conformance.runners.target.arrays import REQUIRES, Arrays

MASK_KEYWORDS = ("mask", "attn_mask", "attention_mask")
KNOWN = {"is_causal", "scale", "enable_gqa", "softcap", "sinks", *MASK_KEYWORDS}


class TargetShapeError(ValueError):
    """The target returned something that is not (B, H, T, d_v) heads."""


@dataclass(frozen=True)
class SdpaCall:
    """The keyword arguments one case gives the target (the arrays apart)."""

    mask: str = ""  # the mask keyword used ("" = no mask passed)
    is_causal: bool = False
    scale: float | None = None
    enable_gqa: bool = False
    softcap: float | None = None
    sinks: bool = False

    def words(self, target: str, mask_text: str = "bool (B, 1, T, S), True = attend") -> str:
        args = ["q, k, v"]
        if self.mask:
            args.append(f"{self.mask}={mask_text}")
        if self.is_causal:
            args.append("is_causal=True")
        if self.scale is not None:
            args.append(f"scale={self.scale!r}")
        if self.enable_gqa:
            args.append("enable_gqa=True")
        if self.softcap is not None:
            args.append(f"softcap={self.softcap!r}")
        if self.sinks:
            args.append("sinks=(H,) logits")
        return f"{target}({', '.join(args)})"


class TargetSDPA(TargetRunner):
    path = "the user's function"
    description = "your attention: an sdpa function you point the suite at (probe --kind sdpa)"
    no_parameters_label = "your sdpa"
    seconds = 0.01

    @staticmethod
    def check(spec) -> None:
        """A first call f(q, k, v) on small arrays (checks.py)."""
        from conformance.runners.target.checks import sdpa_call

        sdpa_call(spec)

    def __init__(self, **params):
        super().__init__(**params)
        self.arrays = Arrays(self.target_spec.array)
        self.requires = REQUIRES[self.target_spec.array]
        self.extras = {"torch": "torch", "jax": "flax", "mlx": "mlx"}.get(
            self.target_spec.array, "")

    # -- the user's function -------------------------------------------------------------
    def load(self):
        """(function, its parameter names)."""
        from conformance.runners.target.loading import callable_target

        return callable_target(self.target_spec)

    @property
    def parameters(self) -> tuple[str, ...]:
        try:
            return self.loaded()[1]
        except TargetError:
            return ()

    @property
    def mask_keyword(self) -> str:
        return next((m for m in MASK_KEYWORDS if m in self.parameters), "")

    @property
    def features(self) -> frozenset[str]:  # type: ignore[override]
        have = {"fill", "position_offset"}
        if self.mask_keyword:
            have.add("window")  # as the boolean mask
        have |= {f for f in ("softcap", "sinks") if f in self.parameters}
        return frozenset(have)

    @property
    def sets_scale(self) -> bool:  # type: ignore[override]
        return "scale" in self.parameters

    @property
    def answers(self) -> frozenset[str]:  # type: ignore[override]
        return frozenset(({"attn_mask"} if self.mask_keyword else set())
                         | ({"is_causal"} if "is_causal" in self.parameters else set()))

    probe_takes = frozenset({"float64", "grouped"})  # enable_gqa, or k, v heads by shape

    def signatures(self):
        try:
            return (self.system, (self.loaded()[0],))
        except TargetError:
            return ()

    # -- the native calls ----------------------------------------------------------------
    def translate(self, case):
        a, i = case.attention, case.inputs
        limit = self.arrays.dtype_limit(i.dtype)
        if limit:
            return NotExpressible(limit)
        params = self.parameters
        signature = f"{self.system}({', '.join(params)})"
        if a.scale is not None and "scale" not in params:
            return NotExpressible(f"{signature} takes no scale=: attention.scale {a.scale:g} "
                                  "cannot be set")
        causal = case.mask.causal != "none"
        flag = (causal and not case.has_non_causal_mask and "is_causal" in params
                and i.query_len == i.key_len)
        needs_mask = (causal and not flag) or case.has_non_causal_mask \
            or case.mask.window is not None
        if needs_mask and not self.mask_keyword:
            return NotExpressible(f"{signature} takes no mask argument (none of "
                                  f"{', '.join(MASK_KEYWORDS)})")
        call = SdpaCall(mask=self.mask_keyword if needs_mask else "", is_causal=flag,
                        scale=a.scale, enable_gqa=case.grouped and "enable_gqa" in params,
                        softcap=a.softcap if "softcap" in params else None,
                        sinks=a.sinks and "sinks" in params)
        return Translation(call.words(self.system), call)

    def heads(self, case, data):
        """q (B, H, T, d_k), k (B, H_kv, S, d_k), v (B, H_kv, S, d_v) in the case's dtype,
        projected in float64."""
        w, x = data.weights, data.inputs

        def project(t, wn, bn):
            y = np.einsum("ble,hed->bhld", t, getattr(w, wn))
            b = getattr(w, bn)
            return y if b is None else y + b[None, :, None, :]

        dt = case.inputs.dtype
        return tuple(self.arrays.put(project(t, wn, bn), dt) for t, wn, bn in (
            (x.query, "wq", "bq"), (x.key, "wk", "bk"), (x.value, "wv", "bv")))

    def invoke(self, case, data, call: SdpaCall, mask=None):
        """The target's (B, T, E_o) output (float64) and per-head weights when it returned
        them, for `call` with `mask` (a NumPy array, given as it is) under call.mask."""
        fn = self.loaded()[0]
        q, k, v = self.heads(case, data)
        kw: dict = {}
        if call.mask:
            kw[call.mask] = self.arrays.put(mask, None)
        if call.is_causal:
            kw["is_causal"] = True
        if call.scale is not None:
            kw["scale"] = call.scale
        if call.enable_gqa:
            kw["enable_gqa"] = True
        if call.softcap is not None:
            kw["softcap"] = call.softcap
        if call.sinks:
            kw["sinks"] = self.arrays.put(data.weights.sinks, case.inputs.dtype)
        got = fn(q, k, v, **kw)
        weights = None
        if isinstance(got, (tuple, list)) and got:
            got, weights = got[0], (got[1] if len(got) > 1 else None)
        heads = self.arrays.get(got)
        a, i = case.attention, case.inputs
        want = (i.batch, a.num_heads, i.query_len, a.v_head_dim)
        if heads.shape != want:
            raise TargetShapeError(f"{self.system} returned shape {tuple(heads.shape)}; "
                                   f"expected (B, H, T, d_v) = {want}")
        wt = data.weights
        out = np.einsum("bhtd,hde->bte", heads, wt.wo)
        out = out if wt.bo is None else out + wt.bo
        if weights is not None:
            weights = self.arrays.get(weights)
            if weights.shape != (i.batch, a.num_heads, i.query_len, i.key_len):
                weights = None
        return out, weights, self.arrays.held(got)

    def run(self, case, translation, data):
        call: SdpaCall = translation.plan
        mask = None
        if call.mask:
            mask = np.asarray(data.inputs.allowed)[:, None]
        out, weights, held = self.invoke(case, data, call, mask)
        notes = ["holds no parameters: the canonical projections are passed as arrays "
                 "(computed in float64, rounded to the case's dtype)"]
        if call.mask:
            notes.append(f"every mask part passed as one boolean {call.mask}= (B, 1, T, S), "
                         "True = attend, as torch.sdpa takes it")
        if case.grouped:
            notes.append(f"k, v passed with {case.attention.num_kv_heads} heads, not tiled")
        if held != case.inputs.dtype:
            notes.append(f"returned {held}, not the requested {case.inputs.dtype}")
        arrays = data.weights.arrays()
        return Observation(
            output=out, attention_weights=weights,
            weights_returned="per_head" if weights is not None else "none", parameters=None,
            projection_parameters=sum(x.size for x in arrays.values()),
            weight_shapes={n: tuple(x.shape) for n, x in arrays.items()}, notes=notes,
            extras={"output_dtype": held, "array": self.target_spec.array})

    def answer(self, case, data, raw):
        """The target with one argument raw (the ledger's flags probes)."""
        scale = case.attention.scale if self.sets_scale else None
        if raw.argument == "attn_mask" and self.mask_keyword:
            m = np.asarray(raw.value)
            if m.dtype != bool:
                m = m.astype(np.float32 if case.inputs.dtype == "bfloat16"
                             else case.inputs.dtype)
            call = SdpaCall(mask=self.mask_keyword, scale=scale)
            out, _, _ = self.invoke(case, data, call, m[:, None])
            return out, call.words(self.system, f"<{m.dtype} (B, 1, T, S)>")
        if raw.argument == "is_causal" and "is_causal" in self.parameters:
            call = SdpaCall(is_causal=bool(raw.value), scale=scale)  # off: not passed
            return self.invoke(case, data, call)[0], call.words(self.system)
        raise NotImplementedError(f"{self.name} passes no raw {raw.argument}")

    def count(self, case):
        from conformance.case.model import sizes_counts

        return Count(None, method="formula (the target holds no parameters; the "
                     "projections passed in)", projection_parameters=sizes_counts(
                         case.attention, case.inputs)["weights"])

    def conventions(self):
        """What the target's signature shows (its parameter names: three arrays and no size
        argument) and the layout its kind is called in; the ledger's asked probes confirm
        both by running it (a target reading another layout fails them).  A target whose
        signature cannot be read reports nothing."""
        params = self.parameters
        if not params:
            return []
        signature = f"{self.system}({', '.join(params)})"
        others = [p for p in params[3:] if p not in KNOWN]
        rest = f"; its other parameters ({', '.join(others)}) are not passed" if others else ""
        return [ApiFact("head_size_from", "given_tensors", f"{signature}: takes arrays "
                        f"{', '.join(params[:3])}, the projected heads, whose last axis is the "
                        f"head size{rest}"),
                ApiFact("tensor_layout", "batch_heads_first", f"{signature}: a --kind sdpa "
                        "target is called on (B, H, T, d) arrays, as "
                        "torch.nn.functional.scaled_dot_product_attention takes them")]
