"""What an HF attention module reads of its own API for the ledger (contract/api_facts.py),
with no oracle and no reading of an output against one: the layout of the tensor it takes
and what it returns besides the output (one forward on the probe input, shapes read), the
arguments its forward lacks (key padding; T5's position_bias is no ALiBi), a
torch.Tensor's lack of an implicit mask.  A float64 input, a 2-D input and the weights
under dropout are native calls (native_calls.py) the ledger judges; the ledger asks the
rest (conventions/probes/: the runners' `probe_takes` and `answers`).  torch and the module
arrive as arguments; the runner is the HFRunner that built the module (its `forward` is
the call its model makes).
"""
from __future__ import annotations

import inspect

from conformance.contract.api_facts import ApiFact
from conformance.contract.api_facts import NA


def api_facts(torch, runner, case, module, x) -> list[ApiFact]:
    """The tensor layout `module` takes and what it returns, on the probe input `x`
    (B, T, E): the shapes of its forward's input and return, read."""
    with torch.no_grad():
        out, w = runner.forward(module, x, None)
    where = f"{runner.name} on {case.id} ({runner.attn_implementation})"
    return [ApiFact("tensor_layout", "batch_first", f"{where}: forward(hidden_states "
                    f"{tuple(x.shape)} = (B, T, E)) -> output {tuple(out.shape)}: the module "
                    "takes (batch, seq_len, hidden_size), as its model hands it the "
                    "embeddings; no layout argument"),
            ApiFact("weights_returned", "none" if w is None else "per_head",
                    f"{runner.attn_implementation}: the module returns "
                    f"{'None' if w is None else tuple(w.shape)} as attn_weights")]


def forward_parameters(runner) -> str:
    """The names of the attention class's forward parameters, as inspect reads them."""
    return ", ".join(inspect.signature(runner.signatures()[1][1]).parameters)


def signature_facts(runner) -> list[ApiFact]:
    """What the module's forward signature lacks: a key-padding argument; and, where the
    runner names it (`alibi_na`: T5's position_bias), why its bias is no ALiBi."""
    facts = [ApiFact("padding_argument", NA, f"{runner.system}.forward"
                     f"({forward_parameters(runner)}) takes no key-padding argument: padding "
                     "reaches the module only inside the 4-D attention_mask (B, 1, T, S) "
                     "that the model's mask builder makes from the (B, S) attention_mask of "
                     "the model call (1 = attend)")]
    if getattr(runner, "alibi_na", ""):
        facts.append(ApiFact("alibi_argument", NA, runner.alibi_na))
    return facts


def tensor_facts(runner) -> list[ApiFact]:
    """A torch.Tensor carries no mask: the module reads only its attention_mask."""
    return [ApiFact("mask_on_tensor", "none", f"{runner.system}: a torch.Tensor carries no "
                    "mask (nothing like Keras's _keras_mask); the module reads only its "
                    "attention_mask argument")]
