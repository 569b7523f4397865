"""The native calls of a converted nn.MultiheadAttention program, for the ledger's probes of
mixed_dtype, unbatched_input and weights_dropout (conventions/probes/native_inputs.py
judges; nothing here compares an output with anything).

- input_dtype, unbatched: the case's probe program (need_weights=False, exported from the
  module in eval, the runner's way) fed its query, key and value in another dtype, or item
  0's without the batch axis, as they are; the output in the dtype the runtime gave it
  (Observation.native_dtype).
- dropout_weights: the module built with attention dropout and exported as constructed (in
  train mode: a program takes no training input, so the switch is the module's mode when
  it was made) with need_weights=True, average_attn_weights=False; its output and per-head
  weights from one execution of the program.

The runtime's or converter's own error propagates: where the runner wraps one in a
NotExpressibleError (ExecuTorch's set_inputs error, OpenVINO's converter) the wrapped error
itself is raised, so the ledger quotes the system and never the suite's wrapper.  torch and
onnx arrive through the probe (export_probe.ExportProbe, deployed.RuntimeProbe).
"""
from __future__ import annotations

import copy

import numpy as np

from conformance.contract.runner import NotExpressible, NotExpressibleError, Observation
from conformance.runners._export.export_probe import qkv_feed
from conformance.runners._export.torch_mha import mha_translation

NATIVE_CALLS = frozenset({"input_dtype", "unbatched", "dropout_weights"})
# where the training switch of a training answer was set: on the module the program was made
# from, since the program takes no training input (RAW_ARGUMENTS "dropout_training")
TRAINING_SET_AT = {"training_set_at": "export"}
INFERENCE = {"need_weights": False}
PER_HEAD = {"need_weights": True, "average_attn_weights": False}


def unwrapped(fn):
    """fn(), with a NotExpressibleError that wraps the runtime's or converter's own error
    replaced by that error (its __cause__)."""
    try:
        return fn()
    except NotExpressibleError as exc:
        if exc.__cause__ is None:
            raise
        raise exc.__cause__ from None


def native_call(e, case, data, raw) -> tuple[Observation, str]:
    """(what the program gave, the call) for raw.argument in NATIVE_CALLS."""
    t = mha_translation(case)
    if isinstance(t, NotExpressible):
        raise NotImplementedError(f"{e.what} passes no raw {raw.argument} on {case.id}: "
                                  f"{t.reason}")
    if raw.argument == "dropout_weights":
        return _weights_in_train(e, case, data, float(raw.value["rate"]))
    if raw.argument == "input_dtype":
        feed = qkv_feed(case, np.dtype(raw.value), data)
        said = f"query, key and value fed as {raw.value} to the {case.inputs.dtype} program"
    elif raw.argument == "unbatched":
        feed = {n: v[0] for n, v in qkv_feed(case, data=data).items()}
        said = "item 0's query, key and value fed without the batch axis, (T, E) each"
    else:
        raise NotImplementedError(f"{e.what} passes no raw {raw.argument} natively")
    blob = unwrapped(lambda: e.graph("plain", case, {}, INFERENCE))
    out = np.asarray(unwrapped(lambda: e.outputs(blob, feed))[0])
    return Observation(output=out.astype(np.float64), native_dtype=str(out.dtype)), (
        f"{e.what}: nn.MultiheadAttention exported, need_weights=False, {said}")


def _weights_in_train(e, case, data, rate: float) -> tuple[Observation, str]:
    """nn.MultiheadAttention(dropout=rate) exported in train mode (the module as
    constructed: a user who never calls eval()) with per-head weights, run once."""
    maker = copy.copy(e)  # the same exporter and runtime, the wrapped module left in train mode
    maker.wrap = lambda *args: e.wrap(*args).train()
    label = f"weights-dropout-{rate}-train"
    blob = unwrapped(lambda: maker.graph(label, case, {}, PER_HEAD, dropout=rate))
    out, weights = (np.asarray(a) for a in unwrapped(
        lambda: e.outputs(blob, qkv_feed(case, data=data)))[:2])
    return Observation(output=out.astype(np.float64), native_dtype=str(out.dtype),
                       attention_weights=weights.astype(np.float64),
                       weights_returned="per_head", extras=dict(TRAINING_SET_AT)), (
        f"{e.what}: nn.MultiheadAttention(dropout={rate}) exported in train mode "
        f"(module.training True), need_weights=True, average_attn_weights=False, the "
        f"program run once{e.holds(blob, 'Dropout')}")
