"""A system's own words for attention's numbers: the Word and Vocabulary tables that
typed_numbers.py reads (kept apart so that the vocabularies of several modules can be
built without importing the derivation)."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable, Mapping


@dataclass(frozen=True)
class Word:
    name: str  # the system's own word
    sets: tuple[str, ...]  # canonical quantities it sets
    required: bool = False
    arg: bool = True  # a constructor argument (False: the input's size, inferred by the layer)


def word(name: str, *sets: str, req: bool = False, arg: bool = True) -> Word:
    return Word(name, sets, req, arg)


@dataclass(frozen=True)
class Vocabulary:
    key: str  # the `system` value in a case, e.g. "matlab"
    ctor: str  # the constructor as its user writes it
    words: tuple[Word, ...]
    positional: int = 0  # leading words written positionally (MATLAB)
    fixed: Mapping[str, Any] = field(default_factory=dict)  # canonical facts, e.g. bias
    source: str = ""  # where its words are documented
    cli: bool = False  # command-line options (--dim-emb 512) rather than a call
    # The system's layer holds other parameters than the canonical projections (a gate, an
    # unbiased output projection): its analytic count of a derived `attention` mapping.
    count: Callable[[Mapping[str, Any]], int] | None = None
    note: str = ""  # what the same numbers mean beyond the canonical fields, shown on its row
    # Why the words cannot say the canonical head widths at all (MLA): derive refuses so.
    refusal: str = ""

    def word(self, sets: str) -> Word | None:
        return next((w for w in self.words if sets in w.sets), None)


# the Llama family's config words (Qwen3Config takes Llama's names for the same numbers)
LLAMA_WORDS = (
    word("hidden_size", "query_features", req=True),
    word("num_attention_heads", "num_heads", req=True), word("head_dim", "qk_head", "v_head"),
    word("num_key_value_heads", "num_kv_heads"), word("attention_bias", "bias"))
