"""What the runners of nn.MultiheadAttention converted (onnx.torch-export and its opset and
TorchScript variants, openvino.onnx / .torch, executorch.xnnpack) answer the ledger
(Runner.answer) and report of their API with no oracle, through probe graphs exported the
runner's way (export_probe.ExportProbe, or deployed.RuntimeProbe for another runtime) and
run in the runner's runtime with the value as given.

The probe graphs are graphs of forward(..., need_weights=False), the form the rows' output
comes from, exported from the module in eval; a request with the training switch on
(dropout_training, dropout_weights) exports the module as constructed (nn.Module starts in
train mode) and runs that program: a program has no training input, so the switch is the
module's mode when it was made (Observation.extras TRAINING_SET_AT), and the ledger reads
what the program holds.  A float64 or a 2-D input is fed to the float32 program as it is
and the runtime's own output dtype or error comes back (native_calls.py).  The ledger's
probes (conventions/probes/) judge; the ledger asks it through translate and run
(scale_precision reads both graphs a row exports: the need_weights=False output and the
per-head weights of the need_weights=True graph, as the runner's run returns them).
"""
from __future__ import annotations

import copy

import numpy as np

from conformance.contract.api_facts import ApiFact
from conformance.contract.runner import Observation
from conformance.runners._export.export_probe import qkv_feed
from conformance.runners._export.torch_mha import per_head
from conformance.runners._export.torch_native_calls import (
    INFERENCE, NATIVE_CALLS, TRAINING_SET_AT, native_call)

ANSWERS = frozenset({"attn_mask", "key_padding", "is_causal", "causal_hint",
                     "dropout_training"}) | NATIVE_CALLS


def answer(e, case, data, raw) -> tuple[np.ndarray, str]:
    """The probe graph of `case` with `raw` passed as given, run in the runtime, and the
    call: attn_mask a (B, T, S) bool or float32 mask repeated per head to MHA's (B*H, T, S)
    graph input; key_padding a (B, S) bool key_padding_mask input; is_causal and
    causal_hint the causal switch exported (_causal); dropout_training the
    module built with dropout=rate, exported in train or eval mode (_dropout); a float64
    or 2-D input and the weights under dropout as torch_native_calls.py passes them."""
    if raw.argument in NATIVE_CALLS:
        return native_call(e, case, data, raw)
    torch, what = e.torch, f"{e.what}: nn.MultiheadAttention exported, need_weights=False"
    feed = qkv_feed(case, data=data)
    if raw.argument == "attn_mask":
        value = np.asarray(raw.value)
        kind = "bool" if value.dtype == bool else "float32"
        mask = value.astype(kind)
        label = f"attn-mask-{kind}"
        blob = e.graph(label, case, {"attn_mask": per_head(torch, case, mask)}, INFERENCE)
        out = e.run(label, blob, {**feed, "attn_mask": np.repeat(
            mask, case.attention.num_heads, 0)})
        return out, f"{what}, a {kind} attn_mask (B*H, T, S) input fed raw{e.said(label)}"
    if raw.argument == "key_padding":
        pad = np.asarray(raw.value, bool)
        label = "key-padding-raw"
        blob = e.graph(label, case, {"key_padding_mask": torch.from_numpy(pad)}, INFERENCE)
        out = e.run(label, blob, {**feed, "key_padding_mask": pad})
        return out, f"{what}, a bool key_padding_mask (B, S) input fed raw{e.said(label)}"
    if raw.argument in ("is_causal", "causal_hint"):
        return _causal(e, case, feed, raw, what)
    if raw.argument == "dropout_training":
        return _dropout(e, case, feed, raw.value["rate"], bool(raw.value["training"]), what)
    raise NotImplementedError(f"the exported graph passes no raw {raw.argument}")


