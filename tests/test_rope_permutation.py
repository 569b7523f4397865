"""The W_q / W_k row permutation between interleaved (Meta) and half-split (HF) RoPE, proved
on every runner that has RoPE (`"rope" in runner.features`, found in the registry, so the
runners of later branches are covered when they arrive).

For each runner: a grouped-query case (4 query heads, 2 kv heads of 16) in the pairing the
runner takes; its weights permuted with conformance.convert.rope (W_q rows with the query
head count, W_k rows with the kv head count) must give, in the runner, what the oracle gives
for the OTHER pairing with the original weights.  Permuting W_k with the query head count
(the converter bug of ggml-org/llama.cpp#2376, karpathy/llama2.c#286) must not: the test
fails unless that output is far from it.  A runner with a worker (a Keras backend) runs
the check in that worker (workers.call_in_worker).
"""
from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

from conformance.case.loader import parse_case
from conformance.contract.runner import NotExpressible
from conformance.convert.rope import half_split_to_interleaved, interleaved_to_half_split
from conformance.oracle.canonical import case_data
from conformance.oracle.reference import attention
from conformance.runners import load, registry

ROOT = Path(__file__).resolve().parent.parent
AGREE, DIFFER = 1e-4, 1e-2  # float32 runners land ~1e-6 off; the wrong permutation O(0.1)
OTHER = {"half_split": "interleaved", "interleaved": "half_split"}
CONVERT = {"half_split": interleaved_to_half_split, "interleaved": half_split_to_interleaved}


DECODE = {"mask": {"causal": "upper_left"}, "decode": {"prefill": 3, "steps": 2}}


def rope_case(style: str, decode: bool = False, **att):
    """The case; with `decode`, causal and run as a prefill of 3 and 2 steps (a runner that
    only decodes takes it so)."""
    att = dict(att)  # a variant's rope fields (a 2-D grid) join the pairing asked
    mask = att.pop("_mask", {})  # the mask a system always builds (probe_mask_needs)
    extra = DECODE if decode else ({"mask": mask} if mask else {})
    return parse_case({"id": f"rope-permutation-{style}", "attention": {
        "num_heads": 4, "num_kv_heads": 2, "query_features": 64,
        "rope": {"style": style, **att.pop("rope", {})}, **att},
        "inputs": {"batch": 1, "query_len": 5, "self_attention": True, "seed": 3},
        **extra}, "<test>")


def variants(runner) -> list[dict]:
    """The case's attention as the runner can take it: as is; with what its probes need
    (a runner's `probe_attention`: no biases for GPT-J, QK-norm for Qwen3); then without
    grouped heads (GPT-J, GPT-NeoX have none: the wrong key head count cannot show)."""
    own = dict(getattr(runner, "probe_attention", {}))
    # a system whose rotation needs its own settings on every call (probe_needs), or only
    # turns a patch grid (2-D vision rope: the permutation is the same per pair)
    needs = {k: v for k, v in dict(runner.probe_needs).items() if k != "rope"}
    if runner.probe_mask_needs:
        needs["_mask"] = dict(runner.probe_mask_needs)
    if "layer_schedule" in runner.features:  # a system that runs layer i of a schedule
        needs = {**needs, "layer_schedule": ROTATING_LAYER, "_mask": {"causal": "upper_left"}}
    return [{}, own, {**own, "num_kv_heads": 4}, needs, {**needs, "num_kv_heads": 4},
            *(multi_axis(needs) if "multi_axis_rope" in runner.features else [])]


# layer 0 of a schedule of two full (rotating, unwindowed) layers
ROTATING_LAYER = {"layer": 0, "num_layers": 2, "pattern": ["full", "full"],
                  "full": {"rope_base": 1000000}}  # keras_hub fixes 1e6 for full layers


def multi_axis(needs: dict) -> list[dict]:
    """M-RoPE at image-like positions (each layout) and 2-D grids (each layout), for a
    system that turns no 1-D positions: the pairing's permutation is the same per pair."""
    mrope = [{"rope": {"multi_axis": {"kind": "mrope", "layout": layout, "sections": [4, 2, 2],
                                      "positions": [[0, 1, 1, 1, 3], [0, 1, 1, 2, 3],
                                                    [0, 1, 2, 1, 3]]}}, **needs}
             for layout in ("contiguous", "interleaved")]
    return mrope + [{"rope": {"multi_axis": {"kind": "grid_2d", "layout": layout,
                                             "grid": [1, 5]}}, "num_kv_heads": 4, **b}
                    for layout in ("alternating", "shared") for b in ({"bias": False}, {})]


def _rows(w3):  # canonical (heads, E, d) -> (heads*d, E): the (out, in) rows a converter sees
    return w3.transpose(0, 2, 1).reshape(-1, w3.shape[1])


