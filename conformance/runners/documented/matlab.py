"""MATLAB `selfAttentionLayer`: a documented model, not an execution.

MATLAB cannot run here, so this runner is a *model* (Observation.executed =
False): it translates the case into the call a MATLAB user types, holds the
canonical weights in the layout MATLAB's documentation and users' checks
describe, and evaluates the documented algorithm in NumPy float64.  Its
numbers therefore test the translation and the layout (sizes, head split,
weight orientation, score layout), never MATLAB's arithmetic; its parameter
count is the sum of the documented property sizes.

What each convention rests on ([doc] = MathWorks documentation, [forum] =
a MATLAB Answers reproduction, [inferred] = deduced, checked by arithmetic):
- selfAttentionLayer(numHeads, numKeyChannels): NumKeyChannels is the TOTAL
  over heads, "divisible by NumHeads" [doc, SELF_ATTENTION]; NumValueChannels
  "auto" means "Use NumKeyChannels" [doc]; 4 x 784 and 8 x 392 on 3136
  features hold "9.8 M" and "4.9 M" parameters, which only a total count
  gives [forum, MATLAB_ANSWERS: 9,839,984 and 4,921,560].
- OutputSize defaults to the input channel count [inferred: the counts above
  need OutputWeights 3136 x 784].
- Weights act as W*X on X (channels x time): QueryWeights is NumKeyChannels x
  InputSize ("out x in", like PyTorch), head i is the contiguous channel block
  (i-1)*d+1 : i*d, scores are k_i' * q_i / sqrt(d_k) (keys x queries, softmax
  over the keys), heads are concatenated in order, then OutputWeights *
  concat + OutputBias [forum, HOW_IT_WORKS: matches MATLAB to 4 decimals].
- Scale 1/sqrt(D) with D "the number of channels of the keys divided by
  NumHeads", i.e. per head [doc, attentionLayer: ATTENTION_LAYER].
- The score output is numKeys x numQueries x numHeads x batch [doc, attention():
  ATTENTION_FUNCTION]; it is transposed back to (B, H, T, S) for comparison.
- dlarray holds single, double or logical data [doc, EXTRACTDATA]: float16
  and bfloat16 are not expressible.
- Causal cases: AttentionMask is a documented option [doc, SELF_ATTENTION]; its
  value "causal" is taken from users' code [forum], read as the usual lower
  triangle (query t sees keys 1..t; in self-attention T == S, so both
  alignments of the suite agree).
Not documented in any page we could read, so not modelled (not expressible,
with that reason): the padding mask's effect on padded *query* positions, a
custom AttentionMask array, fully masked rows, layers without biases.
"""
from __future__ import annotations

import numpy as np

from conformance.runners.documented.common import DocumentedModel

SELF_ATTENTION = "https://www.mathworks.com/help/deeplearning/ref/nnet.cnn.layer.selfattentionlayer.html"
ATTENTION_LAYER = "https://www.mathworks.com/help/deeplearning/ref/nnet.cnn.layer.attentionlayer.html"
ATTENTION_FUNCTION = "https://www.mathworks.com/help/deeplearning/ref/dlarray.attention.html"
EXTRACTDATA = "https://www.mathworks.com/help/deeplearning/ref/dlarray.extractdata.html"
MATLAB_ANSWERS = ("https://www.mathworks.com/matlabcentral/answers/2179666-how-the-number-of-"
                  "parameters-is-calculated-if-multihead-self-attention-layer-is-used-in-a-cnn-model")
HOW_IT_WORKS = ("https://www.mathworks.com/matlabcentral/answers/2068686-how-does-"
                "selfattentionlayer-work-implementing-validation-with-brief-code")
MATLAB_TYPES = {"float32": "single", "float64": "double"}
MODEL_NOTE = ("documented model, not executed: MATLAB's layout and algorithm evaluated in NumPy "
              "float64; checks the translation, the layout and the parameter accounting, not "
              "MATLAB's arithmetic")


def limitation(case) -> str | None:
    """Why selfAttentionLayer cannot express the case (or why we do not model it)."""
    a, i, m = case.attention, case.inputs, case.mask
    if not i.self_attention:
        return ("selfAttentionLayer has one input X (queries, keys and values all come from "
                "it); separate query/key/value inputs need attentionLayer, which holds no "
                f"weights of its own ({ATTENTION_LAYER})")
    if case.grouped:
        return (f"grouped-query attention (num_kv_heads={a.num_kv_heads} < num_heads="
                f"{a.num_heads}): selfAttentionLayer(numHeads, numKeyChannels) as documented "
                f"has one key/value head per query head ({SELF_ATTENTION})")
    if not a.bias:
        return ("no documented option removes selfAttentionLayer's QueryBias, KeyBias, "
                "ValueBias and OutputBias (and the documented parameter counts include them)")
    if i.dtype not in MATLAB_TYPES:
        return (f"{i.dtype}: a dlarray holds single, double or logical data "
                f"({EXTRACTDATA})")
    if m.key_padding is not None:
        return ("key padding: HasPaddingMaskInput masks the queries as well as the keys (the "
                "layer 'uses or ignores elements of the queries, keys, and values', "
                f"{ATTENTION_LAYER}); what it outputs at padded query positions is not "
                "documented, so this model does not guess")
    if m.attn_mask_density is not None or m.attn_mask_matrix is not None or m.masked_rows:
        return ("an explicit attention mask: a custom AttentionMask array is not documented "
                "in the pages this model cites (only \"causal\"); not modelled")
    return None


