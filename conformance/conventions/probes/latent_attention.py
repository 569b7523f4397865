"""mla_rope_slice, owned by the ledger: which dims of each head's query and key a
multi-head latent attention rotates.

DeepSeek-V2 / V3 split every query head into [nope | rope] and rotate the LAST
qk_rope_head_dim dims; the key's rope slice is one head (x W_kr) broadcast to every head
and placed last too (transformers/models/deepseek_v3/modeling_deepseek_v3.py#L443, #L462,
#L421-L423; mlx_lm/models/deepseek_v3.py#L131: mx.split(q, [qk_nope_head_dim])).  A port
that takes the first dims as the rope slice computes other scores at every position but 0.

Asked of a runner whose features hold `mla`: an MLA probe case (2 heads of 4 + 4, a
latent of 4, no query latent, self-attention T = S = 4 at positions 7..10, the system's
own pairing) through its translate and run, in the first form it takes; its output is read
against the float64 oracle with the slice last (`last`) and first (`first`,
oracle/latent_attention.output(rope_first=True)).  Neither within NEAR: `other`, both
distances quoted; the two within the probe's resolution: the tie is named.
"""
from __future__ import annotations

from conformance.conventions.axes import Convention
from conformance.conventions.probes.asked import NEAR, documented, said, unmeasured
from conformance.conventions.probes.forms import first_taken
from conformance.conventions.probes.needs import needed_forms
from conformance.conventions.probes.positions import native_style
from conformance.conventions.probes.probing import closest, distances
from conformance.oracle import latent_attention
from conformance.oracle.canonical import case_data

AXIS = "mla_rope_slice"
OTHER = "other"
SLICES = ("last", "first")


def probe_cases(runner) -> list:
    """The MLA probe case in each form the runner may take (needs.needed_forms)."""
    rope = {"style": native_style(runner), "rotary_dim": 4}
    return needed_forms(runner, "mla-rope-slice", attention={
        "num_heads": 2, "query_features": 8, "qk_head_dim": 8, "v_head_dim": 4,
        "bias": False, "rope": rope, "mla": {"kv_lora_rank": 4, "qk_rope_head_dim": 4}},
        inputs={"self_attention": True, "query_len": 4, "key_len": 4, "position_offset": 7})


def readings(case) -> dict:
    data = case_data(case)
    return {s: latent_attention.output(case, data, rope_first=s == "first") for s in SLICES}


def mla_rope_slice_cell(runner, own: Convention | None = None) -> Convention:
    """The slice whose rotation the system's output matches (the module's docstring)."""
    case, got, note = first_taken(runner, probe_cases(runner))
    what = (f"{runner.name}, probe_case {case.id}, 2 heads of 4 unrotated + 4 rotated, "
            f"positions 7..10{note}")
    if not got.answered:
        return unmeasured(AXIS, runner, what, got)
    candidates = readings(case)
    d = distances(got.output, candidates)
    if min(d.values()) >= NEAR:
        figures = "; ".join(f"{k} {v:.1e}" for k, v in d.items())
        return Convention(AXIS, OTHER, f"{said(what, got)}: no reading within {NEAR:g}: "
                          f"{figures}", **documented(runner, AXIS))
    return closest(AXIS, got.output, candidates, said(what, got), **documented(runner, AXIS))
