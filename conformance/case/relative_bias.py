"""attention.relative_bias: T5's bucketed relative position bias, read and validated.

    attention.relative_bias: {num_buckets: 32, max_distance: 128, bidirectional: true,
                              relative_position: key_minus_query}

A learned table of num_buckets x H logits, looked up per (query, key) pair by the bucket of
their relative position and added to the scores before the softmax (Raffel et al. 2020,
"Exploring the Limits of Transfer Learning...", section 2.1; transformers/models/t5/
modeling_t5.py T5Attention._relative_position_bucket and compute_bias).  Half of a
direction's buckets hold exact distances, the other half logarithmically wider bins up to
max_distance, past which every distance shares the last bucket; `bidirectional` (T5's
encoder) gives keys after the query their own half of the buckets, unidirectional (its
decoder) puts every key after the query in bucket 0.  The relative position is key -
query (T5's memory_position - context_position) unless `relative_position` says query -
key (Transformer-XL's i - j), which a model trained that way needs.

The table is a canonical weight (oracle/canonical.py: drawn after every other array, only
when a case asks); positions come from inputs.position_offset and key_position_offset, so
a case reaches distances past max_distance with a few tokens.
"""
from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Mapping

from conformance.case.bounded import short

RELATIVE_POSITIONS = ("key_minus_query", "query_minus_key")
FIELDS = ("num_buckets", "max_distance", "bidirectional", "relative_position")
MAX_BUCKETS = 1024  # the exact bucket rule compares powers of n up to num_buckets / 2
MAX_DISTANCE = 2**31 - 1  # positions fit an int32 in every framework



@dataclass(frozen=True)
class RelativeBias:
    """T5's bucketed relative position bias: num_buckets x H learned logits."""

    num_buckets: int = 32
    max_distance: int = 128
    bidirectional: bool = True
    relative_position: str = "key_minus_query"  # one of RELATIVE_POSITIONS

    @property
    def direction_buckets(self) -> int:
        """Buckets per direction: half of them when bidirectional."""
        return self.num_buckets // 2 if self.bidirectional else self.num_buckets

    @property
    def max_exact(self) -> int:
        """Distances below this have a bucket each; above it the bins grow logarithmically."""
        return self.direction_buckets // 2


def read(r, att, inp, mask):
    """`att` with its relative_bias read from attention.relative_bias; `mask` as given."""
    raw = r.section("attention")["relative_bias"]
    at = "attention.relative_bias"
    if not isinstance(raw, Mapping):
        raise r.fail(at, "must be a mapping, e.g. {num_buckets: 32, max_distance: 128, "
                     f"bidirectional: true}} (T5's), got {short(raw)}")
    unknown = sorted(set(raw) - set(FIELDS))
    if unknown:
        raise r.fail(f"{at}.{unknown[0]}", f"unknown field; valid: {list(FIELDS)}")
    bias = RelativeBias(
        r.integer(raw, "num_buckets", f"{at}.num_buckets", 32, minimum=2),
        r.integer(raw, "max_distance", f"{at}.max_distance", 128, minimum=2),
        r.boolean(raw, "bidirectional", f"{at}.bidirectional", True),
        r.choice(raw, "relative_position", f"{at}.relative_position", "key_minus_query",
                 RELATIVE_POSITIONS))
    if bias.num_buckets > MAX_BUCKETS:
        raise r.fail(f"{at}.num_buckets", f"must be at most {MAX_BUCKETS}, got "
                     f"{bias.num_buckets}")
    if bias.max_exact < 1:
        raise r.fail(f"{at}.num_buckets", "must give each direction at least 2 buckets (one "
                     "exact, one logarithmic): >= 4 when bidirectional, >= 2 otherwise, got "
                     f"{bias.num_buckets}")
    if not bias.max_exact < bias.max_distance <= MAX_DISTANCE:
        raise r.fail(f"{at}.max_distance", f"must exceed the exact range ({bias.max_exact} "
                     "= buckets per direction // 2: the logarithmic bins run from there to "
                     f"max_distance) and fit an int32, got {bias.max_distance}")
    return replace(att, relative_bias=bias), mask