def matlab_call(case) -> tuple[str, dict]:
    """selfAttentionLayer(numHeads, numKeyChannels, Name=Value...) with only the
    options that differ from their defaults."""
    a = case.attention
    key_channels, value_channels = a.num_heads * a.qk_head_dim, a.num_heads * a.v_head_dim
    kwargs: dict = {"NumHeads": a.num_heads, "NumKeyChannels": key_channels}
    options = []
    if value_channels != key_channels:
        kwargs["NumValueChannels"] = value_channels
        options.append(f"NumValueChannels={value_channels}")
    if a.output_features != a.query_features:
        kwargs["OutputSize"] = a.output_features
        options.append(f"OutputSize={a.output_features}")
    if case.mask.causal != "none":  # self-attention: T == S, both alignments agree
        kwargs["AttentionMask"] = "causal"
        options.append('AttentionMask="causal"')
    call = f"selfAttentionLayer({a.num_heads},{key_channels}"
    return call + "".join(f",{o}" for o in options) + ")", kwargs


def matlab_weights(weights) -> dict[str, np.ndarray]:
    """Canonical per-head arrays -> MATLAB's learnable properties (out x in, head i =
    the contiguous channel block i): the converter's MATLAB layout, one definition."""
    from conformance.convert import to_matlab

    return to_matlab(weights)


def forward(p: dict[str, np.ndarray], x: np.ndarray, num_heads: int, causal: bool):
    """The documented algorithm on one observation X (channels x time).
    Returns Y (OutputSize x T) and the scores (numKeys x numQueries x numHeads)."""
    q = p["QueryWeights"] @ x + p["QueryBias"]
    k = p["KeyWeights"] @ x + p["KeyBias"]
    v = p["ValueWeights"] @ x + p["ValueBias"]
    dk, dv, t = q.shape[0] // num_heads, v.shape[0] // num_heads, x.shape[1]
    heads, scores = [], np.empty((t, t, num_heads))
    for i in range(num_heads):
        qi, ki, vi = (m[i * n:(i + 1) * n] for m, n in ((q, dk), (k, dk), (v, dv)))
        s = ki.T @ qi / np.sqrt(dk)  # numKeys x numQueries
        if causal:  # query j sees keys 1..j
            s = np.where(np.arange(t)[:, None] <= np.arange(t)[None, :], s, -np.inf)
        s = np.exp(s - s.max(axis=0, keepdims=True))
        s /= s.sum(axis=0, keepdims=True)  # softmax over the keys (dimension 1)
        scores[:, :, i] = s
        heads.append(vi @ s)
    return p["OutputWeights"] @ np.concatenate(heads, axis=0) + p["OutputBias"], scores


class MatlabSelfAttentionModel(DocumentedModel, limitation=limitation, call=matlab_call,
                               note=MODEL_NOTE):
    name = "matlab.selfAttentionLayer"
    system = "matlab selfAttentionLayer"

    def run(self, case, translation, data):
        params = matlab_weights(data.weights)
        causal = translation.plan.get("AttentionMask") == "causal"
        outputs, scores = [], []
        for x in data.inputs.query:  # (T, C) per observation -> MATLAB's C x T
            y, s = forward(params, x.T, case.attention.num_heads, causal)
            outputs.append(y.T)
            scores.append(s)
        score_array = np.stack(scores, axis=-1)  # numKeys x numQueries x numHeads x batch
        return self.observe(
            params, [f"input as {MATLAB_TYPES[case.inputs.dtype]} dlarray, format \"CBT\" "
                     "(channels x batch x time); weights applied as W*X",
                     "HasScoresOutput=true: scores numKeys x numQueries x numHeads x batch, "
                     "transposed to (B, H, T, S) here"],
            output=np.stack(outputs),
            attention_weights=score_array.transpose(3, 2, 1, 0),  # -> (B, H, T, S)
            weights_returned="per_head",
            extras={"mask_polarity": "padding mask: 1 = data, 0 = padding",
                    "default_weights": "none",  # HasScoresOutput defaults to false
                    "sources": [SELF_ATTENTION, MATLAB_ANSWERS, HOW_IT_WORKS, ATTENTION_LAYER,
                                ATTENTION_FUNCTION, EXTRACTDATA]})

    description = (  # its line of the README's runner table
        "a **documented model**, not an execution (MATLAB cannot run here): the call a MATLAB "
        "user types, the weights in MATLAB's layout (`QueryWeights` NumKeyChannels x "
        "InputSize, heads as contiguous channel blocks) and the documented algorithm in "
        "NumPy. It checks translation, layout and parameter accounting, not MATLAB's "
        "arithmetic; reports mark its rows \"(model)\". Every convention cites its MathWorks "
        "page in the `cited:` section of `expectations/matlab.selfAttentionLayer.yaml`, and "
        "what no page documents "
        "(padding at query positions, custom masks, fully masked rows) is left not "
        "expressible with that reason")
