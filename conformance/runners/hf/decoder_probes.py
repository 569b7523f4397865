"""Ledger probes of the HF decoder runners of #20 (decoding.py): window_width through the
model's mask builder (also Qwen3's, whose config takes a window the matrix does not use),
softcap and softcap_order (Gemma2's attn_logit_softcapping), sinks (GPT-OSS's per-head
sink logits).  Each builds the runner's own module from its config call with the probed
setting, passes what its model would pass and names the reading of the oracle the output
matches (every distance quoted).  torch is imported by common.py.
"""
from __future__ import annotations

from dataclasses import replace

import numpy as np

from conformance.contract import cache_probes as cp
from conformance.contract.axes import DEPENDS, IGNORED
from conformance.contract.probing import closest, probe_case, probe_mask
from conformance.contract.runner import Convention, to_numpy
from conformance.oracle.canonical import case_data
from conformance.oracle.reference import attention
from conformance.runners.hf.common import import_torch

MASKING = ("https://github.com/huggingface/transformers/blob/v5.24.0/src/transformers/"
           "masking_utils.py")
CAP = 1.0  # a softcap that bites on O(1) scores
FILL = -2.0  # a finite additive mask: softcap(s) + m and softcap(s + m) differ


def _module(runner, case, **settings):
    """(torch, the runner's module for `case` with config `settings` added, its input)."""
    torch = import_torch()
    data = case_data(case)
    plan = {**runner.config_call(case)[1], "attn_implementation": runner.attn_implementation,
            "dropout": 0.0, **settings}
    module = runner.module_for(torch, case, plan, data.weights)
    return torch, module, torch.tensor(data.inputs.query, dtype=torch.float32)


def _case(runner, probe: str, **sections):
    att = {"num_heads": 2, "query_features": 8, **runner.probe_attention,
           **sections.pop("attention", {})}
    inputs = {"self_attention": True, "query_len": 8, "key_len": 8, **sections.pop("inputs",
                                                                                  {})}
    return probe_case(probe, attention=att, inputs=inputs, **sections)


def window_runs(runner, w: int) -> list[tuple[str, dict, bool]]:
    """(the config's window keywords, the settings added to the plan, causal case) of each
    condition the window probe measures: the causal builder (the models' default) and a
    config with is_causal=False (the bidirectional builder).  A runner may add its own
    (`window_conditions`: Qwen3's layer below max_window_layers)."""
    runs = [(f"sliding_window={w}", {"sliding_window": w}, True),
            (f"sliding_window={w}, is_causal=False", {"sliding_window": w, "is_causal": False},
             False)]
    return runs + list(getattr(runner, "window_conditions", lambda w: [])(w))


def window_width(runner, w: int = 3) -> Convention:
    """sliding_window = w set through the runner's config, the mask from the model's own
    builder for layer 0 (masking_utils), each condition of window_runs measured against the
    oracle under every reading of w.  One reading everywhere: that reading; readings that
    differ by condition: `depends` (each condition, its reading and its distances); a
    window that never bites: `ignored`."""
    words, texts = {}, []
    for config, settings, causal in window_runs(runner, w):
        case = _case(runner, "window", mask={"causal": "upper_left"} if causal else {})
        torch, module, x = _module(runner, case, **settings)
        builder = runner.mask_builder(module.config).__name__
        with torch.no_grad():
            mask = runner.built_mask(torch, case, module, x)
            out = to_numpy(runner.forward(module, x, mask)[0])
        cell = closest("window_width", out, cp.window_candidates(case, w),
                       f"{runner.window_call(config)}, {builder}")
        word = IGNORED if cell.value == "no window" else cell.value
        words[config] = word
        texts.append(f"{word}: {cell.evidence}")
    seen = set(words.values())
    value = seen.pop() if len(seen) == 1 else DEPENDS
    return Convention("window_width", value, f"{runner.name}, the mask from the model's "
                      "builder for layer 0 (8 positions; w_keys = the query and w - 1 before "
                      f"it): {' | '.join(texts)}", documented_source=f"{MASKING}#L90-L98")


def softcap(runner) -> Convention:
    """attn_logit_softcapping = CAP, no mask: the capped oracle or the uncapped one."""
    case = _case(runner, "softcap", attention={"softcap": CAP}, inputs={"query_len": 4,
                                                                        "key_len": 4})
    torch, module, x = _module(runner, case)
    with torch.no_grad():
        out = to_numpy(runner.forward(module, x, None)[0])
    plain = replace(case, attention=replace(case.attention, softcap=None))
    return closest("softcap", out, {"applied": attention(case).output,
                                    "ignored": attention(plain).output},
                   f"{runner.name}: {runner.model}Config(attn_logit_softcapping={CAP}), no mask")


def softcap_order(runner) -> Convention:
    """attn_logit_softcapping = CAP with a finite additive mask 0 / FILL passed raw."""
    case = _case(runner, "softcap-order", mask={"attn_mask": {"random": 0.5}},
                 inputs={"query_len": 5, "key_len": 5})
    add = np.where(probe_mask(case), 0.0, FILL)
    torch, module, x = _module(runner, case, attn_logit_softcapping=CAP)
    with torch.no_grad():
        m = torch.tensor(add[:, None], dtype=torch.float32)
        out = to_numpy(runner.forward(module, x, m)[0])
    return cp.softcap_order(case, CAP, add, out, f"{runner.name}: {runner.model}Config("
                            f"attn_logit_softcapping={CAP}), attention_mask (B, 1, T, S)",
                            documented="before_mask",
                            documented_source=f"{runner.rope_source.split('#')[0]}#L195-L200")


def sinks(runner) -> Convention:
    """The canonical sink logits loaded into the module: the oracle with them or without."""
    case = _case(runner, "sinks", attention={"sinks": True}, inputs={"query_len": 4,
                                                                     "key_len": 4})
    data = case_data(case)
    out = runner.run(case, runner.translate(case), data).output
    plain = replace(case, attention=replace(case.attention, sinks=False))
    without = attention(plain, replace(data, weights=replace(data.weights, sinks=None)))
    return closest("sinks", out, {"applied": attention(case, data).output,
                                  "ignored": without.output},
                   f"{runner.name}: the module's sinks parameter set to seeded logits, no mask")


def decoder_cells(runner) -> list[Convention]:
    """The cells of the features the runner translates."""
    cells = []
    if "window" in runner.features:
        cells.append(window_width(runner))
    if "softcap" in runner.features:
        cells += [softcap(runner), softcap_order(runner)]
    if "sinks" in runner.features:
        cells.append(sinks(runner))
    return cells