def _dropout(e, case, feed, rate: float, training: bool, what: str):
    """nn.MultiheadAttention(dropout=rate) exported in train mode (the module as
    constructed: a user who never calls eval()) or in eval, the runner's way, and the
    program run once: an Observation carrying TRAINING_SET_AT."""
    label, mode = f"dropout-{rate}" + ("-train" if training else ""), \
        "train" if training else "eval"
    maker = e
    if training:  # the same exporter and runtime, the wrapped module left in train mode
        maker = copy.copy(e)
        maker.wrap = lambda *args: e.wrap(*args).train()
    out = e.run(label, maker.graph(label, case, {}, INFERENCE, dropout=rate), feed)
    return Observation(output=out, extras=dict(TRAINING_SET_AT)), (
        f"{what}, nn.MultiheadAttention(dropout={rate}) exported in {mode} mode "
        f"(module.training {training}), the program run once{e.said(label)}")


def _causal(e, case, feed, raw, what: str) -> tuple[np.ndarray, str]:
    """is_causal=True exported alone (torch refuses it without an attn_mask: "Need
    attn_mask if specifying the is_causal hint"), or beside value['attn_mask'] ((B, T, S)
    bool, repeated per head) and, where value['pad_nothing'], an all-False (B, S) bool
    key_padding_mask input."""
    torch, i = e.torch, case.inputs
    if raw.argument == "is_causal":
        label, masks, said = f"is-causal-{bool(raw.value)}", {}, ""
    else:
        mask = np.asarray(raw.value["attn_mask"], bool)
        masks = {"attn_mask": per_head(torch, case, mask)}
        said = ", a bool attn_mask (B*H, T, S) input fed raw"
        label = "causal-hint"
        if raw.value.get("pad_nothing"):
            masks["key_padding_mask"] = torch.zeros(i.batch, i.key_len, dtype=torch.bool)
            label, said = "causal-hint-padded", said + (", an all-False bool "
                                                        "key_padding_mask (B, S) input")
    blob = e.graph(label, case, masks, {**INFERENCE, "is_causal": bool(raw.value) if
                                        raw.argument == "is_causal" else True})
    out = e.run(label, blob, {**feed, **{n: m.numpy() for n, m in masks.items()}})
    causal = bool(raw.value) if raw.argument == "is_causal" else True
    return out, f"{what}, is_causal={causal} exported{said}{e.said(label)}"


def facts(e) -> list[ApiFact]:
    """What the converted module's API shows: its size arguments and layout (readings the
    ledger confirms by asking), what the default call's program returns, and that no mask
    travels with a tensor."""
    torch, case = e.torch, base_case()
    label = "default-no-mask"
    blob = e.graph(label, case, {}, {})  # forward(q, k, v): need_weights=True, averaged
    w = e.run(label, blob, qkv_feed(case), 1)
    mha = torch.nn.MultiheadAttention(8, 2)
    return [
        ApiFact("head_size_from", "derived_from_width", f"{e.what}: the exported module is "
                f"nn.MultiheadAttention(8, 2): head_dim {mha.head_dim}, in_proj_weight "
                f"{tuple(mha.in_proj_weight.shape)} (no head-size argument)"),
        ApiFact("tensor_layout", "batch_first", f"{e.what}: the program takes (B, T, E) "
                "inputs, exported from nn.MultiheadAttention(batch_first=True)"),
        ApiFact("weights_returned", "head_averaged" if w.ndim == 3 else "per_head",
                f"{e.what}: the default call (need_weights=True, average_attn_weights=True) "
                f"exported: second program output {w.shape} for (B, H, T, S) = (2, 2, 3, 5)"),
        ApiFact("mask_on_tensor", "none", f"{e.what}: the program's inputs are plain "
                "tensors; masks reach it only as key_padding_mask / attn_mask inputs")]


def base_case():
    """The probe case of the API facts: 2 heads over 8 features, B 2, T 3, S 5, seed 7."""
    from conformance.case.loader import parse_case

    return parse_case({"id": "probe-export-mask", "attention": {"num_heads": 2,
                                                                "query_features": 8},
                       "inputs": {"batch": 2, "query_len": 3, "key_len": 5, "seed": 7}},
                      "<probe>")


def signatures(torch):
    mha = torch.nn.MultiheadAttention
    return ("nn.MultiheadAttention (the exported module; the opset-23 export writes "
            "Attention(softcap=0.0))", (mha.__init__, mha.forward))
