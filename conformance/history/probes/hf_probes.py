"""HuggingFace BERT attention (eager and sdpa) on the pinned torch, from a tiny config.

Through the public `BertModel` call (its signature is stable across 4.x and 5.x, unlike
the attention classes): a padding mask of zeros masks every key of a batch row.
"""
from __future__ import annotations

import numpy as np
from common import Absent, close, row_kind

PACKAGES = ("transformers", "torch", "numpy")
IMPORTS = ("torch", "transformers")


def _model(implementation):
    import torch
    import transformers
    config = transformers.BertConfig(vocab_size=16, hidden_size=8, num_hidden_layers=1,
                                     num_attention_heads=2, intermediate_size=16)
    torch.manual_seed(0)
    try:
        model = transformers.BertModel(config, add_pooling_layer=False)
        if implementation != "eager" or hasattr(config, "_attn_implementation"):
            model = transformers.BertModel._from_config(config,
                                                        attn_implementation=implementation)
    except (TypeError, ValueError) as e:
        raise Absent(f"attn_implementation={implementation!r}: {str(e)[:160]}") from e
    torch.manual_seed(0)
    model.load_state_dict(transformers.BertModel(config, add_pooling_layer=False).state_dict(),
                          strict=False)
    return model.eval()


def _call(model, mask, weights=False):
    import torch
    ids = torch.tensor([[1, 2, 3, 4]])
    with torch.no_grad():
        out = model(input_ids=ids, attention_mask=None if mask is None else
                    torch.tensor(mask), output_attentions=weights)
    return out


def _context(model, mask):
    """The self-attention's own output (before its dense layer, residual and LayerNorm),
    read with a forward hook on encoder.layer[0].attention.self (stable across 4.x-5.x)."""
    seen = []
    handle = model.encoder.layer[0].attention.self.register_forward_hook(
        lambda module, args, out: seen.append(out[0] if isinstance(out, tuple) else out))
    try:
        _call(model, mask)
    finally:
        handle.remove()
    return seen[0].detach().numpy()


def _fully_masked(implementation):
    def probe():
        model = _model(implementation)
        context = _context(model, [[0, 0, 0, 0]])[0, 0]
        eager = _model("eager")
        w = _call(eager, [[0, 0, 0, 0]], weights=True).attentions[0].numpy()[0, 0, 0]
        uniform = _context(eager, [[0, 0, 0, 0]])[0, 0] if close(w, np.full_like(w, 0.25)) \
            else None
        kind = row_kind(context, uniform, _context(model, None)[0, 0])
        return kind, (f"attention.self output of a row with every key padded: {kind}"
                      + (f"; eager weights {np.round(w, 2).tolist()}"
                         if implementation == "eager" else ""))
    return probe


def _polarity():
    model = _model("eager")
    base = _call(model, None).last_hidden_state.numpy()
    ones = _call(model, [[1, 1, 1, 1]]).last_hidden_state.numpy()
    return ("true_attends" if close(ones, base) else "true_blocks"), "attention_mask of ones"


def probes(library):
    return {"bert.eager.fully_masked_row": _fully_masked("eager"),
            "bert.sdpa.fully_masked_row": _fully_masked("sdpa"),
            "bert.key_padding_polarity": _polarity}
