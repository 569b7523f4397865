"""What an HF attention module reports of its API for the ledger, with no oracle and no
reading of an output against one: the layout of the tensor it takes, what a 2-D input
gives (the output's shape, or the system's error text), what it returns besides the
output (and, under attention dropout, those weights' row sums), the arguments its forward
lacks (key padding; T5's position_bias is no ALiBi), the dtype a float64 input into the
float32 module gives (or the system's error), a torch.Tensor's lack of an implicit mask.
The ledger asks the rest (conventions/probes/: the runners' `probe_takes` and
`answers`).  torch and the module arrive as arguments; the runner is the HFRunner that
built the module (its `forward` is the call its model makes).
"""
from __future__ import annotations

import numpy as np

from conformance.contract.axes import NA, REFUSED
from conformance.contract.runner import Convention, to_numpy


def error_text(exc: BaseException) -> str:
    """The system's error, one line, bounded."""
    return " ".join(f"{type(exc).__name__}: {exc}".split())[:300]


def api_cells(torch, runner, case, module, x) -> list[Convention]:
    """input_layout, unbatched_input and returned_weights of `module` on the probe input
    `x` (B, T, E)."""
    with torch.no_grad():
        out, w = runner.forward(module, x, None)
    where = f"{runner.name} on {case.id} ({runner.attn_implementation})"
    return [Convention("input_layout", "batch_first", f"{where}: forward(hidden_states "
                       f"{tuple(x.shape)} = (B, T, E)) -> output {tuple(out.shape)}: the "
                       "module takes (batch, seq_len, hidden_size), as its model hands it "
                       "the embeddings; no layout argument"),
            unbatched(torch, runner, module, x, to_numpy(out)),
            Convention("returned_weights", "none" if w is None else "per_head",
                       f"{runner.attn_implementation}: the module returns "
                       f"{'None' if w is None else tuple(w.shape)} as attn_weights")]


def unbatched(torch, runner, module, x, batched: np.ndarray) -> Convention:
    """hidden_states without the batch axis: the module's error, or its output against
    its own output for batch item 0 (the same tensor with the batch axis)."""
    what = f"hidden_states of shape {tuple(x[0].shape)} (no batch axis)"
    try:
        with torch.no_grad():
            out = to_numpy(runner.forward(module, x[0], None)[0])
    except Exception as exc:  # the system's refusal is the observation
        return Convention("unbatched_input", REFUSED, f"{what}: {error_text(exc)}")
    d = (float(np.max(np.abs(out - batched[0]))) if out.shape == batched[0].shape
         else float("inf"))
    wrong = ("; silently misread (the head split views (T, E) as if T were the batch)"
             if not d < 1e-3 else "")
    return Convention("unbatched_input", "accepted", f"{what}: output {out.shape}, "
                      f"{d:.1e} from the module's own output for batch item 0{wrong}")


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


def weights_dropout(torch, runner) -> Convention:
    """The weights the module returns with attention dropout 0.5 in train(): rows that no
    longer sum to 1 are the dropped ones (post_dropout); no weights, not_applicable."""
    case = runner.probe("weights-dropout")
    module, x = runner.probe_module(case, dropout=0.5)
    module.train()
    torch.manual_seed(0)
    with torch.no_grad():
        _, w = runner.forward(module, x, None)
    what = (f"{runner.name} on {case.id} ({runner.attn_implementation}), attention dropout "
            "0.5 in the config, train(), seed 0")
    if w is None:
        return Convention("weights_dropout", NA, f"{what}: the module returns attn_weights "
                          f"None ({runner.attn_implementation} computes no weights to return)")
    sums = w.double().sum(-1)
    dev = float((sums - 1).abs().max())
    return Convention("weights_dropout", "post_dropout" if dev > 1e-6 else "pre_dropout",
                      f"{what}: returned attn_weights' row sums span {float(sums.min()):.3f}.."
                      f"{float(sums.max()):.3f} (max |sum - 1| {dev:.2f})")


def tensor_cells(torch, runner) -> list[Convention]:
    """mixed_dtype (float64 hidden_states into the float32 module: the output's dtype, or
    the system's error) and implicit_mask (a torch.Tensor carries no mask)."""
    case = runner.probe("mixed-dtype")
    module, x = runner.probe_module(case)
    what = (f"{runner.name} on {case.id} ({runner.attn_implementation}): float64 "
            "hidden_states into the float32 module")
    try:
        with torch.no_grad():
            out = runner.forward(module, x.double(), None)[0]
        mixed = Convention("mixed_dtype", "promoted" if out.dtype == torch.float64
                           else "cast_to_layer", f"{what}: output {out.dtype}")
    except Exception as exc:  # the system's refusal is the observation
        mixed = Convention("mixed_dtype", REFUSED, f"{what}: {error_text(exc)}")
    return [mixed, Convention("implicit_mask", "none", f"{runner.system}: a torch.Tensor "
                              "carries no mask (nothing like Keras's _keras_mask); the module "
                              "reads only its attention_mask argument")]
