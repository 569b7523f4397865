"""KV-cache decoding through `F.scaled_dot_product_attention` with a hand-kept cache (#20).

What a user of SDPA writes to decode: a prefill of P positions with `is_causal=True`,
then N single-position steps, each projecting its one new position, appending its key
and value to the cache (two growing (B, H_kv, S, d) tensors, torch.cat on dim 2) and
calling SDPA on the whole cache with NO causal flag: `is_causal=True` is aligned to
the upper left, so a one-query step would see key 0 only (the cache_causal_alignment
cell shows it).  The outputs of the prefill and the steps, concatenated, are judged
against the full causal forward.  SDPA has no rotary embedding, window or sinks of its
own, so a decode case asking for one is not expressible here.  torch is imported
inside `run` only.
"""
from __future__ import annotations

import numpy as np

from conformance.contract.runner import (
    Convention, NotExpressible, Translation, to_numpy)
from conformance.runners.torch.common import TorchRunner, canonical_projector, sdpa_observation
from conformance.runners._export.torch_mha import import_torch, tensors

LAYOUT = "two tensors, key and value (B, H_kv, S, d) (BNSH), growing by torch.cat on dim 2"


class TorchSDPACache(TorchRunner):
    name = "torch.sdpa.cache"
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
        torch = import_torch()
        F = torch.nn.functional
        w, project = canonical_projector(torch, case, data)
        x, _, _ = tensors(torch, case, data.inputs)

        gqa = {"enable_gqa": True} if case.grouped else {}
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
                                                           **gqa))
            return sdpa_observation(
                torch, torch.cat(outs, 2), w, data, [f"prefill {p}, then "
                                                     f"{case.inputs.query_len - p} steps "
                                                     f"through the cache: {LAYOUT}"],
                extras={"cache_layout": LAYOUT})

    def conventions(self):
        """SDPA's own cells (the function this runner calls at every step: the probes of
        torch.sdpa), with the decode's cells in place of those a cache settles."""
        from conformance.contract.cache_probes import override
        from conformance.contract.probing import feature_cells
        from conformance.runners.torch.sdpa_probes import sdpa_conventions

        torch = import_torch()
        sdpa = torch.nn.functional.scaled_dot_product_attention
        cells = [_step_alignment(torch), self._kv_heads(), self._float64(), Convention(
            "cache_layout", LAYOUT, "the cache is the caller's: SDPA takes whole key and "
            "value tensors (B, H_kv, S, d); this runner keeps two and grows them per step"),
            Convention("fully_masked_row", "not_applicable", "cannot arise: the runner runs "
                       "causal decodes only (translate refuses any other mask), where every "
                       "query sees at least its own key")]
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


def _step_alignment(torch) -> Convention:
    """A one-query step over a 5-key cache with is_causal=True: which keys does it see?"""
    from conformance.contract.probing import closest, output_with, probe_case
    from conformance.oracle.canonical import case_data

    case = probe_case("cache-step", inputs={"query_len": 1, "key_len": 5})
    data = case_data(case)
    w = {n: torch.tensor(a) for n, a in data.weights.arrays().items()}
    i = data.inputs

    def project(x, wn, bn):
        y = torch.einsum("ble,hed->bhld", torch.tensor(x), w[wn])
        return y + w[bn][None, :, None, :]

    with torch.no_grad():
        heads = torch.nn.functional.scaled_dot_product_attention(
            project(i.query, "wq", "bq"), project(i.key, "wk", "bk"),
            project(i.value, "wv", "bv"), is_causal=True)
        out = to_numpy(torch.einsum("bhtd,hde->bte", heads, w["wo"]) + w["bo"])
    first = np.zeros((1, 5), bool)
    first[0, 0] = True
    return closest("cache_causal_alignment", out, {
        "upper_left": output_with(case, first), "lower_right": output_with(case, None)},
        f"probe_case {case.id}: one query over a 5-key cache with is_causal=True (so the "
        "runner's steps pass no causal flag)")
