"""The case fields of today's positions and heads, each read and validated by its own
module, which is imported only when a case names its field:

    attention.rope.multi_axis    multi_axis_rope.py   M-RoPE sections (t, h, w), 2-D grids
    attention.layer_schedule     layer_schedule_read.py  per-layer rope bases, windows, NoPE
    attention.temperature        chunked.py           Llama 4's attention temperature
    mask.chunk                   chunked.py           block-diagonal chunks of keys
    attention.mla                latent_attention.py  multi-head latent attention (MLA)
    attention.relative_bias      relative_bias.py     T5's bucketed relative position bias
    attention.output_gate        output_gate.py       a gate on each head's output

Each module's `read(r, att, inp, mask) -> (att, mask)` returns the case's attention and
mask with its field set; `r` is loader._Reader (`r.fail` names file, case and field).
"""
from __future__ import annotations

import importlib
from typing import Mapping

# (section, key, module under conformance.case): the order fields are read in
READERS = (
    ("rope", "multi_axis", "multi_axis_rope"),
    ("attention", "layer_schedule", "layer_schedule_read"),
    ("attention", "temperature", "chunked"),
    ("mask", "chunk", "chunked"),
    ("attention", "mla", "latent_attention"),
    ("attention", "relative_bias", "relative_bias"),
    ("attention", "output_gate", "output_gate"),
)


def _named(r, section: str, key: str) -> bool:
    if section == "rope":
        rope = r.section("attention").get("rope")
        return isinstance(rope, Mapping) and rope.get(key) is not None
    return r.section(section).get(key) is not None


def read(r, att, inp, mask):
    """`att` and `mask` with every field of READERS the case names read into them."""
    done: set[str] = set()
    for section, key, module in READERS:
        if module in done or not _named(r, section, key):
            continue
        done.add(module)
        att, mask = importlib.import_module(f"conformance.case.{module}").read(r, att, inp, mask)
    return att, mask
