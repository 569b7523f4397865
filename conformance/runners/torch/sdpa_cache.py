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
mask for it.  The cache_causal_alignment cell is this decode (no flag at the step); the
step with is_causal=True is quoted in its evidence as a causal_flag fact.  The outputs
of the prefill and the steps, concatenated, are judged against the full causal forward.
SDPA has no rotary embedding, window or sinks of its own, so a decode case asking for one
is not expressible here.  torch is imported inside `run` only.
"""
from __future__ import annotations

import numpy as np

from conformance.contract.runner import Convention, NotExpressible, Translation
from conformance.runners.torch.common import (
    SDPAAnswers, TorchRunner, canonical_projector, sdpa_observation)
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

    def translate(self, case):
        if case.decode is None:
            return NotExpressible("this runner decodes: the case has no decode section (the "
                                  "plain call is torch.sdpa)")
        if case.has_non_causal_mask or case.mask.causal == "none":
            return NotExpressible("a decode is causal self-attention with no other mask")
        d = case.decode
        return Translation(f"prefill: F.scaled_dot_product_attention(q[:, :, :{d.prefill}], "
                           f"k, v, is_causal=True{', enable_gqa=True' if case.grouped else ''})"
                           f"; {d.steps} steps: k = torch.cat([k, k_new], 2) (likewise v), "
                           "F.scaled_dot_product_attention(q_new, k, v)", d)

    def run(self, case, translation, data):
        return _decode(import_torch(), case, data)

    def conventions(self):
        """SDPA's own cells (the function this runner calls at every step: the probes of
        torch.sdpa), with the decode's cells in place of those a cache settles."""
        from conformance.contract.cache_probes import override
        from conformance.contract.probing import feature_cells
        from conformance.runners.torch.sdpa_probes import sdpa_conventions

        from conformance.contract.axes import NOT_PROBED

        torch = import_torch()
        sdpa = torch.nn.functional.scaled_dot_product_attention
        cells = [_step_alignment(torch), self._kv_heads(), self._float64(), Convention(
            "cache_layout", LAYOUT, "the cache is the caller's: SDPA takes whole key and "
            "value tensors (B, H_kv, S, d); this runner keeps two and grows them per step"),
            Convention("fully_masked_row", NOT_PROBED, "harness limit: the runner runs "
                       "causal decodes only (translate refuses any other mask), where every "
                       "query sees at least its own key; SDPA's own fully masked row is "
                       "torch.sdpa's cell")]
        return override(sdpa_conventions(torch) + feature_cells(
            "scaled_dot_product_attention", sdpa), cells)

    def _float64(self) -> Convention:
        """A float64 decode (prefill 2, 2 steps) against the float64 oracle: the runner's
        only kind of case, run in float64, settles its float64 arithmetic."""
        import numpy as np

        from conformance.case.loader import parse_case
        from conformance.contract.probing import PROBE_SOURCE
        from conformance.oracle.canonical import case_data
        from conformance.oracle.reference import attention

        case = parse_case({"id": "probe-cache-float64", "attention": {
            "num_heads": 2, "query_features": 8},
            "inputs": {"batch": 1, "query_len": 4, "self_attention": True, "seed": 7,
                       "dtype": "float64"},
            "mask": {"causal": "upper_left"}, "decode": {"prefill": 2, "steps": 2}},
            PROBE_SOURCE)
        out = self.run(case, self.translate(case), case_data(case)).output
        d = float(np.max(np.abs(np.asarray(out, np.float64) - attention(case).output)))
        return Convention("float64_compute", "float64" if d <= 1e-12 else "below_float64",
                          f"probe_case {case.id}: a float64 prefill and 2 steps, max |output - "
                          f"float64 oracle| {d:.1e} (float64 means <= 1e-12)")

    def _kv_heads(self) -> Convention:
        """A grouped decode (4 heads on 2 kv heads, enable_gqa=True) against the oracle's
        grouped mapping (query head h reads kv head h // 2) and the tiled one (h % 2)."""
        from dataclasses import replace

        from conformance.case.loader import parse_case
        from conformance.contract.probing import PROBE_SOURCE, closest
        from conformance.oracle.canonical import case_data
        from conformance.oracle.reference import attention

        case = parse_case({"id": "probe-cache-gqa", "attention": {
            "num_heads": 4, "num_kv_heads": 2, "query_features": 8},
            "inputs": {"batch": 1, "query_len": 4, "self_attention": True, "seed": 7},
            "mask": {"causal": "upper_left"}, "decode": {"prefill": 2, "steps": 2}},
            PROBE_SOURCE)
        data = case_data(case)
        out = self.run(case, self.translate(case), data).output
        order = [0, 2, 1, 3]  # tiled h % 2 read as grouped: query heads reordered
        w = data.weights
        tiled = replace(data, weights=replace(w, wq=w.wq[order], wo=w.wo[order],
                                              bq=None if w.bq is None else w.bq[order]))
        return closest("kv_head_mapping", out, {"grouped": attention(case).output,
                                                "tiled": attention(case, tiled).output},
                       f"probe_case {case.id}: decode with enable_gqa=True, 4 heads on 2 kv "
                       "heads")


