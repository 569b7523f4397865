"""The case format: one framework-neutral description of an attention setup.

A case file (`cases/*.yaml`) holds one case (a mapping) or several under a
top-level `cases:` list.  Everything is validated here, in one place, so that a
runner can trust every field it reads.  Every error names the file, the case
id, the field and what would be valid, because the person reading it is
usually someone who just dropped a new YAML file into `cases/`.

The field names are the public interface; `conformance/case.schema.json`
publishes the same format for editors (a test keeps the two in sync).
"""
from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Mapping

import yaml

DTYPES = ("float32", "float64", "float16", "bfloat16")
CAUSAL = ("none", "upper_left", "lower_right")
# What a system does with a query row whose every key is masked.  Each value
# is a hypothesis the comparator can check numerically (see compare.py).
BEHAVIOURS = {
    "fully_masked_row": ("nan", "zeros", "uniform", "finite_other", "error"),
}
BIAS_VALUES = ("random", "zeros")
_SLUG = re.compile(r"^[a-z0-9][a-z0-9._-]*$")


class CaseError(ValueError):
    """A case file that cannot be used, with where and how to fix it."""

    def __init__(self, path: Path | str, case_id: str | None, field_name: str, problem: str):
        self.path, self.case_id, self.field_name = str(path), case_id, field_name
        where = f"{self.path}: case {case_id!r}" if case_id else str(self.path)
        super().__init__(f"{where}: field '{field_name}': {problem}")


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


@dataclass(frozen=True)
class Inputs:
    batch: int
    query_len: int  # T
    key_len: int  # S
    self_attention: bool  # one tensor serves as query, key and value
    dtype: str  # one of DTYPES: what the runner computes in
    seed: int  # seeds every array of the case (weights.py)


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
        return hashlib.sha256(repr(replace(self, path="")).encode()).hexdigest()[:16]

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


# Default tolerances by dtype, modelled on torch.testing.assert_close and
# widened for half precision, where attention chains several reductions.
DEFAULT_TOLERANCE = {
    "float64": Tolerance(rtol=1e-12, atol=1e-12),
    "float32": Tolerance(rtol=1.3e-6, atol=1e-5),
    "float16": Tolerance(rtol=1e-3, atol=2e-3),
    "bfloat16": Tolerance(rtol=1.6e-2, atol=2e-2),
}


def tolerance_for(case: Case) -> Tolerance:
    return case.expect.tolerance.get(case.inputs.dtype, DEFAULT_TOLERANCE[case.inputs.dtype])


# --------------------------------------------------------------------------
# Loading and validation
# --------------------------------------------------------------------------
_TOP = {"id", "title", "description", "source", "tags", "attention", "inputs", "mask",
        "expect", "weights", "typed"}
_SECTIONS = {
    "attention": {"num_heads", "num_kv_heads", "query_features", "key_features",
                  "value_features", "qk_head_dim", "v_head_dim", "output_features", "bias"},
    "inputs": {"batch", "query_len", "key_len", "self_attention", "dtype", "seed"},
    "mask": {"causal", "key_padding", "attn_mask", "masked_rows"},
    "expect": {"parameters", "tolerance", "behaviours", "known_mismatch"},
    "weights": {"bias_values"},
}


class _Reader:
    """Reads one case mapping, raising CaseError with full context."""

    def __init__(self, path: Path, raw: Mapping[str, Any], case_id: str | None):
        self.path, self.raw, self.case_id = path, raw, case_id

    def fail(self, field_name: str, problem: str) -> CaseError:
        return CaseError(self.path, self.case_id, field_name, problem)

    def section(self, name: str) -> Mapping[str, Any]:
        value = self.raw.get(name, {})
        if value is None:
            value = {}
        if not isinstance(value, Mapping):
            raise self.fail(name, f"must be a mapping, got {type(value).__name__}")
        unknown = sorted(set(value) - _SECTIONS[name])
        if unknown:
            valid = sorted(_SECTIONS[name])
            raise self.fail(f"{name}.{unknown[0]}",
                            f"unknown field; valid fields of '{name}' are {valid}")
        return value

    def integer(self, sec: Mapping, name: str, dotted: str, default: Any = None,
                minimum: int = 1) -> Any:
        value = sec.get(name, default)
        if value is None:
            if default is None and name not in sec:
                raise self.fail(dotted, "is required (an integer)")
            return None
        if isinstance(value, bool) or not isinstance(value, int):
            raise self.fail(dotted, f"must be an integer, got {value!r}")
        if value < minimum:
            raise self.fail(dotted, f"must be >= {minimum}, got {value}")
        return value

    def boolean(self, sec: Mapping, name: str, dotted: str, default: bool) -> bool:
        value = sec.get(name, default)
        if not isinstance(value, bool):
            raise self.fail(dotted, f"must be true or false, got {value!r}")
        return value

    def choice(self, sec: Mapping, name: str, dotted: str, default: str, options) -> str:
        value = sec.get(name, default)
        if value not in options:
            raise self.fail(dotted, f"must be one of {list(options)}, got {value!r}")
        return value

    def text(self, name: str, default: str = "") -> str:
        value = self.raw.get(name, default)
        if not isinstance(value, str):
            raise self.fail(name, f"must be a string, got {value!r}")
        return value.strip()


