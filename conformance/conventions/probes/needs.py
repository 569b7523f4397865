"""A probe case in every form a system may take, with what the system applies on every call.

`needed_forms(runner, name, **sections)` is forms.forms(name, **sections) (as written, as
self-attention, with the head size derived from the width) followed by the same forms of
the probe case with the runner's `probe_needs` (Runner.probe_needs: the attention fields
its system applies on every call, e.g. Qwen3's RMS QK-norm, MPT's ALiBi with no bias;
and `probe_mask_needs`, the mask fields, e.g. GPT-2's causal mask) merged under the probe's
own fields: a field the probe sets keeps the probe's value (a
nested section such as rope is merged key by key, the probe's keys winning).  Asked with
forms.first_taken, a runner that takes the written case is asked nothing else, so its
cell is the written case's; the forms with the needs are asked only where every plain
form is inexpressible (or refused at run time: forms.first_taken).

A runner whose kernel refuses small head sizes declares `probe_head_size` (onnxruntime's
CPU GroupQueryAttention: multiples of 8, 16 to rotate, cos_cache widths of 8): last come
the forms with the needs at that head size (d_k = d_v = probe_head_size, a rotary width
scaled by the same factor), asked only where every earlier form was refused or
inexpressible, so a probe that fixes its own small head size reaches the kernel.
"""
from __future__ import annotations

from conformance.case.model import CaseError
from conformance.conventions.probes.forms import NEEDS_SUFFIX, forms

HEAD_SUFFIX = NEEDS_SUFFIX + "-head-size"  # the forms at the runner's probe_head_size


def with_needs(runner, attention: dict) -> dict:
    """`attention` with the runner's probe_needs under it (the probe's fields win)."""
    needs = dict(runner.probe_needs)
    out = {**needs, **attention}
    for key, value in needs.items():
        if isinstance(value, dict) and isinstance(attention.get(key), dict):
            out[key] = {**value, **attention[key]}
    return out


def needed_forms(runner, name: str, raw: bool = False, **sections) -> list:
    """The probe case's forms (forms.forms), then its forms with probe_needs (and, unless
    the probe passes an argument `raw`, probe_mask_needs: a raw argument is the whole mask
    of its call) where they change the case and make a valid one."""
    cases = forms(name, **sections)
    attention = dict(sections.get("attention", {}))
    needed = with_needs(runner, attention)
    mask_needs = {} if raw else runner.probe_mask_needs
    mask = {**mask_needs, **sections.get("mask", {})}
    masked = {**sections, "mask": mask} if mask else dict(sections)
    if needed != attention or mask != sections.get("mask", {}):
        try:
            cases += forms(name + NEEDS_SUFFIX, **{**masked, "attention": needed})
        except CaseError:  # the needs contradict the probe's sizes: the plain forms only
            pass
    sized = at_head_size(runner, needed, cases[0].attention.qk_head_dim)
    if sized is None:
        return cases
    try:
        return cases + forms(name + HEAD_SUFFIX, **{**masked, "attention": sized})
    except CaseError:
        return cases


def at_head_size(runner, attention: dict, written: int) -> dict | None:
    """`attention` at the runner's probe_head_size (d_k = d_v, a rotary width scaled by
    the same factor), or None where it declares none or the written head size is it."""
    d = runner.probe_head_size
    if not d or d == written:
        return None
    out = {**attention, "qk_head_dim": d, "v_head_dim": d}
    rope = out.get("rope")
    if isinstance(rope, dict) and rope.get("rotary_dim"):
        out["rope"] = {**rope, "rotary_dim": rope["rotary_dim"] * d // written}
    return out
