"""HuggingFace GPT-2: `GPT2Attention`.

Conv1D stores its weight (in, out) (the transpose of nn.Linear), and the query,
key and value projections are one fused `c_attn` Conv1D(3E, E): weight (E, 3E)
= [W_q | W_k | W_v], heads as contiguous column blocks; `c_proj` Conv1D(E, E).
head_dim = embed_dim // num_heads ("`embed_dim` must be divisible by
num_heads" otherwise), biases always, scale head_dim**-0.5
(scale_attn_weights).  GPT-2 is a causal LM: GPT2Model always builds a causal
mask and GPT2Attention sets is_causal = not is_cross_attention.  So only causal
self-attention with d = E / H, output width E and biases is expressible.  The
module is called as GPT2Model calls it on the eager path: the causal (and
padding) mask as an additive (B, 1, T, S) float mask.  Alone, with eager and
attention_mask=None, the module is NOT causal (the eager function only adds
the mask it is given); with sdpa and attention_mask=None it is (is_causal).
"""
from __future__ import annotations

from dataclasses import replace

import numpy as np

from conformance.contract.runner import harness_limit
from conformance.runners.hf.common import SOURCE, SizeFacts
from conformance.runners.hf.declared import Refusals
from conformance.runners.hf.declared import ConfigBuild
from conformance.runners.hf.probed import ProbedHFRunner

GPT2_SOURCE = SOURCE + "gpt2/modeling_gpt2.py"


def in_out(w: np.ndarray) -> np.ndarray:
    """(H, E_in, d) -> Conv1D's (E_in, H*d): head h = columns h*d:(h+1)*d."""
    return w.transpose(1, 0, 2).reshape(w.shape[1], -1)


class HFGpt2(ProbedHFRunner):
    probe_mask_needs = {"causal": "upper_left"}  # GPT2Model always builds a causal mask
    name = "hf.gpt2"
    system = "transformers.models.gpt2.modeling_gpt2.GPT2Attention"
    backend = "eager"
    typed_system = "hf.gpt2"
    # the runner builds "eager"; a model built from its config gets "sdpa", which reads a
    # causal switch eager ignores: the ledger measures both (conventions/probes/choices.py)
    harness_choices = {"attn_implementation": ("eager", "sdpa")}
    description = "`GPT2Attention` (fused Conv1D `c_attn`, causal)"

    refusals = Refusals(
        "GPT2Attention(is_cross_attention=True) takes one encoder_hidden_states",
        width_fixed="GPT2Attention sets head_dim = embed_dim // num_heads",
        fixed_bias=(True, "Conv1D always holds a bias; GPT2Config has no switch for it"),
        scale_why="a scale other than 1/sqrt(head_dim): GPT2Config has scale_attn_weights "
        "(on/off) only")

    def model_limits(self, case):
        return (None if case.mask.causal != "none" else harness_limit(  # the eager
                # GPT2Attention adds the mask it is given, causal or not
                "not causal: GPT-2 is a causal LM (GPT2Model always builds a causal mask, "
                "GPT2Attention.is_causal = not is_cross_attention); only causal "
                "self-attention is GPT-2's"))

    def raw_limits(self, case):
        """A raw argument is the whole mask of the call: GPT2Attention on the eager path adds
        the mask it is given and applies no causal mask of its own (attention_mask=None is
        not causal), so the matrix rows' causal-only limit is not the module's."""
        causal = replace(case, mask=replace(case.mask, causal="upper_left"))
        return self.limits(causal)

    config_fields = {"n_embd": "query_features", "n_head": "num_heads"}
    call_template = "GPT2Attention(GPT2Config({args}))"
    config_build = ConfigBuild("gpt2", "GPT2Config", "GPT2Attention", dropout="attn_pdrop",
                               residual_dropout="resid_pdrop")

    def state(self, case, weights):
        return {"c_attn.weight": np.concatenate([in_out(weights.wq), in_out(weights.wk),
                                                 in_out(weights.wv)], axis=1),
                "c_attn.bias": np.concatenate([weights.bq.ravel(), weights.bk.ravel(),
                                               weights.bv.ravel()]),
                "c_proj.weight": weights.wo.reshape(-1, weights.wo.shape[-1]),
                "c_proj.bias": weights.bo}

    def notes(self, case, module):
        return ["causal mask passed as GPT2Model builds it for eager (additive (B, 1, T, S)); "
                "the module alone with eager and attention_mask=None is not causal"]

    sizes = SizeFacts("derived_from_width", f"{GPT2_SOURCE}#L76", "c_attn.weight",
                      "in x out (Conv1D), [W_q | W_k | W_v]",
                      "Conv1D computes x @ weight + bias: (in, out), the transpose of "
                      "nn.Linear; q, k, v fused along the columns", "4E^2 + 4E")
