"""C++ Marian (marian-nmt): a documented model of its transformer attention, not an execution.

Marian cannot be built or run here, so this runner is a *model* (Observation.executed
= False), in the style of matlab.py: it translates the case into the options a
Marian user sets, holds the canonical weights under Marian's own parameter names and
shapes, and evaluates the algorithm of the cited source in NumPy float64.  Its numbers
test the translation and the layout (head split, weight orientation, mask), never
Marian's arithmetic.

Every convention cites a line of src/models/transformer.h of marian-nmt/marian at
commit 0095dad (the stored version read through the search tools; line numbers
counted in that text): LINES below quotes each line used.
- MultiHead (L238): Wq, Wk, Wv are `{dimModel, dimModel}` (L249, L259, L272), in x out,
  applied as `affine(q, Wq, bq)` = q Wq + bq (L251); biases `{1, dimModel}` always
  created (L250, L260, L273); Wo `{dimAtt, dimOut}` and bo (L295, L296).
- Heads: `dimDepth = dimModel / dimHeads` (L94), dimHeads = `--transformer-heads`
  (L316): a head size other than dim-emb / transformer-heads is impossible by
  construction, and the output width is dimModel (dimOut = dimModel, L319).
- Attention (L203): `scale = 1.0f / std::sqrt((float)dk)` with dk the per-head key
  width (L210, L216), `z = z + mask` (L220), softmax over the keys (L223); dropout
  only when training (L230).
- Masks: 1/0 masks become additive `(1 - mask) * -99999999.f` (L84); the encoder's
  mask comes with the batch's sentence lengths (L540, L563), the decoder's
  self-attention adds the triangle `j <= i` (L72-L77, L333).
- The layer around MultiHead (LayerAttention, L303) runs `--transformer-preprocess`
  and `--transformer-postprocess` ops (L314, L322): with both empty it is MultiHead
  alone (the loops at L142 and L157 apply no op), which is what a case describes.
Not settled by the cited source, so not expressible with that reason: biases off,
dtypes other than float32, a mask other than sentence lengths or the triangle, and
causal together with padding (the decoder combines them in lines not cited here).
"""
from __future__ import annotations

import numpy as np

from conformance.runners.documented.common import DocumentedModel

REPO = "https://github.com/marian-nmt/marian"
COMMIT = "0095dad07fea72d70e7278158a885c349efffe5f"
FILE = "src/models/transformer.h"
BLOB = f"{REPO}/blob/{COMMIT}/{FILE}"
LINES = {  # line of transformer.h at COMMIT -> its text (trimmed)
    72: "Expr triangleMask(int length) const {",
    76: "for(int j = 0; j <= i; ++j)",
    84: "mask = (1 - mask) * -99999999.f;",
    92: "int dimBeam  = input->shape()[-4];",
    94: "int dimDepth = dimModel / dimHeads;",
    142: "for(auto op : ops) {",
    210: "int dk = k->shape()[-1];",
    216: "float scale = 1.0f / std::sqrt((float)dk); // scaling to avoid extreme values "
         "due to matrix multiplication",
    217: "auto z = bdot(q, k, false, true, scale);",
    220: "z = z + mask;",
    223: "auto weights = softmax(z);",
    226: "collectOneHead(weights, dimBeam);",
    230: "= inference_ ? 0 : opt<float>(\"transformer-dropout-attention\");",
    231: "weights = dropout(weights, dropProb);",
    249: "auto Wq = graph_->param(prefix + \"_Wq\", {dimModel, dimModel}, inits::glorot_uniform);",
    250: "auto bq = graph_->param(prefix + \"_bq\", {       1, dimModel}, inits::zeros);",
    251: "auto qh = affine(q, Wq, bq);",
    259: "auto Wk = graph_->param(prefix + \"_Wk\", {dimModel, dimModel}, inits::glorot_uniform);",
    272: "auto Wv = graph_->param(prefix + \"_Wv\", {dimModel, dimModel}, inits::glorot_uniform);",
    295: "= graph_->param(prefix + \"_Wo\", {dimAtt, dimOut}, inits::glorot_uniform);",
    296: "auto bo = graph_->param(prefix + \"_bo\", {1, dimOut}, inits::zeros);",
    304: "Expr input,         // [-4: beam depth, -3: batch size, -2: max length, -1: vector dim]",
    314: "auto output = preProcess(prefix + \"_Wo\", opsPre, input, dropProb);",
    316: "auto heads = opt<int>(\"transformer-heads\");",
    319: "output = MultiHead(prefix, dimModel, heads, output, keys, values, mask, cache, "
         "saveAttentionWeights);",
    322: "output = postProcess(prefix + \"_Wo\", opsPost, output, input, dropProb);",
    333: "selfMask = transposedLogMask(selfMask);",
    540: "= EncoderBase::lookup(graph_, embeddings, batch);",
    563: "layerMask = transposedLogMask(layerMask);",
    568: "layer = LayerAttention(prefix_ + \"_l\" + std::to_string(i) + \"_self\",",
}
MODEL_NOTE = ("documented model, not executed: Marian's transformer attention (transformer.h "
              "MultiHead/Attention) evaluated in NumPy float64 from the cited source; checks the "
              "translation, the layout and the parameter accounting, not Marian's arithmetic")