def _attention(r: _Reader) -> Attention:
    s = r.section("attention")
    h = r.integer(s, "num_heads", "attention.num_heads")
    hkv = r.integer(s, "num_kv_heads", "attention.num_kv_heads", h)
    eq = r.integer(s, "query_features", "attention.query_features")
    ek = r.integer(s, "key_features", "attention.key_features", eq)
    ev = r.integer(s, "value_features", "attention.value_features", ek)
    if h % hkv:
        raise r.fail("attention.num_kv_heads",
                     f"num_heads ({h}) must be a multiple of num_kv_heads ({hkv})")
    if "qk_head_dim" not in s and eq % h:
        raise r.fail("attention.qk_head_dim",
                     f"defaults to query_features / num_heads, but {eq} / {h} does not "
                     "divide; give qk_head_dim explicitly")
    dk = r.integer(s, "qk_head_dim", "attention.qk_head_dim", eq // h)
    dv = r.integer(s, "v_head_dim", "attention.v_head_dim", dk)
    eo = r.integer(s, "output_features", "attention.output_features", eq)
    return Attention(h, hkv, eq, ek, ev, dk, dv, eo, r.boolean(s, "bias", "attention.bias", True))


def _inputs(r: _Reader, att: Attention) -> Inputs:
    s = r.section("inputs")
    t = r.integer(s, "query_len", "inputs.query_len", 5)
    inputs = Inputs(
        batch=r.integer(s, "batch", "inputs.batch", 2),
        query_len=t,
        key_len=r.integer(s, "key_len", "inputs.key_len", t),
        self_attention=r.boolean(s, "self_attention", "inputs.self_attention", False),
        dtype=r.choice(s, "dtype", "inputs.dtype", "float32", DTYPES),
        seed=r.integer(s, "seed", "inputs.seed", 0, minimum=0),
    )
    if inputs.self_attention:
        if not att.query_features == att.key_features == att.value_features:
            raise r.fail("inputs.self_attention",
                         "one tensor is query, key and value, so attention.query_features, "
                         "key_features and value_features must be equal; got "
                         f"{att.query_features}, {att.key_features}, {att.value_features}")
        if inputs.key_len != inputs.query_len:
            raise r.fail("inputs.self_attention", "requires key_len == query_len, got "
                         f"{inputs.key_len} != {inputs.query_len}")
    return inputs


def _int_list(r: _Reader, value: Any, dotted: str) -> tuple[int, ...]:
    if not isinstance(value, list) or not all(
            isinstance(v, int) and not isinstance(v, bool) for v in value):
        raise r.fail(dotted, f"must be a list of integers, got {value!r}")
    return tuple(value)


def _matrix(r: _Reader, value: Any, inputs: Inputs) -> tuple:
    import numpy as np

    try:
        arr = np.array(value)
    except ValueError:
        arr = np.array([], dtype=object)
    t, s, b = inputs.query_len, inputs.key_len, inputs.batch
    if arr.shape not in {(t, s), (b, t, s)} or not np.isin(arr, (0, 1)).all():
        raise r.fail("mask.attn_mask",
                     f"an explicit mask must be a 0/1 matrix of shape (query_len, key_len) = "
                     f"({t}, {s}) or (batch, query_len, key_len) = ({b}, {t}, {s}); "
                     f"got shape {arr.shape}")
    return tuple(map(tuple, arr.reshape(-1, s).tolist())) if arr.ndim == 2 else tuple(
        tuple(map(tuple, m)) for m in arr.tolist())


def _mask(r: _Reader, inputs: Inputs) -> Mask:
    s = r.section("mask")
    causal = r.choice(s, "causal", "mask.causal", "none", CAUSAL)
    key_padding = None
    if s.get("key_padding") is not None:
        key_padding = _int_list(r, s["key_padding"], "mask.key_padding")
        if len(key_padding) != inputs.batch:
            raise r.fail("mask.key_padding",
                         f"needs one valid key length per batch item: {inputs.batch} "
                         f"values, got {len(key_padding)}")
        if not all(1 <= n <= inputs.key_len for n in key_padding):
            raise r.fail("mask.key_padding",
                         f"each valid length must lie in 1..key_len ({inputs.key_len}); "
                         "use masked_rows for the fully masked edge case")
    density = matrix = None
    am = s.get("attn_mask")
    if isinstance(am, Mapping):
        if set(am) != {"random"} or isinstance(am["random"], bool) or not isinstance(
                am["random"], (int, float)) or not 0 < am["random"] <= 1:
            raise r.fail("mask.attn_mask",
                         "a random mask is {random: density} with 0 < density <= 1 "
                         "(the probability that a position may attend)")
        density = float(am["random"])
    elif am is not None:
        matrix = _matrix(r, am, inputs)
    rows = _int_list(r, s.get("masked_rows", []), "mask.masked_rows")
    if not all(0 <= i < inputs.query_len for i in rows):
        raise r.fail("mask.masked_rows",
                     f"query indices must lie in 0..{inputs.query_len - 1}, got {list(rows)}")
    return Mask(causal, key_padding, density, matrix, tuple(sorted(set(rows))))


def _number(r: _Reader, value: Any, dotted: str) -> float:
    """A number >= 0.  YAML 1.1 reads `1e-15` (no dot) as a string: accept it."""
    try:
        number = float(value) if not isinstance(value, bool) else -1.0
    except (TypeError, ValueError):
        number = -1.0
    if not number >= 0:
        raise r.fail(dotted, f"must be a number >= 0, got {value!r}")
    return number


def _expect(r: _Reader, mask: Mask) -> Expect:
    s = r.section("expect")
    params, by_runner = s.get("parameters"), {}
    if isinstance(params, Mapping):
        for runner, count in params.items():
            r.integer(params, runner, f"expect.parameters.{runner}", minimum=0)
        by_runner, params = dict(params), params.get("formula")
        by_runner.pop("formula", None)
    elif params is not None:
        r.integer(s, "parameters", "expect.parameters", minimum=0)
    tol = {}
    for dtype, spec in (s.get("tolerance") or {}).items():
        if dtype not in DTYPES:
            raise r.fail(f"expect.tolerance.{dtype}", f"dtype must be one of {list(DTYPES)}")
        if not isinstance(spec, Mapping) or set(spec) != {"rtol", "atol"}:
            raise r.fail(f"expect.tolerance.{dtype}",
                         "must be {rtol: number >= 0, atol: number >= 0}")
        tol[dtype] = Tolerance(*(_number(r, spec[k], f"expect.tolerance.{dtype}.{k}")
                                 for k in ("rtol", "atol")))
    behaviours = {}
    for edge, per_runner in (s.get("behaviours") or {}).items():
        if edge not in BEHAVIOURS:
            raise r.fail(f"expect.behaviours.{edge}",
                         f"unknown edge case; known: {sorted(BEHAVIOURS)}")
        if not isinstance(per_runner, Mapping):
            raise r.fail(f"expect.behaviours.{edge}", "must map runner name -> behaviour")
        for runner, value in per_runner.items():
            if value not in BEHAVIOURS[edge]:
                raise r.fail(f"expect.behaviours.{edge}.{runner}",
                             f"must be one of {list(BEHAVIOURS[edge])}, got {value!r}")
        behaviours[edge] = dict(per_runner)
    if "fully_masked_row" in behaviours and not mask.masked_rows:
        raise r.fail("expect.behaviours.fully_masked_row",
                     "declares a fully masked row behaviour, but mask.masked_rows is empty")
    known = s.get("known_mismatch") or {}
    if not isinstance(known, Mapping) or not all(
            isinstance(v, str) and len(v.strip()) >= 10 for v in known.values()):
        raise r.fail("expect.known_mismatch",
                     "must map runner name -> the reason it is known to mismatch "
                     "(a sentence, ideally with a link), e.g. {onnx.attention-op.ort: 'ORT "
                     "computes double Attention in float32: <issue link>'}")
    return Expect(params, by_runner, tol, behaviours, dict(known))


def parse_case(raw: Any, path: Path | str, index: int = 0) -> Case:
    """Validate one case mapping; raises CaseError naming file, case and field."""
    path = Path(path)
    if not isinstance(raw, Mapping):
        raise CaseError(path, None, f"cases[{index}]",
                        f"each case must be a mapping, got {type(raw).__name__}")
    case_id = raw.get("id")
    r = _Reader(path, raw, case_id if isinstance(case_id, str) else None)
    if case_id is None:
        raise r.fail("id", f"is required (case #{index} in the file): a lowercase slug")
    if not isinstance(case_id, str) or not _SLUG.match(case_id):
        raise r.fail("id", f"must be a lowercase slug (a-z, 0-9, '.', '_', '-'), got {case_id!r}")
    unknown = sorted(set(raw) - _TOP)
    if unknown:
        raise r.fail(unknown[0], f"unknown field; valid top-level fields are {sorted(_TOP)}")
    tags = raw.get("tags", [])
    if not isinstance(tags, list) or not all(isinstance(t, str) for t in tags):
        raise r.fail("tags", "must be a list of strings")
    typed = raw.get("typed", {})
    if not isinstance(typed, Mapping) or not all(
            isinstance(v, (int, float, str, bool)) for v in typed.values()):
        raise r.fail("typed", "must map names to plain numbers or strings, "
                     "e.g. {num_heads: 4, key_channels: 784}")
    att = _attention(r)
    inputs = _inputs(r, att)
    mask = _mask(r, inputs)
    ws = r.section("weights")
    return Case(
        id=case_id, title=r.text("title", case_id), description=r.text("description"),
        source=r.text("source"), tags=tuple(tags), attention=att, inputs=inputs, mask=mask,
        expect=_expect(r, mask),
        weights=Weights(r.choice(ws, "bias_values", "weights.bias_values", "random", BIAS_VALUES)),
        typed=dict(typed), path=str(path))


def load_file(path: Path | str) -> list[Case]:
    path = Path(path)
    try:
        raw = yaml.safe_load(path.read_text(encoding="utf-8"))
    except yaml.YAMLError as exc:
        raise CaseError(path, None, "(yaml)", f"not valid YAML: {exc}") from None
    if isinstance(raw, Mapping) and "cases" in raw:
        extra = sorted(set(raw) - {"cases"})
        if extra:
            raise CaseError(path, None, extra[0],
                            "a file with a 'cases:' list may hold nothing else at top level")
        if not isinstance(raw["cases"], list) or not raw["cases"]:
            raise CaseError(path, None, "cases", "must be a non-empty list of case mappings")
        return [parse_case(item, path, i) for i, item in enumerate(raw["cases"])]
    return [parse_case(raw, path)]


def _check_runner_names(case: Case, runner_names: set[str]) -> None:
    """A runner name that matches nothing would silently pin nothing."""
    named = [(f"expect.parameters.{n}", n) for n in case.expect.parameters_by_runner]
    named += [(f"expect.behaviours.{edge}.{n}", n)
              for edge, per in case.expect.behaviours.items() for n in per]
    named += [(f"expect.known_mismatch.{n}", n) for n in case.expect.known_mismatch]
    for dotted, name in named:
        if name not in runner_names:
            raise CaseError(case.path, case.id, dotted,
                            f"names no runner; known runners: {sorted(runner_names)}")


def load_cases(directory: Path | str, runner_names: set[str] | None = None) -> list[Case]:
    """Every case under `directory`, in file-name order; ids must be unique."""
    seen: dict[str, str] = {}
    cases = []
    for path in sorted(Path(directory).glob("*.yaml")):
        for case in load_file(path):
            if runner_names is not None:
                _check_runner_names(case, runner_names)
            if case.id in seen:
                raise CaseError(path, case.id, "id",
                                f"duplicate id: already defined in {seen[case.id]}; "
                                "ids must be unique across all case files")
            seen[case.id] = str(path)
            cases.append(case)
    return cases