def _heads(rows, heads):  # back to (heads, E, d)
    return rows.reshape(heads, -1, rows.shape[1]).transpose(0, 2, 1)


def permuted(case, style: str, key_heads: int):
    """The canonical data of `case` with W_q, b_q, W_k, b_k rows converted into `style`;
    W_k permuted as if it had `key_heads` heads."""
    data, a = case_data(case), case.attention
    w, conv = data.weights, CONVERT[style]
    wq = _heads(conv(_rows(w.wq), a.num_heads), a.num_heads)
    wk = _heads(conv(_rows(w.wk), key_heads), a.num_kv_heads)
    bq = None if w.bq is None else conv(w.bq.ravel(), a.num_heads).reshape(w.bq.shape)
    bk = None if w.bk is None else conv(w.bk.ravel(), key_heads).reshape(w.bk.shape)

    def norm(g, heads):  # QK-norm scales follow their rows: (d,) one head, (H, d) H heads
        return None if g is None else conv(g.ravel(), 1 if g.ndim == 1 else heads
                                           ).reshape(g.shape)
    return replace(data, weights=replace(w, wq=wq, wk=wk, bq=bq, bk=bk,
                                         q_norm=norm(w.q_norm, a.num_heads),
                                         k_norm=norm(w.k_norm, key_heads)))


def permutation_distances(target: str, params: dict) -> dict:
    """max |runner output - oracle of the other pairing| with the right permutation and with
    the key rows permuted by the query head count; {"refused": reason} when the runner
    takes neither pairing."""
    runner = load(target, params)
    decodes = (False, True) if "decode" in runner.features else (False,)
    tries = [(style, att, dec) for dec in decodes for att in variants(runner)
             for style in ("half_split", "interleaved")]
    for style, att, dec in tries:
        case = rope_case(style, dec, **att)
        translation = runner.translate(case)
        if isinstance(translation, NotExpressible) and runner.probe_translate:
            translation = runner.probe_translate(case)  # the matrix's own limit only
        if not isinstance(translation, NotExpressible):
            break
    else:
        return {"refused": translation.reason}
    want = attention(rope_case(OTHER[style], dec, **att), case_data(case)).output
    a = case.attention
    out = {"grouped": a.num_kv_heads < a.num_heads}
    for label, key_heads in (("right", a.num_kv_heads), ("wrong", a.num_heads)):
        got = runner.run(case, translation, permuted(case, style, key_heads)).output
        out[label] = float(np.max(np.abs(np.asarray(got, np.float64) - want)))
    return {"style": style, **out}


def rope_runners() -> list:
    """Every runner with RoPE but MLA's: its rotary slice has its own permutation
    (convert/mla.rope_rows, proved in tests/test_mla_runners.py)."""
    found = []
    for target, params in registry():
        runner = load(target, params)
        if "rope" in runner.features and "mla" not in dict(runner.probe_needs):
            found.append(pytest.param(target, params, id=runner.name))
    return found


def _in_worker(runner, target: str, params: dict) -> dict:
    """permutation_distances in the runner's own worker (the matrix's, warm in a full run)."""
    from conformance.run.workers import call_in_worker

    return call_in_worker(runner, "tests.test_rope_permutation:permutation_distances",
                          target, params)


@pytest.mark.parametrize("target,params", rope_runners())
def test_permuted_weights_swap_the_pairing(target, params):
    runner = load(target, params)
    if runner.available():
        pytest.skip(runner.available())
    found = (_in_worker(runner, target, params) if runner.worker
             else permutation_distances(target, params))
    assert "refused" not in found, f"{runner.name} has 'rope' but refused both: {found}"
    assert found["right"] < AGREE, (
        f"{runner.name}: {found['style']} attention with permuted W_q/W_k is "
        f"{found['right']:.1e} from {OTHER[found['style']]} attention with W")
    assert not found["grouped"] or found["wrong"] > DIFFER, (
        f"{runner.name}: W_k permuted with the query head count went unnoticed "
        f"({found['wrong']:.1e})")


def test_some_runner_has_rope():
    """The parametrisation is not empty (an empty one would pass vacuously)."""
    assert rope_runners()


def test_the_wrong_head_count_changes_the_oracle_too():
    """The check is sound without any runner: in the oracle, the right permutation swaps
    the pairing exactly and the wrong one does not."""
    case = rope_case("half_split")
    want = attention(rope_case("interleaved")).output
    right = attention(case, permuted(case, "half_split", 2)).output
    wrong = attention(case, permuted(case, "half_split", 4)).output
    assert np.max(np.abs(right - want)) < 1e-12
    assert np.max(np.abs(wrong - want)) > DIFFER