NEG = -99999999.0  # transposedLogMask's fill (L84)


def cite(*lines: int) -> str:
    """'transformer.h:N `text`' for each line: the evidence a cell or a reason quotes."""
    return "; ".join(f"transformer.h:{n} `{LINES[n]}`" for n in lines)


def url(line: int) -> str:
    return f"{BLOB}#L{line}"


def limitation(case) -> str | None:
    """Why Marian's transformer attention cannot express the case (or why this model,
    keeping to the cited source, does not)."""
    a, i, m = case.attention, case.inputs, case.mask
    width = a.query_features
    if not i.self_attention:
        return ("query, key and value are three tensors; Marian's layers take them from its "
                f"own streams (encoder self-attention: query = keys = values, {cite(568)} "
                "with `layer, layer, layer`); separate key and value tensors are no option")
    if a.num_kv_heads != a.num_heads:
        return (f"grouped-query (num_kv_heads={a.num_kv_heads}): keys and values are split into "
                f"the same --transformer-heads heads as the queries ({cite(259, 94)})")
    head = width // a.num_heads
    if width % a.num_heads or a.qk_head_dim != head or a.v_head_dim != head:
        return (f"qk_head_dim={a.qk_head_dim}, v_head_dim={a.v_head_dim} on --dim-emb {width} "
                f"with --transformer-heads {a.num_heads}: Marian has no head-size option; W_q is "
                f"square and the head size is dim-emb / heads ({cite(249, 94, 316)})")
    if a.output_features != width or a.key_features != width or a.value_features != width:
        return (f"every width is --dim-emb: Wk and Wv are (dimModel, dimModel) and MultiHead's "
                f"output is dimModel wide ({cite(259, 319)})")
    if not a.bias:
        return ("bias=False: MultiHead always creates _bq, _bk, _bv and _bo (initialised to zeros "
                f"but parameters; {cite(250, 296)}); no option in the cited source removes them")
    if i.dtype != "float32":
        return (f"{i.dtype}: not modelled; the cited source computes in the graph's float type "
                "and this model reads no precision option (the scale itself is a C++ float, "
                f"{cite(216)})")
    if m.attn_mask_density is not None or m.attn_mask_matrix is not None or m.masked_rows:
        return ("an explicit attention mask: Marian has no mask input; its masks come from the "
                f"sentence lengths of the batch ({cite(540)}) and the decoder's triangle "
                f"({cite(76)})")
    if m.causal != "none" and m.key_padding is not None:
        return ("causal together with padding: the decoder combines its triangle with the "
                "target padding in lines this model does not cite; not modelled")
    return None


def marian_options(case) -> tuple[str, dict]:
    """The marian command-line options a user sets, and the plan: which layer
    (encoder self-attention, or the decoder's causal self-attention) with which mask."""
    a, m = case.attention, case.mask
    causal = m.causal != "none"
    prefix = "decoder_l1_self" if causal else "encoder_l1_self"
    options = (f"marian --type transformer --dim-emb {a.query_features} --transformer-heads "
               f"{a.num_heads} --transformer-preprocess \"\" --transformer-postprocess \"\" "
               "--transformer-dropout-attention 0")
    where = (f"; layer {prefix}: decoder self-attention (triangleMask)" if causal else
             f"; layer {prefix}: encoder self-attention")
    if m.key_padding is not None:
        where += f", a batch of sentences of lengths {list(m.key_padding)}"
    plan = {"prefix": prefix, "heads": a.num_heads, "causal": causal,
            "lengths": None if m.key_padding is None else list(m.key_padding)}
    return options + where, plan


