"""The case types: frozen dataclasses, constants, tolerance defaults, budgets,
and the bounded reading of a case file into plain data that the limits impose.

No imports from the rest of the package, so that anything may import it;
`conformance/case.py` validates documents into these types and re-exports
every public name.
"""
from __future__ import annotations

import hashlib
import os
import reprlib
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Mapping

import yaml
from yaml.composer import Composer
from yaml.constructor import SafeConstructor
from yaml.nodes import MappingNode, ScalarNode, SequenceNode
from yaml.resolver import Resolver

DTYPES = ("float32", "float64", "float16", "bfloat16")
CAUSAL = ("none", "upper_left", "lower_right")
# Edge case -> what a system does there, each label checked numerically (compare.py)
BEHAVIOURS = {
    "fully_masked_row": ("nan", "zeros", "uniform", "finite_other", "error"),
    "nonfinite_input": ("nan_propagates", "contained", "partial", "nan_spreads", "overflow_inf",
                        "error")}
BIAS_VALUES = ("random", "zeros")

# Case files are untrusted input: limits on what reading one may cost.
MAX_FILE_BYTES = 1_000_000  # a case file is a few KB; refuse anything over 1 MB
MAX_YAML_NODES = 10_000  # scalars, sequences, mappings and aliases as written
MAX_EXPANDED_NODES = 100_000  # the same with every alias expanded
MAX_DEPTH = 32  # nesting of sequences and mappings (aliases expanded)
MAX_MESSAGE = 1_000  # characters of a CaseError message
# Element budgets (counted arithmetically, see element_counts): the case's
# weights, and every activation the float64 reference holds at once.
DEFAULT_MAX_WEIGHT_ELEMENTS = 50_000_000
DEFAULT_MAX_ACTIVATION_ELEMENTS = 50_000_000
WEIGHT_ENV = "CONFORMANCE_MAX_WEIGHT_ELEMENTS"
ACTIVATION_ENV = "CONFORMANCE_MAX_ACTIVATION_ELEMENTS"
# Those budgets bound the numerical comparison (counting.py: a case over them
# loads and gets a count-only row); the loader refuses only absurd sizes, far above.
LOAD_LIMIT_ELEMENTS = 10**12

# The field names of the format (conformance/case.schema.json publishes the same).
_TOP = {"id", "title", "description", "source", "tags", "attention", "inputs", "mask",
        "expect", "weights", "typed"}
_SECTIONS = {
    "attention": {"num_heads", "num_kv_heads", "query_features", "key_features",
                  "value_features", "qk_head_dim", "v_head_dim", "output_features", "bias",
                  "scale"},
    "inputs": {"batch", "query_len", "key_len", "self_attention", "dtype", "seed", "scale",
               "nonfinite"},
    "mask": {"causal", "key_padding", "attn_mask", "masked_rows"},
    "expect": {"parameters", "tolerance", "behaviours", "known_mismatch"},
    "weights": {"bias_values"},
}

_REPR = reprlib.Repr()
_REPR.maxlevel, _REPR.maxstring, _REPR.maxother = 3, 80, 80
_REPR.maxlist = _REPR.maxtuple = _REPR.maxdict = _REPR.maxset = 8


def cut(text: str, limit: int = 200) -> str:
    """`text` shortened to at most `limit` characters, with an ellipsis."""
    return text if len(text) <= limit else text[:limit - 3] + "..."


def short(value: Any, limit: int = 200) -> str:
    """A bounded repr: never expands more than a few levels and items of `value`."""
    try:
        text = _REPR.repr(value)
    except Exception:  # a repr that fails must not hide the real error
        text = f"<{type(value).__name__}>"
    return cut(text, limit)


class CaseError(ValueError):
    """A case file that cannot be used, with where and how to fix it.

    The message is bounded (MAX_MESSAGE characters) whatever the file holds."""

    def __init__(self, path: Path | str, case_id: str | None, field_name: str, problem: str):
        self.path, self.case_id = cut(str(path), 300), case_id
        self.field_name, self.problem = cut(str(field_name), 200), str(problem)
        where = f"{self.path}: case {short(case_id, 120)}" if case_id else self.path
        super().__init__(cut(f"{where}: field '{self.field_name}': {self.problem}", MAX_MESSAGE))


