"""The Keras layer runners' answers to the ledger's raw requests (Runner.answer,
contract/runner.py RAW_ARGUMENTS): the layer of the runner's class and path (calls.Probe)
called on the probe case with one native argument as the request gives it, nothing judged
(the ledger's probes read the outputs: conventions/probes/flags.py, training.py,
windows.py, order.py, key_padding.py, implicit.py, native_inputs.py).  Keras is imported inside the
functions only.
"""
from __future__ import annotations

import warnings
from dataclasses import replace

import numpy as np

from conformance.contract.runner import Observation
from conformance.runners._export.keras_mha import load_weights, tensor, to_f64
from conformance.runners.keras.calls import Probe, flash_off, swapped

# the RawCall arguments a Keras layer runner answers
ANSWERS = frozenset({"attn_mask", "is_causal", "dropout_training", "window", "positional",
                     "key_padding", "marked_padding", "input_dtype", "unbatched",
                     "dropout_weights"})
NATIVE_CALLS = frozenset({"input_dtype", "unbatched", "dropout_weights"})  # -> Observation


def _implicit(p: Probe, case, data, valid: np.ndarray):
    """keras.layers.Embedding(mask_zero=True) -> the layer, in a functional model: token
    id 0 at the padded positions (its embedding row zeros), the others the inputs' rows."""
    k = p.keras
    b, t, e = data.inputs.query.shape
    ids = np.where(valid, np.arange(b * t).reshape(b, t) + 1, 0).astype("int32")
    table = np.concatenate([np.zeros((1, e)), np.asarray(data.inputs.query).reshape(-1, e)])
    tokens = k.Input((t,), batch_size=b, dtype="int32")
    emb = k.layers.Embedding(b * t + 1, e, mask_zero=True)
    layer = p.cls(**p.plan(case), **flash_off(k))
    hidden = emb(tokens)
    with warnings.catch_warnings():  # "query (EinsumDense) ... will destroy the mask"
        warnings.simplefilter("ignore", UserWarning)
        model = k.Model(tokens, layer(hidden, hidden))
    emb.embeddings.assign(tensor(k, table, "float32"))
    load_weights(k, layer, data.weights, "float32")
    return to_f64(k, p.invoke(model, [ids])), (
        f"Embedding(mask_zero=True) -> {p.cls.__name__}(hidden, hidden) in a functional "
        "model, token id 0 at the padded positions")


def native_call(p: Probe, case, data, raw):
    """The calls answered with an Observation: the inputs cast to raw.value into the layer
    built in the case's dtype (the output's own dtype with it); item 0's (T, E) inputs into
    a layer built for them; dropout=rate with training=True, the scores the path returns
    (none where it calls return_attention_scores=False)."""
    if raw.argument == "input_dtype":
        wide = replace(data.inputs, **{n: np.asarray(getattr(data.inputs, n), raw.value)
                                       for n in ("query", "key", "value")})
        out, _, held = p.call(p.layer(case, data), replace(data, inputs=wide), dtype=False)
        return Observation(output=out, native_dtype=held), (
            f"{p.what}: layer(query, value, key as {raw.value}), dtype={case.inputs.dtype!r}")
    if raw.argument == "unbatched":
        out, _, held = p.call(p.layer(case, data, rank=2), data, rank=2)
        return Observation(output=out, native_dtype=held), (
            f"{p.what}: layer(query[0], value[0], key[0]) built for (T, E) inputs")
    p.keras.utils.set_random_seed(0)
    out, w, held = p.call(p.layer(case, data, dropout=raw.value["rate"]), data, training=True)
    return Observation(output=out, native_dtype=held, attention_weights=w,
                       weights_returned="none" if w is None else "per_head"), (
        f"{p.what}: layer(query, value, key, training=True), dropout={raw.value['rate']}, "
        "seed 0")


def answer(runner, case, data, raw) -> tuple[np.ndarray | Observation, str]:
    """The output of `runner`'s layer on `case` with `raw` passed as given, and the call."""
    p = Probe(runner)
    name, value = raw.argument, raw.value
    if name in NATIVE_CALLS:
        return native_call(p, case, data, raw)
    if name == "marked_padding":
        return _implicit(p, case, data, np.asarray(value, bool))
    options, kw, call = {}, {}, "layer(query, value, key"
    if name == "dropout_training":
        p.keras.utils.set_random_seed(0)
        options["dropout"] = value["rate"]
        kw["training"] = value["training"]
    elif name == "window":
        options["sliding_window"] = value
        if case.mask.causal != "none":
            kw["use_causal_mask"] = True
    elif name == "attn_mask":
        kw["attention_mask"] = np.asarray(value)
    elif name == "is_causal":
        kw["use_causal_mask"] = bool(value)
    elif name == "key_padding":
        kw["value_mask"] = np.asarray(value, bool)
    elif name == "positional":
        data, call = swapped(data), "layer(query, key, value"  # (q, k, v) into its slots
    else:
        raise NotImplementedError(f"{runner.name} passes no raw {name}")
    layer = p.layer(case, data, **options)
    out = p.call(layer, data, **kw)[0]
    given = [f"{k}={v!r}" for k, v in options.items()] + [
        f"{k}=<{np.asarray(v).dtype} {np.asarray(v).shape}>" if isinstance(v, np.ndarray)
        else f"{k}={v!r}" for k, v in kw.items()]
    return out, f"{p.what}: {call}{''.join(', ' + g for g in given)})"
