"""cache_causal_alignment and cache_layout, owned by the ledger, through the runner's own
decode: a probe case with a prefill of 3 and one step (conventions/probes/cache_probes.py: the
readings) is asked of the runner (its translate and run: the system's cache, called as its
users call it).  The step is named by the alignment it matches (lower_right: the cache and
itself; upper_left: key 0 only), the prefill quoted against the causal forward; where the
runner also answers the step with the system's causal switch passed (RawCall
`step_is_causal`), what that flag attends is quoted as a causal_flag fact beside the cell.
The layout is read from the cache tensors the runner's run reports (its Observation's
extras: `cache_shapes` after the prefill and after the step, `cache_tensors`,
`cache_preallocated`, `cache_layout`).
"""
from __future__ import annotations

from conformance.conventions.probes import cache_probes as cp
from conformance.conventions.axes import NOT_PROBED, Convention
from conformance.conventions.probes.probing import probe_case
from conformance.contract.runner import RawCall
from conformance.conventions.probes.asked import documented, said, unmeasured
from conformance.conventions.probes.request import ask, ask_raw


def decode_probe_case(runner=None):
    """cache_probes.decode_case (causal self-attention over 3 + 1 positions) with its
    decode section: a prefill of 3, one step; with what the runner's system applies on
    every call (Runner.probe_needs: T5's bias-free scale 1.0, GPT-J's rotation)."""
    needs = dict(runner.probe_needs) if runner is not None else {}
    return probe_case("cache-step", mask={"causal": "upper_left"},
                      **({"attention": needs} if needs else {}),
                      inputs={"self_attention": True, "query_len": cp.PREFILL + 1,
                              "key_len": cp.PREFILL + 1},
                      decode={"prefill": cp.PREFILL, "steps": 1})


def cache_causal_alignment_cell(runner, own: Convention | None = None) -> Convention:
    case = decode_probe_case(runner)
    what = f"probe_case {case.id}"
    got = ask(runner, case)
    if not got.answered:
        return unmeasured("cache_causal_alignment", runner, what, got)
    cell = cp.cache_alignment(case, got.output[:, -1:], f"{runner.name}, {said(what, got)}",
                              got.output[:, :-1],
                              **documented(runner, "cache_causal_alignment"))
    flag = ask_raw(runner, case, RawCall("step_is_causal", True))
    if flag.answered:
        cell = cp.with_fact(cell, cp.flag_fact(case, flag.output[:, -1:], flag.call))
    return cell


def cache_layout_cell(runner, own: Convention | None = None) -> Convention:
    case = decode_probe_case(runner)
    what = f"probe_case {case.id}"
    got = ask(runner, case)
    if not got.answered:
        return unmeasured("cache_layout", runner, what, got)
    shapes = [tuple(s) for s in got.extras.get("cache_shapes", ())]
    if not shapes:
        return Convention("cache_layout", NOT_PROBED, f"{runner.name}, {said(what, got)}: "
                          "its run reports no cache tensor shapes")
    word = cp.layout_words(case, shapes, got.extras.get("cache_tensors", "cache tensors"),
                           preallocated=bool(got.extras.get("cache_preallocated")))
    return Convention("cache_layout", word, f"{runner.name}, {said(what, got)}: backing key "
                      f"tensor {' -> '.join(str(s) for s in shapes)} after the prefill and the "
                      f"step; {got.extras.get('cache_note', '')}".rstrip("; "),
                      **documented(runner, "cache_layout"))
