"""What an HF attention module reports of its API for the ledger, with no oracle and no
reading of an output against one: the layout of the tensor it takes, what a 2-D input
gives (the output's shape, or the system's error text), what it returns besides the
output.  The ledger asks the rest (conventions/probes/: the runners' `ledger_axes` and
`answers`).  torch and the module arrive as arguments; the runner is the HFRunner that
built the module (its `forward` is the call its model makes).
"""
from __future__ import annotations

import numpy as np

from conformance.contract.axes import REFUSED
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
