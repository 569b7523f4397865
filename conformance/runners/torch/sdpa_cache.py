"""KV-cache decoding through `F.scaled_dot_product_attention` with a hand-kept cache (#20).

What a user of SDPA writes to decode: a prefill of P positions with `is_causal=True`,
then N single-position steps, each projecting its one new position, appending its key
and value to the cache (two growing (B, H_kv, S, d) tensors, torch.cat on dim 2) and
calling SDPA on the whole cache with NO causal flag: `is_causal=True` is aligned to
the upper left (torch/nn/functional.py, the is_causal docstring: "the upper left causal
bias ... when the mask is a non-square matrix"), so a one-query step would see key 0 only;
transformers' SDPA path drops the flag at q_len 1 for that reason
(transformers/integrations/sdpa_attention.py: `is_causal = q_length > 1 and attention_mask
is None and is_causal`, "Not in decoding phase (otherwise we want full attention on the
single query token)"), and torch.nn.attention.bias.causal_lower_right is the explicit
mask for it.  The ledger asks it (conventions/probes/cache.py): its cache_causal_alignment
cell is this decode (no flag at the step), the step with is_causal=True (RawCall
step_is_causal) quoted in its evidence as a causal_flag fact; its single-call probes are
answered by the op every step calls (probe_translate, as torch.sdpa runs it).  The outputs
of the prefill and the steps, concatenated, are judged against the full causal forward.
SDPA has no rotary embedding, window or sinks of its own, so a decode case asking for one
is not expressible here.  The cache is the caller's (this runner's two growing tensors):
SDPA takes whole key and value tensors and returns one output, so nothing of a cache layout
is the system's (its signature, read by the ledger, names no cache argument).  A fully
masked step is the ledger's measurement (RawCall step_mask: conventions/probes/
decode_masks.py).  torch is imported inside `run` only.
"""
from __future__ import annotations

from conformance.contract.runner import NotExpressible, Translation, harness_limit
from conformance.runners.torch.common import (
    SDPAAnswers, SdpaPlan, TorchRunner, canonical_projector, sdpa_call, sdpa_observation,
    sdpa_plan)
from conformance.runners._export.torch_mha import import_torch, tensors

LAYOUT = "two tensors, key and value (B, H_kv, S, d) (BNSH), growing by torch.cat on dim 2"


class TorchSDPACache(SDPAAnswers, TorchRunner):
    name = "torch.sdpa.cache"
    decodes_only = True  # translate refuses a case without a decode section
    system = "torch.nn.functional.scaled_dot_product_attention"
    path = "hand-kept KV cache"
    description = ("`F.scaled_dot_product_attention` decoding through a hand-kept KV cache "
                   "(prefill, then one position per step)")
    no_parameters_label = "torch SDPA"
    features = TorchRunner.features | {"decode"}
    sets_scale = True  # scale= at the prefill and every step, when the case sets one
    answers = SDPAAnswers.answers | {"step_is_causal", "step_mask"}
    probe_takes = SDPAAnswers.probe_takes | {"float64"}

    def translate(self, case):
        if case.decode is None:
            return NotExpressible(harness_limit("this runner decodes: the case has no decode "
                                                "section (the plain call is torch.sdpa)"))
        if case.has_non_causal_mask or case.mask.causal == "none":
            return NotExpressible(harness_limit(
                "a decode is causal self-attention with no other mask"))
        d, scale = case.decode, case.attention.scale
        sc = f", scale={scale!r}" if scale is not None else ""
        return Translation(f"prefill: F.scaled_dot_product_attention(q[:, :, :{d.prefill}], "
                           f"k, v, is_causal=True{', enable_gqa=True' if case.grouped else ''}"
                           f"{sc}); {d.steps} steps: k = torch.cat([k, k_new], 2) (likewise "
                           f"v), F.scaled_dot_product_attention(q_new, k, v{sc})", d)

    def probe_translate(self, case):
        """A ledger probe's case: a decode through the cache, or a single call of the op
        every step calls (as torch.sdpa runs it; the matrix rows take decodes only)."""
        if case.decode is not None:
            return self.translate(case)
        plan = sdpa_plan(case)
        return Translation(f"torch.nn.functional.scaled_dot_product_attention("
                           f"{plan.arguments()})", plan)

    def run(self, case, translation, data):
        if isinstance(translation.plan, SdpaPlan):  # a probe's single call
            return sdpa_call(import_torch(), case, translation.plan, data)
        return _decode(import_torch(), case, data)

    def answer(self, case, data, raw):
        """step_is_causal: the decode with is_causal=True passed at every step too (what a
        user who passes the prefill's flag to every call gets); the rest as SDPA's single
        call (SDPAAnswers)."""
        if raw.argument == "step_mask":  # each step its mask row, as attn_mask
            obs = _decode(import_torch(), case, data, rows=data.inputs.allowed, nan=raw.value)
            return obs.output, ("F.scaled_dot_product_attention(q_new, k, v, attn_mask=<bool "
                                "(B, 1, 1, t + 1), True = attend>) at each step")
        if raw.argument != "step_is_causal":
            return super().answer(case, data, raw)
        obs = _decode(import_torch(), case, data, step_causal=bool(raw.value))
        return obs.output, "is_causal=True" if raw.value else "no is_causal"

    def conventions(self):
        """What SDPA's API shows (observations.py, the function every step calls); the
        cache is the runner's own, so it reports no fact of it; the ledger asks the rest."""
        from conformance.runners.torch.observations import sdpa_cells

        return sdpa_cells(import_torch())


def _decode(torch, case, data, step_causal: bool = False, rows=None, nan=None):
    """The runner's decode: a causal prefill, then one position per SDPA call over the
    grown cache with no causal flag (`step_causal`: every step passes is_causal=True
    instead, the flag's reading the cache cell quotes beside its own).  `rows` ((B, T, S)
    booleans, True = attend): step t passes rows[:, t, :t + 1] as attn_mask; `nan`
    ({'nan': 'key' or 'value', 'item', 'slot'}): NaN written into that cached tensor
    after the prefill."""
    F = torch.nn.functional
    w, project = canonical_projector(torch, case, data)
    x, _, _ = tensors(torch, case, data.inputs)

    kw = {"enable_gqa": True} if case.grouped else {}
    if case.attention.scale is not None:
        kw["scale"] = case.attention.scale
    flag = {"is_causal": True} if step_causal else {}
    p, outs = case.decode.prefill, []
    with torch.no_grad():
        k, v = project(x[:, :p], "wk", "bk"), project(x[:, :p], "wv", "bv")
        outs.append(F.scaled_dot_product_attention(project(x[:, :p], "wq", "bq"), k, v,
                                                   is_causal=True, **kw))
        if nan:
            (k if nan["nan"] == "key" else v)[nan["item"], :, nan["slot"]] = float("nan")
        for t in range(p, case.inputs.query_len):
            if rows is not None:
                flag = {"attn_mask": torch.from_numpy(rows[:, None, t:t + 1, :t + 1].copy())}
            xt = x[:, t:t + 1]
            k = torch.cat([k, project(xt, "wk", "bk")], 2)
            v = torch.cat([v, project(xt, "wv", "bv")], 2)
            outs.append(F.scaled_dot_product_attention(project(xt, "wq", "bq"), k, v,
                                                       **flag, **kw))
        return sdpa_observation(
            torch, torch.cat(outs, 2), w, data, [f"prefill {p}, then "
                                                 f"{case.inputs.query_len - p} steps "
                                                 f"through the cache: {LAYOUT}"],
            extras={"cache_note": LAYOUT})