def marian_weights(weights, prefix: str) -> dict[str, np.ndarray]:
    """Canonical per-head arrays -> Marian's parameters: W (in, out) with head h the
    column block h*d:(h+1)*d (SplitHeads' reshape to (..., heads, d), L94), biases (1, out)."""
    def cols(w):  # (H, E, d) -> (E, H*d)
        return np.ascontiguousarray(w.transpose(1, 0, 2).reshape(w.shape[1], -1))

    h, d_v, e_o = weights.wo.shape
    return {f"{prefix}_Wq": cols(weights.wq), f"{prefix}_bq": weights.bq.reshape(1, -1),
            f"{prefix}_Wk": cols(weights.wk), f"{prefix}_bk": weights.bk.reshape(1, -1),
            f"{prefix}_Wv": cols(weights.wv), f"{prefix}_bv": weights.bv.reshape(1, -1),
            f"{prefix}_Wo": np.ascontiguousarray(weights.wo.reshape(h * d_v, e_o)),
            f"{prefix}_bo": weights.bo.reshape(1, -1)}


def split_heads(x: np.ndarray, heads: int) -> np.ndarray:
    """SplitHeads (L88): (B, L, dimModel) -> (B, heads, L, dimModel / heads)."""
    b, length, dim = x.shape
    return x.reshape(b, length, heads, dim // heads).transpose(0, 2, 1, 3)


def log_mask(plan: dict, batch: int, t: int, s: int) -> np.ndarray:
    """The additive mask Attention() adds (L220): 1/0 -> (1 - mask) * -99999999 (L84)."""
    mask = np.ones((batch, 1, t, s))
    if plan["lengths"] is not None:  # sentence lengths: a (batch, 1, 1, S) mask
        mask = mask * (np.arange(s)[None, :] < np.array(plan["lengths"])[:, None])[:, None, None]
    if plan["causal"]:  # triangleMask: query i sees keys j <= i (L76)
        mask = mask * (np.arange(s)[None, :] <= np.arange(t)[:, None])
    return (1 - mask) * NEG


def multi_head(p: dict, prefix: str, x: np.ndarray, heads: int, mask: np.ndarray):
    """MultiHead (L238) and Attention (L203) on keys = values = x; -> output, weights."""
    qh = split_heads(x @ p[f"{prefix}_Wq"] + p[f"{prefix}_bq"], heads)
    kh = split_heads(x @ p[f"{prefix}_Wk"] + p[f"{prefix}_bk"], heads)
    vh = split_heads(x @ p[f"{prefix}_Wv"] + p[f"{prefix}_bv"], heads)
    dk = kh.shape[-1]
    scale = float(np.float32(1.0) / np.sqrt(np.float32(dk)))  # a C++ float (L216)
    z = (qh @ kh.swapaxes(-1, -2)) * scale + mask
    e = np.exp(z - z.max(-1, keepdims=True))
    weights = e / e.sum(-1, keepdims=True)
    out = weights @ vh  # JoinHeads: back to (B, L, heads * d), head-major
    out = out.transpose(0, 2, 1, 3).reshape(x.shape[0], x.shape[1], -1)
    return out @ p[f"{prefix}_Wo"] + p[f"{prefix}_bo"], weights


class MarianCppModel(DocumentedModel, limitation=limitation, call=marian_options,
                     note=MODEL_NOTE):
    name = "marian.cpp"
    system = "marian transformer MultiHead (C++)"

    def run(self, case, translation, data):
        plan = translation.plan
        params = marian_weights(data.weights, plan["prefix"])
        x = data.inputs.query
        i = case.inputs
        out, _ = multi_head(params, plan["prefix"], x, plan["heads"],
                            log_mask(plan, i.batch, i.query_len, i.key_len))
        return self.observe(
            params, ["the layer returns its output only (alignments are the first head, "
                     f"collected for guided alignment: {cite(226)})"],
            output=out, weights_returned="none",
            extras={"mask_polarity": "sentence lengths (1 = word, 0 = padding)",
                    "sources": sorted({url(n) for n in (84, 94, 216, 249, 319)})})

    description = (  # its line of the README's runner table
        "a **documented model** of C++ Marian's transformer attention (`src/models/"
        "transformer.h`, cited line by line in `conformance/runners/documented/marian.py` "
        "and, for its ledger cells, in the `cited:` section of `expectations/marian.cpp.yaml`"
        "): "
        "its options, its weight layout and its algorithm in NumPy; reports mark its rows "
        "\"(model)\"")
