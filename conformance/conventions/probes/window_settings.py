"""window_width condition by condition, owned by the ledger: for a system whose window is a
setting of a configuration read by its own mask builder (the HF decoder configs'
sliding_window, which the model's builder reads differently with is_causal=False, and
Qwen3's use_sliding_window / max_window_layers), not one argument of one call. The runner
names its settings (`window_settings(w)`: label -> whether the setting's builder is the
causal one) and answers each (RawCall "window_setting": {"window": w, "setting": label})
on self-attention over 8 positions, with the causal mask where the setting's builder is
causal; each output is read against every reading of w (conventions/probes/cache_probes.py: w, w +
1, 2w + 1, 2w - 1 keys, no window). One reading under every setting is the cell (the case
carries the runner's probe_needs, needs.py); readings that differ by setting are
`depends`, each setting named with its reading and its distances; a window that never
bites is `ignored`. Asked of the runners that answer RawCall window_setting (table.py)
(its first raw way is the window number, windows.py).
"""
from __future__ import annotations

from conformance.conventions.probes import cache_probes as cp
from conformance.conventions.axes import DEPENDS, IGNORED, Convention
from conformance.conventions.probes.probing import closest, probe_case
from conformance.contract.runner import RawCall
from conformance.conventions.probes.asked import documented, unmeasured
from conformance.conventions.probes.needs import with_needs
from conformance.conventions.probes.request import ask_raw

W = 3


def window_case(runner, causal: bool):
    """cache_probes.window_case with what the system applies on every call (probe_needs:
    Qwen3's QK-norm) under its attention section."""
    return probe_case("window", attention=with_needs(runner, {}),
                      inputs={"self_attention": True, "query_len": 8, "key_len": 8},
                      mask={"causal": "upper_left"} if causal else {})


def window_settings_cell(runner, own: Convention | None = None) -> Convention:
    settings = dict(runner.window_settings(W))
    doc = documented(runner, "window_width")
    words, texts = {}, []
    for label, causal in settings.items():
        case = window_case(runner, causal)
        got = ask_raw(runner, case, RawCall("window_setting", {"window": W, "setting": label}))
        if not got.answered:
            return unmeasured("window_width", runner, f"probe_case {case.id}, {label}", got)
        cell = closest("window_width", got.output, cp.window_candidates(case, W), got.call,
                       **doc)
        words[label] = IGNORED if cell.value == "no window" else cell.value
        texts.append(f"{words[label]}: {cell.evidence}")
    if not words:
        return Convention("window_width", "not_probed", f"{runner.name} names no window "
                          "setting (window_settings)")
    seen = set(words.values())
    value = seen.pop() if len(seen) == 1 else DEPENDS
    return Convention("window_width", value, f"{runner.name}, self-attention over 8 "
                      f"positions, window {W} by each setting (w_keys = the query and w - 1 "
                      f"before it): {' | '.join(texts)}", **doc)