@dataclass(frozen=True)
class Budget:
    """Most elements a case may ask for; refused over it, before allocating."""

    weights: int = DEFAULT_MAX_WEIGHT_ELEMENTS
    activations: int = DEFAULT_MAX_ACTIVATION_ELEMENTS

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None) -> "Budget":
        env = os.environ if environ is None else environ
        values = []
        for name, default in ((WEIGHT_ENV, cls.weights), (ACTIVATION_ENV, cls.activations)):
            text = env.get(name, "").strip().replace("_", "")
            try:
                value = int(text) if text else default
            except ValueError:
                value = -1
            if value < 1:
                raise ValueError(f"{name}={short(env.get(name))}: must be a positive integer "
                                 "(a count of elements)")
            values.append(value)
        return cls(*values)


@dataclass(frozen=True)
class Attention:
    """Sizes in the suite's own words; every runner maps them to its own."""

    num_heads: int  # H: query heads
    num_kv_heads: int  # H_kv: key/value heads; < H means grouped-query
    query_features: int  # E_q: last dim of the query input
    key_features: int  # E_k: last dim of the key input
    value_features: int  # E_v: last dim of the value input
    qk_head_dim: int  # d_k: per-head width of projected queries and keys
    v_head_dim: int  # d_v: per-head width of projected values
    output_features: int  # E_o: last dim of the output
    bias: bool  # q, k, v and output projections carry biases
    scale: float | None = field(default=None, repr=False)  # softmax scale; None: 1/sqrt(d_k)


@dataclass(frozen=True)
class Inputs:
    batch: int
    query_len: int  # T
    key_len: int  # S
    self_attention: bool  # one tensor serves as query, key and value
    dtype: str  # one of DTYPES: what the runner computes in
    seed: int  # seeds every array of the case (weights.py)
    scale: float = field(default=1.0, repr=False)  # multiplies q, k, v inputs (case_extreme)
    nonfinite: tuple = field(default=(), repr=False)  # case_extreme.NonFinite entries


@dataclass(frozen=True)
class Mask:
    """Masks in canonical polarity: True / 1 = may attend."""

    causal: str  # one of CAUSAL; lower_right aligns the diagonal to the last key
    key_padding: tuple[int, ...] | None  # valid key length per batch item
    attn_mask_density: float | None  # random mask: probability a position may attend
    attn_mask_matrix: tuple | None  # explicit 0/1 matrix, (T, S) or (B, T, S)
    masked_rows: tuple[int, ...]  # query rows with every key masked (edge case)


@dataclass(frozen=True)
class Tolerance:
    rtol: float
    atol: float


