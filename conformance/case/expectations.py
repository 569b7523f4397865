"""What a runner is expected to answer, as data: one `Expectations` per runner.

A case says what is asked; what each system answers lives with the system, in
`expectations/<runner>.yaml` (read and validated by conventions/expectations.py):
its fully-masked-row behaviour, stated once; its answers to the extreme-input cases,
keyed by case id; its known mismatches, each with the condition (`when`) under which
the bug shows; its pinned convention cells.  These types sit in the lowest layer so
that judging (compare/verdict.py, run/evaluate.py) receives them as data and never
imports the layer that reads the files.

A case may still pin what is a property of the case (`expect.behaviours`,
`expect.known_mismatch`): a pin in the case wins over the runner's file.
"""
from __future__ import annotations

import math
import struct
from dataclasses import dataclass, field
from typing import Any, Callable, Mapping

from conformance.case.masks import _visible_keys
from conformance.case.model import BIAS_VALUES, CAUSAL, DTYPES, FILLS, ROPE_SCALING_KINDS, Case


def _head_width_one_length_equals_heads(case: Case) -> bool:
    """A projection with head width 1 gets an input whose length equals its head count
    (> 1): the bias of shape (heads, 1) then looks like a bias vector of the sequence
    axis (cases/keras_head_width_one.yaml).  Query: qk_head_dim 1 and query_len ==
    num_heads; key: qk_head_dim 1, value: v_head_dim 1, with key_len == num_kv_heads."""
    a, i = case.attention, case.inputs
    query = a.qk_head_dim == 1 and a.num_heads > 1 and i.query_len == a.num_heads
    kv = a.num_kv_heads > 1 and i.key_len == a.num_kv_heads
    return query or (kv and 1 in (a.qk_head_dim, a.v_head_dim))


def _alibi_key_after_query(case: Case) -> bool:
    """ALiBi where the causal setting lets a query see a key at a later position:
    there a symmetric bias -slope * |i - j| (MLX's nn.ALiBi) and the paper's signed
    slope * (j - i) differ; on keys at or before the query they agree.  Positions are
    inputs.position_offset + t and key_position_offset + s; other masks are not read."""
    a, i = case.attention, case.inputs
    if not a.alibi:
        return False
    reach = {"none": i.key_len - 1, "upper_left": 0,  # latest key j - query t a row may see
             "lower_right": i.key_len - i.query_len}[case.mask.causal]
    return i.key_position_offset - i.position_offset + reach > 0


ROPE_SCALING_TABLES = ("linear", "dynamic", "yarn", "yarn_untruncated", "llama3",
                       "longrope_short", "longrope_long")


def _rope_scaling_table(case: Case) -> str | None:
    """The table a rope scaling asks at the case's positions: its type, yarn_untruncated
    where the ramp edges stay fractional, longrope_short or longrope_long by the largest
    position + 1 against original_max_positions (a case without one never matches)."""
    s = getattr(case.attention.rope, "scaling", None)
    if s is None:
        return None
    if s.kind == "yarn" and not s.truncate:
        return "yarn_untruncated"
    if s.kind != "longrope":
        return s.kind
    i = case.inputs
    length = max(i.position_offset + i.query_len, i.key_position_offset + i.key_len)
    return "longrope_long" if length > s.original_max_positions else "longrope_short"


def _scale_exact_in_float32(case: Case) -> bool:
    """The softmax scale (attention.scale, else 1/sqrt(qk_head_dim)) is a float32 number:
    a system that rounds it through float32 loses nothing (1/sqrt(4) = 0.5 is; 1/sqrt(8)
    is not)."""
    a = case.attention
    scale = a.scale if a.scale is not None else 1 / math.sqrt(a.qk_head_dim)
    return struct.unpack("f", struct.pack("f", scale))[0] == scale


def _float32(x: float) -> float:
    return struct.unpack("f", struct.pack("f", x))[0]


def _split_scale_exact_in_float32(case: Case) -> bool:
    """Splitting the softmax scale s over query and key through float32 loses nothing:
    float32(sqrt(float32(s)))**2 == s, so a system that multiplies q and k each by that
    float32 square root (onnxruntime's CPU Attention kernel in double) is exact.  With
    s = 1/sqrt(qk_head_dim) it holds at head widths 1, 16 and 256 only (1/sqrt(4) = 0.5
    is a float32 number, its square root is not)."""
    a = case.attention
    scale = a.scale if a.scale is not None else 1 / math.sqrt(a.qk_head_dim)
    return _float32(math.sqrt(_float32(scale))) ** 2 == scale


def _nonfinite_key_masked(case: Case) -> bool:
    """A NaN or infinity placed in the key tensor where some query row of its item may not
    look: behind key padding, past row 0's causal reach, a 0 in its column of an explicit
    mask; masked rows, a random mask or a window count as masking (the oracle finds their
    exact reach).  A key every query attends makes every row non-finite in the reference
    too, so a system that spreads a masked key's NaN differs only here."""
    i, m = case.inputs, case.mask
    for n in (n for n in i.nonfinite if n.tensor == "key"):
        if m.masked_rows or m.attn_mask_density is not None or m.window is not None:
            return True
        valid = i.key_len if m.key_padding is None else m.key_padding[n.batch]
        if n.position >= min(valid, _visible_keys(m.causal, 0, i.query_len, i.key_len)):
            return True
        matrix = m.attn_mask_matrix
        rows = () if matrix is None else (
            matrix[n.batch] if isinstance(matrix[0][0], tuple) else matrix)
        if any(not row[n.position] for row in rows):
            return True
    return False