def _decode(torch, case, data, step_causal: bool = False):
    """The runner's decode: a causal prefill, then one position per SDPA call over the
    grown cache with no causal flag (`step_causal`: every step passes is_causal=True
    instead, the flag's reading the cache cell quotes beside its own)."""
    F = torch.nn.functional
    w, project = canonical_projector(torch, case, data)
    x, _, _ = tensors(torch, case, data.inputs)

    gqa = {"enable_gqa": True} if case.grouped else {}
    flag = {"is_causal": True} if step_causal else {}
    p, outs = case.decode.prefill, []
    with torch.no_grad():
        k, v = project(x[:, :p], "wk", "bk"), project(x[:, :p], "wv", "bv")
        outs.append(F.scaled_dot_product_attention(project(x[:, :p], "wq", "bq"), k, v,
                                                   is_causal=True, **gqa))
        for t in range(p, case.inputs.query_len):
            xt = x[:, t:t + 1]
            k = torch.cat([k, project(xt, "wk", "bk")], 2)
            v = torch.cat([v, project(xt, "wv", "bv")], 2)
            outs.append(F.scaled_dot_product_attention(project(xt, "wq", "bq"), k, v,
                                                       **flag, **gqa))
        return sdpa_observation(
            torch, torch.cat(outs, 2), w, data, [f"prefill {p}, then "
                                                 f"{case.inputs.query_len - p} steps "
                                                 f"through the cache: {LAYOUT}"],
            extras={"cache_layout": LAYOUT})


def _step_alignment(torch) -> Convention:
    """The runner's own decode (prefill 3 with is_causal=True, then one step over the
    4-key cache with no flag, as its users call SDPA at T = 1): which keys does the step
    see?  The same decode with is_causal=True at the step is quoted as a causal_flag
    fact (upper-left for T=1 < S: key 0 only)."""
    from dataclasses import replace

    from conformance.case.model import Decode
    from conformance.contract import cache_probes as cp
    from conformance.oracle.canonical import case_data

    case = replace(cp.decode_case(), decode=Decode(cp.PREFILL, 1))
    data = case_data(case)
    out = np.asarray(_decode(torch, case, data).output, np.float64)
    flagged = np.asarray(_decode(torch, case, data, step_causal=True).output, np.float64)
    cell = cp.cache_alignment(
        case, out[:, -1:], "torch.sdpa.cache: prefill F.scaled_dot_product_attention(q, k, v, "
        "is_causal=True), then the step F.scaled_dot_product_attention(q_new, k, v) over the "
        "grown cache, no is_causal (the users' call at T = 1: transformers/integrations/"
        "sdpa_attention.py `is_causal = q_length > 1 and ...`)", out[:, :-1])
    return cp.with_fact(cell, cp.flag_fact(case, flagged[:, -1:], "is_causal=True"))
