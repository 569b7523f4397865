"""returned_weights asked by the ledger of a runner that names harness choices: the weights
its call returns beside the output, under each choice (choices.py).

Its matrix rows run under the harness's own choice only, so they describe that choice
(HF's attention modules, built with attn_implementation="eager", return their softmax
weights; under "sdpa", what a model built from a config gets, the attention function
returns None: transformers/integrations/sdpa_attention.py, sdpa_attention_forward's
`return attn_output, None`).  A small self-attention probe case is asked through the
runner's translate and run, and what the run returned is named: `per_head` (B, H, T, S),
`head_averaged` (B, T, S), `none`.
"""
from __future__ import annotations

from conformance.conventions.axes import Convention
from conformance.conventions.cells import WEIGHT_WORDS
from conformance.conventions.probes.asked import documented, said, unmeasured
from conformance.conventions.probes.choices import under_choices
from conformance.conventions.probes.forms import first_taken, forms


def returned_weights_cell(runner, own: Convention | None = None) -> Convention:
    """The weights the runner's call returns, under each harness choice it names.  `own`
    (the runner's fact of its API, read under its own choice) is not the word: the call
    is."""
    return under_choices(runner, _returned_cell)


def _returned_cell(runner) -> Convention:
    """returned_weights under the runner's own choices: the weights its run returned."""
    needs = dict(runner.probe_needs)  # what its system always applies (QK-norm, a rotation)
    case, got, note = first_taken(runner, forms(
        "returned-weights", mask={"causal": "upper_left"},
        **({"attention": needs} if needs else {})))
    what = f"probe_case {case.id}, causal self-attention{note}"
    if not got.answered:
        return unmeasured("returned_weights", runner, what, got)
    shape = "" if got.attention_weights is None else f" of shape {got.attention_weights.shape}"
    return Convention("returned_weights", WEIGHT_WORDS[got.weights_returned],
                      f"{runner.name}, {said(what, got)}: the call returns "
                      f"{got.weights_returned} weights{shape}",
                      **documented(runner, "returned_weights"))
