"""The facts a runner reads of its system's API, part of the runner contract (runner.py).

A runner describes its API in its own terms (what its size arguments count, what its call
returns, which arguments it has) and never names an axis of the conventions ledger; the
ledger's table of axes files each fact under the axis it is evidence for and confirms
what it can ask (conventions/probes/api_facts.py).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Mapping

# The words every axis takes besides its own (conventions/axes.py): one rule for every axis,
# so a setting silently dropped, a kernel's refusal and a harness limit never share a word.
NA = "not_applicable"  # the system has no such argument or path (its signature or schema says)
REFUSED = "refused"  # the system's own error (the evidence quotes its message)
IGNORED = "ignored"  # accepted, and the output does not move (the evidence quotes the
# argument and the unchanged distance)
NOT_PROBED = "not_probed"  # the suite cannot measure it here (the evidence says why)
DEPENDS = "depends"  # the measurements differ by condition (the evidence lists each)
UNIVERSAL = (IGNORED, REFUSED, NA, NOT_PROBED, DEPENDS)

# What a runner may report of its system's API (ApiFact.about), each named for the thing in
# the API it describes: a runner speaks of its API in these terms, and the table of axes
# (conventions/probes/table.py, Entry.fact) files each under the axis it is evidence for.
API_FACTS: Mapping[str, str] = {
    "head_size_from": "what its size arguments count, read from a weight's shape",
    "tensor_layout": "the axis order its documented call reads a 3-D input in",
    "inputs_order": "the positional order of query, key and value in its call",
    "weights_returned": "what its call returns besides the output",
    "mask_on_tensor": "whether an input tensor carries a mask its call reads",
    "padding_argument": "its key-padding argument, or the lack of one",
    "mask_argument": "its boolean attention-mask argument, or the lack of one",
    "float_mask_argument": "its additive float mask argument, or the lack of one",
    "causal_argument": "its causal switch, or the lack of one",
    "parameter_count": "its own count of parameters",
    "weight_names": "its names and shapes of the query projection",
    "cache_tensor_layout": "the shapes of the cache tensors its decode returns",
    "alibi_argument": "its ALiBi argument, or the lack of one",
    "masked_score": "the number it writes into a masked score, where its graph shows it",
    "dropout_argument": "its dropout argument, or the lack of one",
    "weights_under_dropout": "its returned weights under dropout, or the lack of them",
    "unbatched_call": "its call with a 2-D input, or the lack of one",
    "dtype_mixing": "its call with inputs of two float types, or the lack of one",
    "window_argument": "its sliding-window argument, or the lack of one",
    "no_key_row": "what its schema or source states for a row no key may attend",
}


@dataclass(frozen=True)
class ApiFact:
    """One thing a runner read of its system's API itself (its signature, its schema, its
    return, one native call), under the name of what it describes (API_FACTS).  Runners
    never name the ledger's axes: the ledger files each fact under its axis and confirms
    what it can ask (conventions/probes/api_facts.py); what the system's documentation
    states is data (the `documented:` section of expectations/<runner>.yaml)."""

    about: str  # a key of API_FACTS
    value: str  # a word of the vocabulary of the axis it is filed under (conventions/axes.py)
    evidence: str  # what was read or run and what it showed

    def __post_init__(self):
        if self.about not in API_FACTS:
            raise ValueError(f"ApiFact about {self.about!r}: not one of API_FACTS "
                             f"({', '.join(API_FACTS)})")
