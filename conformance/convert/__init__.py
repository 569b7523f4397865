"""Weight converters between the canonical weight set (conformance.oracle.canonical) and
framework layouts, as a library: pure NumPy, no framework imported.

    to_<format>(weights, **layout_options) -> the format's arrays (NumPy)
    from_<format>(state, num_heads, num_kv_heads=None) -> CanonicalWeights
    convert(state, source, target, num_heads=..., **layout_options)

Formats: torch (nn.MultiheadAttention state dict), keras (MultiHeadAttention
variables by path suffix; keras_weights / set_keras_weights for a real layer),
flax (linen MultiHeadDotProductAttention params), matlab (selfAttentionLayer
learnables), bert, gpt2, t5, llama, marian (HuggingFace attention modules).
Inputs may be torch tensors, Keras variables, JAX/TF or NumPy arrays; outputs
are fresh NumPy arrays in the input dtype. Round trips are bit-identical. A
wrong shape or key raises ConversionError (a ValueError) naming the tensor,
the expected and the found shape, or the key and the keys the layout has.
"""
from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from conformance.oracle.canonical import CanonicalWeights
from conformance.convert._core import ConversionError, as_numpy
from conformance.convert.frameworks import (
    from_flax, from_keras, from_matlab, from_torch, keras_weights, set_keras_weights, to_flax,
    to_keras, to_matlab, to_torch)
from conformance.convert.hf import (
    from_bert, from_gpt2, from_gpt_neox, from_gptj, from_llama, from_marian, from_mpt,
    from_qk_norm, from_t5, to_bert, to_gpt2, to_gpt_neox, to_gptj, to_llama, to_marian, to_mpt,
    to_qk_norm, to_t5)

FORMATS: dict[str, tuple[Callable[..., Any], Callable[..., CanonicalWeights]]] = {
    "torch": (to_torch, from_torch),
    "keras": (to_keras, from_keras),
    "flax": (to_flax, from_flax),
    "matlab": (to_matlab, from_matlab),
    "bert": (to_bert, from_bert),
    "gpt2": (to_gpt2, from_gpt2),
    "t5": (to_t5, from_t5),
    "llama": (to_llama, from_llama),
    "marian": (to_marian, from_marian),
    "gptj": (to_gptj, from_gptj),
    "gpt_neox": (to_gpt_neox, from_gpt_neox),  # BloomAttention has the same keys and layout
    "bloom": (to_gpt_neox, from_gpt_neox),
    "mpt": (to_mpt, from_mpt),
    "qwen3": (to_qk_norm, from_qk_norm),  # q_norm (d,): per head
    "olmo2": (to_qk_norm, from_qk_norm),  # q_norm (H*d,): the whole projection
}


def _format(name: str) -> tuple[Callable[..., Any], Callable[..., CanonicalWeights]]:
    if name not in FORMATS:
        raise ConversionError(f"unknown format {name!r}; known: {', '.join(FORMATS)}")
    return FORMATS[name]


def to_format(weights: CanonicalWeights, target: str, **layout_options: Any) -> Any:
    return _format(target)[0](weights, **layout_options)


def from_format(state: Mapping[str, Any], source: str, num_heads: int | None = None,
                num_kv_heads: int | None = None) -> CanonicalWeights:
    if num_heads is None and source not in ("keras", "flax"):
        raise ConversionError(f"{source}: num_heads is needed to split the heads")
    return _format(source)[1](state, num_heads, num_kv_heads)


def convert(state: Mapping[str, Any], source: str, target: str, num_heads: int | None = None,
            num_kv_heads: int | None = None, **layout_options: Any) -> Any:
    """One format to another through the canonical set, e.g.
    convert(mha.state_dict(), "torch", "keras", num_heads=2)."""
    _format(target)
    weights = from_format(state, source, num_heads, num_kv_heads)
    return to_format(weights, target, **layout_options)


__all__ = ["ConversionError", "FORMATS", "as_numpy", "convert", "from_format", "to_format",
           "keras_weights", "set_keras_weights", "to_torch", "from_torch", "to_keras",
           "from_keras", "to_flax", "from_flax", "to_matlab", "from_matlab", "to_bert",
           "from_bert", "to_gpt2", "from_gpt2", "to_t5", "from_t5", "to_llama", "from_llama",
           "to_marian", "from_marian", "to_gptj", "from_gptj", "to_gpt_neox", "from_gpt_neox",
           "to_mpt", "from_mpt", "to_qk_norm", "from_qk_norm"]
