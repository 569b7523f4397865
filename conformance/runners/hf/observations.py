"""What an HF attention module reports of its API for the ledger, with no oracle and no
reading of an output against one: the layout of the tensor it takes, what it returns
besides the output, the arguments its forward lacks (key padding;
T5's position_bias is no ALiBi), a torch.Tensor's lack of an implicit mask.  A float64
input, a 2-D input and the weights under dropout are native calls (native_calls.py) the
ledger judges.
The ledger asks the rest (conventions/probes/: the runners' `probe_takes` and
`answers`).  torch and the module arrive as arguments; the runner is the HFRunner that
built the module (its `forward` is the call its model makes).
"""
from __future__ import annotations


from conformance.contract.axes import NA
from conformance.contract.runner import Convention


def api_cells(torch, runner, case, module, x) -> list[Convention]:
    """input_layout and returned_weights of `module` on the probe input `x` (B, T, E)."""
    with torch.no_grad():
        out, w = runner.forward(module, x, None)
    where = f"{runner.name} on {case.id} ({runner.attn_implementation})"
    return [Convention("input_layout", "batch_first", f"{where}: forward(hidden_states "
                       f"{tuple(x.shape)} = (B, T, E)) -> output {tuple(out.shape)}: the "
                       "module takes (batch, seq_len, hidden_size), as its model hands it "
                       "the embeddings; no layout argument"),
            Convention("returned_weights", "none" if w is None else "per_head",
                       f"{runner.attn_implementation}: the module returns "
                       f"{'None' if w is None else tuple(w.shape)} as attn_weights")]


def signature_cells(runner) -> list[Convention]:
    """What the module's forward signature lacks: a key-padding argument; and, where the
    runner names it (`alibi_na`: T5's position_bias), why its bias is no ALiBi."""
    cells = [Convention("key_padding_polarity", NA, f"{runner.system}.forward takes no "
                        "key-padding argument: padding reaches the module only inside the "
                        "4-D attention_mask (B, 1, T, S) that the model's mask builder makes "
                        "from the (B, S) attention_mask of the model call (1 = attend)")]
    if getattr(runner, "alibi_na", ""):
        cells.append(Convention("alibi_slopes", NA, runner.alibi_na))
    return cells


def tensor_cells(torch, runner) -> list[Convention]:
    """implicit_mask: a torch.Tensor carries no mask."""
    return [Convention("implicit_mask", "none", f"{runner.system}: a torch.Tensor carries no "
                       "mask (nothing like Keras's _keras_mask); the module reads only its "
                       "attention_mask argument")]