@dataclass(frozen=True)
class Expect:
    parameters: int | None  # the analytic formula must give this
    parameters_by_runner: Mapping[str, int]  # a runner's own count, where it differs
    tolerance: Mapping[str, Tolerance]  # overrides of DEFAULT_TOLERANCE by dtype
    behaviours: Mapping[str, Mapping[str, str]]  # edge case -> runner -> behaviour
    # runner -> why it is known to mismatch (with a link): the item is a strict
    # xfail, and passing again fails until the entry is removed
    known_mismatch: Mapping[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class Weights:
    bias_values: str  # "random", or "zeros" as the frameworks' default init leaves them


@dataclass(frozen=True)
class Case:
    id: str
    title: str
    description: str
    source: str
    tags: tuple[str, ...]
    attention: Attention
    inputs: Inputs
    mask: Mask
    expect: Expect
    weights: Weights
    typed: Mapping[str, Any]  # the numbers a user typed in their framework
    path: str = field(default="", compare=False)  # file it came from

    def fingerprint(self) -> str:
        """A hash of the case content (not its file), for caches."""
        text = repr(replace(self, path=""))  # scales are out of repr: unset keeps old keys
        extra = "" if self.attention.scale is None else f"|scale={self.attention.scale!r}"
        i = self.inputs  # extreme inputs (case_extreme.py), only when set
        extra += f"|inputs={i.scale!r},{i.nonfinite!r}" if i.scale != 1 or i.nonfinite else ""
        return hashlib.sha256((text + extra).encode()).hexdigest()[:16]

    @property
    def grouped(self) -> bool:
        return self.attention.num_kv_heads < self.attention.num_heads

    @property
    def has_fully_masked_rows(self) -> bool:
        return bool(self.mask.masked_rows)

    @property
    def has_non_causal_mask(self) -> bool:
        """Key padding, an explicit or random mask, or masked rows: what systems with
        their own causal switch take as a mask argument.  Read from the case alone,
        so translating a case allocates nothing."""
        m = self.mask
        return (m.key_padding is not None or m.attn_mask_density is not None
                or m.attn_mask_matrix is not None or bool(m.masked_rows))


def sizes_counts(a: Attention, i: Inputs) -> dict[str, int]:
    """Element counts of a configuration, by arithmetic alone (nothing allocated).

    `weights` is the analytic parameter count (projections and, with bias, their
    biases).  `activations` sums what the float64 reference holds at once: the
    inputs (B*T*E_q + B*S*(E_k + E_v); one tensor for self-attention), the
    projected q, k, v, the scores and the mask (B*H*T*S each), the per-head
    context and the output."""
    h, hkv, dk, dv = a.num_heads, a.num_kv_heads, a.qk_head_dim, a.v_head_dim
    b, t, s = i.batch, i.query_len, i.key_len
    weights = h * a.query_features * dk + hkv * (a.key_features * dk + a.value_features * dv)
    weights += h * dv * a.output_features
    if a.bias:
        weights += h * dk + hkv * (dk + dv) + a.output_features
    inputs = b * t * a.query_features
    if not i.self_attention:
        inputs += b * s * (a.key_features + a.value_features)
    projections = b * (h * t * dk + hkv * s * (dk + dv))
    scores = b * h * t * s
    outputs = b * h * t * dv + b * t * a.output_features
    return {"weights": weights, "inputs": inputs, "projections": projections,
            "scores": scores, "outputs": outputs,
            "activations": inputs + projections + 2 * scores + outputs}


def element_counts(case: Case) -> dict[str, int]:
    """Weights and activation element counts of `case`, without allocating them
    (so a GPT-3 sized layer can be counted without running it); see sizes_counts."""
    return sizes_counts(case.attention, case.inputs)


# Default tolerances by dtype, modelled on torch.testing.assert_close and
# widened for half precision, where attention chains several reductions.
DEFAULT_TOLERANCE = {
    "float64": Tolerance(rtol=1e-12, atol=1e-12), "float32": Tolerance(rtol=1.3e-6, atol=1e-5),
    "float16": Tolerance(rtol=1e-3, atol=2e-3), "bfloat16": Tolerance(rtol=1.6e-2, atol=2e-2)}


def tolerance_for(case: Case) -> Tolerance:
    return case.expect.tolerance.get(case.inputs.dtype, DEFAULT_TOLERANCE[case.inputs.dtype])


try:  # libyaml scans and parses in C (fast on big hostile files); composing stays here
    from yaml._yaml import CParser as _CParser
except ImportError:  # pragma: no cover - PyYAML built without libyaml
    _CParser = None

_TAG = "tag:yaml.org,2002:"
_PLAIN_TAGS = {_TAG + t for t in ("str", "int", "float", "bool", "null", "seq", "map", "merge")}


# ---- Bounded reading: refused while composing, before any Python object is built ----
class _Refused(Exception):
    def __init__(self, field_name: str, problem: str, case_id: str | None):
        super().__init__(problem)
        self.field_name, self.problem, self.case_id = field_name, problem, case_id


class _Bounded:
    """Composer hooks: count nodes as written and as expanded through aliases,
    bound the nesting, refuse recursive aliases, odd tags and non-string keys."""

    def _setup(self) -> None:
        self._count, self._depth, self._path = 0, 0, []
        self._measured: dict[int, tuple[int, int]] = {}  # id(node) -> (expanded size, depth)
        self._ids: dict[tuple, str] = {}  # case prefix -> id, for messages

    def _refuse(self, problem: str, key: str | None = None) -> _Refused:
        parts = [p for p in self._path + [key] if p not in (None, "(key)")]
        dotted = "".join(p if p.startswith("[") else "." + p for p in parts).lstrip(".")
        prefix = tuple(parts[:2]) if parts[:1] == ["cases"] else ()
        return _Refused(dotted or "(document)", problem, self._ids.get(prefix))

    def compose_node(self, parent, index):
        label = (index.value if isinstance(index, ScalarNode) else f"[{index}]"
                 if isinstance(index, int) else "(key)" if parent is not None else None)
        self._path.append(cut(str(label), 60) if label is not None else None)
        self._count, self._depth = self._count + 1, self._depth + 1
        try:
            if self._count > MAX_YAML_NODES:
                raise self._refuse(f"the document holds more than {MAX_YAML_NODES:,} YAML "
                                   "nodes; a case file needs a few hundred")
            if self._depth > MAX_DEPTH:
                raise self._refuse(f"nested deeper than {MAX_DEPTH} levels")
            if self.check_event(yaml.AliasEvent):
                target = self.anchors.get(self.peek_event().anchor)
                if target is not None and id(target) not in self._measured:
                    raise self._refuse("a recursive alias (a node that contains itself)")
            node = super().compose_node(parent, index)
            self._check(node, index is None and isinstance(parent, MappingNode))
            return node
        finally:
            self._depth -= 1
            self._path.pop()

    def _check(self, node, is_key: bool) -> None:
        if is_key and not (isinstance(node, ScalarNode) and node.tag in (
                _TAG + "str", _TAG + "merge")):
            raise self._refuse(f"keys must be strings, got {short(_node_text(node))}; quote it")
        if id(node) in self._measured:  # an alias of a node measured already
            return
        if node.tag not in _PLAIN_TAGS:
            raise self._refuse(f"{short(_node_text(node))} has YAML type {short(node.tag, 60)}; "
                               "only strings, numbers, booleans, null, lists and mappings "
                               "are allowed (quote dates and other text)")
        if node.tag == _TAG + "int" and len(node.value) > 30:
            raise self._refuse(f"integer with {len(node.value)} digits is too large")
        children = (node.value if isinstance(node, SequenceNode) else
                    [n for pair in node.value for n in pair] if isinstance(node, MappingNode)
                    else [])
        sizes = [self._measured.get(id(c)) for c in children]
        if None in sizes:
            raise self._refuse("a recursive alias (a node that contains itself)")
        size = 1 + sum(s for s, _ in sizes)
        depth = 1 + max((d for _, d in sizes), default=0)
        if size > MAX_EXPANDED_NODES or depth > MAX_DEPTH:
            raise self._refuse(f"aliases expand this to {size:,} nodes, depth {depth} "
                               f"(limits {MAX_EXPANDED_NODES:,}, {MAX_DEPTH})")
        if isinstance(node, MappingNode):
            seen: set[str] = set()
            for key, _ in node.value:
                if key.tag == _TAG + "str" and key.value in seen:
                    raise self._refuse("duplicate key", cut(key.value, 60))
                seen.add(key.value)
        self._measured[id(node)] = (size, depth)
        parts = [p for p in self._path if p is not None]
        if parts[-1:] == ["id"] and isinstance(node, ScalarNode) and len(parts) in (1, 3):
            self._ids[tuple(parts[:-1])] = node.value


def _node_text(node) -> str:
    return node.value if isinstance(node, ScalarNode) else type(node).__name__


class _PyLoader(_Bounded, yaml.SafeLoader):
    def __init__(self, stream):
        super().__init__(stream)
        self._setup()


if _CParser is not None:
    class _CLoader(_Bounded, Composer, _CParser, SafeConstructor, Resolver):
        def __init__(self, stream):
            _CParser.__init__(self, stream)
            Composer.__init__(self)
            SafeConstructor.__init__(self)
            Resolver.__init__(self)
            self._setup()

_LOADER = _CLoader if _CParser is not None else _PyLoader


def _read_text(path: Path) -> str:
    if not path.is_file():
        raise CaseError(path, None, "(file)", "not a regular file")
    try:
        with open(path, "rb") as f:
            data = f.read(MAX_FILE_BYTES + 1)
    except OSError as exc:
        raise CaseError(path, None, "(file)", f"cannot be read: {short(exc.strerror)}") from None
    if len(data) > MAX_FILE_BYTES:
        raise CaseError(path, None, "(file)", f"larger than {MAX_FILE_BYTES:,} bytes; "
                        "a case file is a few KB")
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        line = data.count(b"\n", 0, exc.start) + 1
        raise CaseError(path, None, "(encoding)",
                        f"not UTF-8: byte {short(data[exc.start:exc.start + 1])} at offset "
                        f"{exc.start} (line {line}); save the file as UTF-8") from None


def read_document(path: Path | str) -> Any:
    """The YAML document of `path` as plain data (str keys; str, int, float, bool,
    None, list and dict values), read within the limits above, or a CaseError."""
    text = _read_text(Path(path))
    try:  # the pure-Python reader checks every character when it is built: inside the try
        return _LOADER(text).get_single_data()
    except _Refused as exc:
        raise CaseError(path, exc.case_id, exc.field_name, exc.problem) from None
    except yaml.YAMLError as exc:
        raise CaseError(path, None, "(yaml)", f"not valid YAML: {cut(str(exc), 400)}") from None
    except (ValueError, TypeError, OverflowError, RecursionError, MemoryError) as exc:
        raise CaseError(path, None, "(yaml)",
                        f"not valid YAML: {type(exc).__name__}: {cut(str(exc), 300)}") from None
