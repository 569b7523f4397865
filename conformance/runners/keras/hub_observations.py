"""What keras_hub's CachedMultiHeadAttention (keras.cached.*) reports of its API for the
ledger, with no oracle: the layer's own facts (observations.py, called without a cache),
the arguments its call lacks (a causal switch, a key-padding argument) and the shapes of
the cache tensor it takes and returns through keras_hub's own decode pattern (hub.decode).
The ledger asks the rest: its alignment and float64 through its decode, the raw arguments
on the layer without a cache (conventions/probes/).  Keras and keras_hub are imported
inside the functions only.
"""
from __future__ import annotations

from conformance.case.loader import parse_case
from conformance.contract.axes import NA, NOT_PROBED
from conformance.contract.runner import Convention
from conformance.oracle.canonical import case_data
from conformance.runners._export.keras_mha import tensor
from conformance.runners.keras.calls import Probe
from conformance.runners.keras.hub import CACHED_SRC, decode
from conformance.runners.keras.observations import layer_facts

SLOTS = 6  # cache positions allocated for a prefill of 3 and one step: 2 stay empty


def _cache_layout(p: Probe) -> Convention:
    """The cache tensor CachedMultiHeadAttention takes and returns, through keras_hub's own
    decode pattern (hub.decode): its shapes, read, nothing computed from them."""
    case = parse_case({"id": "keras-cache-layout", "attention": {
        "num_heads": 2, "query_features": 8}, "inputs": {
        "batch": 2, "query_len": 4, "key_len": 4, "seed": 7, "self_attention": True}},
        "<keras observations>")
    data = case_data(case)
    layer = p.layer(case, data)
    x = tensor(p.keras, data.inputs.query, "float32")
    shapes = decode(p.keras, layer, x, 3, SLOTS)[1]
    what = (f"keras_hub.layers.CachedMultiHeadAttention ({p.backend}), cache of {SLOTS} "
            f"slots, prefill 3 then a step at position 3 (cache_update_index 3)")
    return Convention("cache_layout", f"BSNH, one tensor (B, 2, S, H, d): keys and values "
                      f"stacked on axis 1, preallocated ({shapes[0]} -> {shapes[-1]})",
                      f"{what}: the cache argument and the returned cache, "
                      f"{' -> '.join(str(t) for t in shapes)} (updated by ops.slice_update "
                      "at cache_update_index)", documented_source=CACHED_SRC)


def cached_facts(runner) -> list[Convention]:
    """keras_hub.layers.CachedMultiHeadAttention's API facts (keras.cached.*): the layer's
    own (called without a cache), what its call lacks, its cache tensor's shapes."""
    p = Probe(runner)
    call = ("CachedMultiHeadAttention.call(query, value, key, attention_mask, cache, "
            "cache_update_index, ...)")
    return layer_facts(runner) + [
        Convention("key_padding_polarity", NA, f"{call} has no value_mask / key-padding "
                   "argument: padding goes into attention_mask", documented_source=CACHED_SRC),
        Convention("causal_flag", NA, f"{call} has no use_causal_mask (passing it raises "
                   "TypeError): the caller builds the mask (keras_hub's compute_causal_mask)",
                   documented_source=CACHED_SRC),
        Convention("fully_masked_row", NOT_PROBED, "a harness limit: the runner runs causal "
                   "decodes only (translate refuses any other mask), where every query sees "
                   "at least its own key; the layer itself takes other masks"),
        _cache_layout(p)]
