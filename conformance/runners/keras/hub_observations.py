"""What keras_hub's CachedMultiHeadAttention (keras.cached.*) reads of its own API for the
ledger (contract/api_facts.py), with no oracle: the layer's own facts (observations.py,
called without a cache) and the arguments its call's signature lacks (a causal switch, a
key-padding argument), read with inspect.  The ledger measures the rest: its alignment,
float64 and the cache tensors it returns through its decode (the runner's run), its masked
steps through `answer` (step_mask), the raw arguments on the layer without a cache
(conventions/probes/).  Keras and keras_hub are imported inside the functions only.
"""
from __future__ import annotations

import inspect

from conformance.contract.api_facts import ApiFact
from conformance.contract.api_facts import NA
from conformance.runners.keras.hub import CACHED_SRC
from conformance.runners.keras.observations import layer_facts


def call_parameters() -> tuple[str, ...]:
    """CachedMultiHeadAttention.call's parameter names, as inspect reads them."""
    import keras_hub

    return tuple(inspect.signature(keras_hub.layers.CachedMultiHeadAttention.call).parameters)


def signature_facts(parameters: tuple[str, ...]) -> list[ApiFact]:
    """What a call with `parameters` lacks: a key-padding argument (Keras's value_mask) and
    a causal switch (Keras's use_causal_mask); a parameter it has is no fact here."""
    call = f"CachedMultiHeadAttention.call({', '.join(p for p in parameters if p != 'self')})"
    facts = []
    if "value_mask" not in parameters:
        facts.append(ApiFact("padding_argument", NA, f"{call} has no value_mask / key-padding "
                             f"argument: padding goes into attention_mask ({CACHED_SRC})"))
    if "use_causal_mask" not in parameters:
        facts.append(ApiFact("causal_argument", NA, f"{call} has no use_causal_mask: the "
                             "caller builds the mask (keras_hub's compute_causal_mask, "
                             f"{CACHED_SRC})"))
    return facts


def cached_facts(runner) -> list[ApiFact]:
    """keras_hub.layers.CachedMultiHeadAttention's API facts (keras.cached.*): the layer's
    own (called without a cache) and what its call's signature lacks."""
    return layer_facts(runner) + signature_facts(call_parameters())