@dataclass(frozen=True)
class Condition:
    """One word of the `when:` vocabulary: what it reads from a case, and its values."""

    doc: str
    read: Callable[[Case], Any]
    values: tuple = (True, False)  # the values it may be compared with


CONDITIONS: dict[str, Condition] = {
    "dtype": Condition("the case's dtype", lambda c: c.inputs.dtype, DTYPES),
    "bias": Condition("the projections carry biases", lambda c: c.attention.bias),
    "bias_values": Condition("random biases, or zeros", lambda c: c.weights.bias_values,
                             BIAS_VALUES),
    "self_attention": Condition("one tensor is query, key and value",
                                lambda c: c.inputs.self_attention),
    "grouped": Condition("fewer key/value heads than query heads", lambda c: c.grouped),
    "causal": Condition("the causal alignment", lambda c: c.mask.causal, CAUSAL),
    "fill": Condition("the fill of the additive float mask (mask.fill; a case without one "
                      "never matches)", lambda c: c.mask.fill, FILLS),
    "fully_masked_rows": Condition("a query row may attend to no key (derived from the mask)",
                                   lambda c: c.has_fully_masked_rows),
    "nonfinite_key": Condition("a NaN or infinity is placed in the key tensor (inputs.nonfinite)",
                               lambda c: any(n.tensor == "key" for n in c.inputs.nonfinite)),
    "nonfinite_key_masked": Condition(_nonfinite_key_masked.__doc__.split(":")[0],
                                      _nonfinite_key_masked),
    "alibi_key_after_query": Condition(_alibi_key_after_query.__doc__.split(":")[0],
                                       _alibi_key_after_query),
    "scale_exact_in_float32": Condition(_scale_exact_in_float32.__doc__.split(":")[0],
                                        _scale_exact_in_float32),
    "split_scale_exact_in_float32": Condition(
        _split_scale_exact_in_float32.__doc__.split(":")[0], _split_scale_exact_in_float32),
    "rope_scaling": Condition("the rope's frequency scaling type (attention.rope.scaling; a "
                              "case without one never matches)", lambda c: getattr(
                                  c.attention.rope, "scaling", None) and
                              c.attention.rope.scaling.kind, ROPE_SCALING_KINDS),
    "rope_scaling_table": Condition(_rope_scaling_table.__doc__.split(":")[0],
                                    _rope_scaling_table, ROPE_SCALING_TABLES),
    "position_offset": Condition("positions start past 0 (inputs.position_offset or "
                                 "key_position_offset)",
                                 lambda c: bool(c.inputs.position_offset
                                                or c.inputs.key_position_offset)),
    "chunk": Condition("chunked attention (mask.chunk)", lambda c: c.mask.chunk is not None),
    "temperature": Condition("an attention temperature (attention.temperature)",
                             lambda c: c.attention.temperature is not None),
    "head_width_one_length_equals_heads": Condition(
        _head_width_one_length_equals_heads.__doc__.split("(")[0].strip(),
        _head_width_one_length_equals_heads),
}


@dataclass(frozen=True)
class KnownMismatch:
    """A known, understood mismatch of a runner, under a condition."""

    when: Mapping[str, tuple]  # condition word -> the values it matches (any of them)
    reason: str  # why, with a link
    strict: bool = True  # a matching case that passes fails (the bug was fixed)

    def matches(self, case: Case) -> bool:
        return all(CONDITIONS[k].read(case) in values for k, values in self.when.items())


@dataclass(frozen=True)
class Expectations:
    """One runner's expectations file, validated (conventions/expectations.py)."""

    runner: str
    path: str = ""  # the file (it may not exist yet: a runner with nothing pinned)
    fully_masked_row: str | None = None  # behaviour on a query row with no key
    nonfinite_input: Mapping[str, str] = field(default_factory=dict)  # case id -> behaviour
    known_mismatches: tuple[KnownMismatch, ...] = ()
    conventions: Mapping[str, str] = field(default_factory=dict)  # axis id -> word


@dataclass(frozen=True)
class Declared:
    """What is declared for one (case, runner): the case's pins over the runner's file."""

    fully_masked_row: str | None = None
    nonfinite_input: str | None = None
    known_mismatch: str = ""  # the reason, "" when none applies
    strict: bool = True
    source: str = ""  # where the known mismatch is declared, to remove it from
    file: str = ""  # the runner's expectations file, where an answer may be added
    # a runner whose answers are reported, never pinned (the user's attention, runners/
    # target/): an undeclared behaviour is what it observed, not a failure
    observing: bool = False


def declared(case: Case, runner: str, expectations: Expectations | None) -> Declared:
    """The behaviours and known mismatch that judge (case, runner)."""
    e = expectations or Expectations(runner)
    pins = case.expect.behaviours
    masked = pins.get("fully_masked_row", {}).get(runner, e.fully_masked_row)
    nonfinite = pins.get("nonfinite_input", {}).get(runner, e.nonfinite_input.get(case.id))
    reason, strict, source = case.expect.known_mismatch.get(runner, ""), True, ""
    if reason:
        source = f"expect.known_mismatch.{runner} in {case.path}"
    else:
        for n, known in enumerate(e.known_mismatches):
            if known.matches(case):
                reason, strict = known.reason, known.strict
                source = f"known_mismatches[{n}] in {e.path or 'its expectations file'}"
                break
    return Declared(masked, nonfinite, reason, strict, source, e.path)
