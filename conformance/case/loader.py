"""The case format: one framework-neutral description of an attention setup.

A case file (`cases/*.yaml`) holds one case (a mapping) or several under a top-level
`cases:` list.  Everything is validated here (rope, QK-norm, ALiBi, softcap, sinks,
windows, fills and decode in case/features.py), so that a runner can trust every field
it reads.  Every error names the file, the case id, the field and what would be valid.
Case files are untrusted: every failure
is a CaseError with a bounded message, and reading is bounded (yaml_reader).  The
field names are the public interface; case/case.schema.json publishes the same.
"""
from __future__ import annotations

import math
import re
from dataclasses import replace
from pathlib import Path
from typing import Any, Mapping

from conformance.case import extreme as case_extreme, features as case_features
from conformance.case import numbers as case_numbers, typed_numbers
from conformance.case.model import (  # noqa: F401  (re-exported: the public names of the format)
    ACTIVATION_ENV, BEHAVIOURS, BIAS_VALUES, CAUSAL, DEFAULT_TOLERANCE, DTYPES, WEIGHT_ENV,
    LOAD_ENV, LOAD_LIMIT_ELEMENTS, Attention, Budget, Case, CaseError, Expect, Inputs, Mask,
    Tolerance, Weights, element_counts, load_budget, load_limit, short, sizes_counts,
    tolerance_for)
from conformance.case.model import _SECTIONS, _TOP
from conformance.case.discovery import discover
from conformance.case.yaml_reader import read_document

_SLUG = re.compile(r"[a-z0-9][a-z0-9._-]*")  # used with fullmatch: no trailing newline
MAX_ID = 100  # characters: an id names a report page, cases/<id>.md (datafile.MAX_ID)
MAX_INT = 2**63 - 1  # every integer field fits an int64
_REQUIRED = object()


class _Reader:
    """Reads one case mapping, raising CaseError with full context."""

    def __init__(self, path: Path, raw: Mapping[str, Any], case_id: str | None):
        self.path, self.raw, self.case_id = path, raw, case_id

    def fail(self, field_name: str, problem: str) -> CaseError:
        return CaseError(self.path, self.case_id, field_name, problem)

    def mapping(self, sec: Mapping, name: str, dotted: str) -> Mapping[str, Any]:
        """An optional mapping: absent or null reads as empty."""
        value = {} if sec.get(name) is None else sec[name]
        if not isinstance(value, Mapping):
            raise self.fail(dotted, f"must be a mapping, got {short(value, 80)}")
        return value

    def section(self, name: str) -> Mapping[str, Any]:
        value = self.mapping(self.raw, name, name)
        unknown = sorted(set(value) - _SECTIONS[name])
        if unknown:
            raise self.fail(f"{name}.{unknown[0]}", "unknown field; valid fields of "
                            f"'{name}' are {sorted(_SECTIONS[name])}")
        return value

    def integer(self, sec: Mapping, name: str, dotted: str, default: Any = _REQUIRED,
                minimum: int = 1) -> int:
        if name not in sec and default is _REQUIRED:
            raise self.fail(dotted, "is required (an integer)")
        value = sec.get(name, default)
        if value is None:  # null never means "default": `seed: null` would be OS entropy
            raise self.fail(dotted, f"is null: give an integer >= {minimum}" + (
                "" if default is _REQUIRED else f", or leave it out for the default {default}"))
        if isinstance(value, bool) or not isinstance(value, int):
            raise self.fail(dotted, f"must be an integer, got {short(value)}")
        if not minimum <= value <= MAX_INT:
            raise self.fail(dotted, f"must lie in {minimum}..2**63-1, got {short(value)}")
        return value

    def boolean(self, sec: Mapping, name: str, dotted: str, default: bool) -> bool:
        value = sec.get(name, default)
        if not isinstance(value, bool):
            raise self.fail(dotted, f"must be true or false, got {short(value)}")
        return value

    def choice(self, sec: Mapping, name: str, dotted: str, default: str, options) -> str:
        value = sec.get(name, default)
        if not isinstance(value, str) or value not in options:
            raise self.fail(dotted, f"must be one of {list(options)}, got {short(value)}")
        return value

    def text(self, name: str, default: str = "") -> str:
        value = self.raw.get(name, default)
        if not isinstance(value, str):
            raise self.fail(name, f"must be a string, got {short(value)}")
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
    return Attention(h, hkv, eq, ek, ev, dk, dv, eo, r.boolean(s, "bias", "attention.bias", True),
                     case_numbers.scale(r, s))


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
    inputs = case_extreme.read(r, s, att, inputs)  # inputs.scale, inputs.nonfinite
    if inputs.self_attention:
        if not att.query_features == att.key_features == att.value_features:
            raise r.fail("inputs.self_attention", "one tensor is query, key and value, so "
                         "attention.query_features, key_features and value_features must be "
                         f"equal; got {att.query_features}, {att.key_features}, "
                         f"{att.value_features}")
        if inputs.key_len != inputs.query_len:
            raise r.fail("inputs.self_attention", "requires key_len == query_len, got "
                         f"{inputs.key_len} != {inputs.query_len}")
    return inputs


def _check_budget(r: _Reader, att: Attention, inputs: Inputs, budget: Budget) -> None:
    """Refuse, by arithmetic alone, a configuration over the loader's limit."""
    counts, weights, acts = sizes_counts(att, inputs), budget.weights, budget.activations
    for kind, limit, env, where in (("weights", weights, WEIGHT_ENV, "attention"),
                                    ("activations", acts, ACTIVATION_ENV, "inputs")):
        if counts[kind] > limit:
            raise r.fail(where, f"needs {counts[kind]:,} {kind} elements, over the loader's "
                         f"limit of {limit:,} (raise it with {LOAD_ENV}; cases above the numbers "
                         f"budget, --max-elements / {env}, load and are counted only)")


def _int_list(r: _Reader, value: Any, dotted: str) -> tuple[int, ...]:
    if not isinstance(value, list) or any(type(v) is not int for v in value):
        raise r.fail(dotted, f"must be a list of integers, got {short(value)}")
    return tuple(value)


def _rows(m: Any, t: int, s: int) -> tuple | None:
    """`m` as a (t, s) tuple of 0/1 int rows, or None when it is not one (no NumPy:
    nothing is expanded or allocated before the shape is known to be right)."""
    if isinstance(m, list) and len(m) == t and all(
            isinstance(row, list) and len(row) == s and all(
                isinstance(x, (int, float)) and x in (0, 1) for x in row) for row in m):
        return tuple(tuple(int(x) for x in row) for row in m)
    return None


def _matrix(r: _Reader, value: Any, inputs: Inputs) -> tuple:
    t, s, b = inputs.query_len, inputs.key_len, inputs.batch
    matrix = _rows(value, t, s)
    if matrix is None and isinstance(value, list) and len(value) == b:
        per_item = [_rows(m, t, s) for m in value]
        matrix = None if None in per_item else tuple(per_item)
    if matrix is None:
        shape, v = [], value
        while isinstance(v, list) and len(shape) < 4:
            shape, v = shape + [len(v)], v[0] if v else None
        raise r.fail("mask.attn_mask",
                     f"an explicit mask must be a 0/1 matrix of shape (query_len, key_len) = "
                     f"({t}, {s}) or (batch, query_len, key_len) = ({b}, {t}, {s}); "
                     f"got shape {tuple(shape)}")
    return matrix


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
        if not all(0 <= n <= inputs.key_len for n in key_padding):
            raise r.fail("mask.key_padding", f"each valid length must lie in 0..key_len "
                         f"({inputs.key_len}); 0 pads the whole item (its rows are fully masked)")
    density = matrix = None
    am = s.get("attn_mask")
    if isinstance(am, Mapping):
        d = am.get("random")
        if set(am) != {"random"} or type(d) not in (int, float) or not 0 < d <= 1:
            raise r.fail("mask.attn_mask",
                         "a random mask is {random: density} with 0 < density <= 1 "
                         "(the probability that a position may attend)")
        density = float(d)
    elif am is not None:
        matrix = _matrix(r, am, inputs)
    rows = _int_list(r, s.get("masked_rows", []), "mask.masked_rows")
    if not all(0 <= i < inputs.query_len for i in rows):
        raise r.fail("mask.masked_rows", f"query indices must lie in "
                     f"0..{inputs.query_len - 1}, got {short(list(rows))}")
    return Mask(causal, key_padding, density, matrix, tuple(sorted(set(rows))))


def _parameters(r: _Reader, s: Mapping) -> tuple[int | None, dict[str, int]]:
    params = s.get("parameters")
    if isinstance(params, Mapping):
        for runner in params:
            r.integer(params, runner, f"expect.parameters.{runner}", minimum=0)
        by_runner = dict(params)
        return by_runner.pop("formula", None), by_runner
    if params is not None:
        r.integer(s, "parameters", "expect.parameters", minimum=0)
    return params, {}


def _tolerances(r: _Reader, s: Mapping) -> dict[str, Tolerance]:
    tol = {}
    for dtype, spec in r.mapping(s, "tolerance", "expect.tolerance").items():
        if dtype not in DTYPES:
            raise r.fail(f"expect.tolerance.{dtype}", f"dtype must be one of {list(DTYPES)}")
        if not isinstance(spec, Mapping) or set(spec) != {"rtol", "atol"}:
            raise r.fail(f"expect.tolerance.{dtype}",
                         "must be {rtol: number >= 0, atol: number >= 0}")
        tol[dtype] = Tolerance(*(case_numbers.number(r, spec[k], f"expect.tolerance.{dtype}.{k}")
                                 for k in ("rtol", "atol")))
    return tol


def _behaviours(r: _Reader, s: Mapping, case: Any) -> dict[str, dict[str, str]]:
    behaviours = {}
    for edge, per_runner in r.mapping(s, "behaviours", "expect.behaviours").items():
        if edge not in BEHAVIOURS:
            raise r.fail(f"expect.behaviours.{edge}",
                         f"unknown edge case; known: {sorted(BEHAVIOURS)}")
        if not isinstance(per_runner, Mapping):
            raise r.fail(f"expect.behaviours.{edge}", "must map runner name -> behaviour")
        for runner, value in per_runner.items():
            if not isinstance(value, str) or value not in BEHAVIOURS[edge]:
                raise r.fail(f"expect.behaviours.{edge}.{runner}",
                             f"must be one of {list(BEHAVIOURS[edge])}, got {short(value)}")
        behaviours[edge] = dict(per_runner)
    if "fully_masked_row" in behaviours and not case.has_fully_masked_rows \
            and case.mask.attn_mask_density is None:
        raise r.fail("expect.behaviours.fully_masked_row", "declares a fully masked row "
                     "behaviour, but the mask leaves every query row a key (masks.py)")
    return behaviours


def _expect(r: _Reader, case: Any) -> Expect:
    s = r.section("expect")
    params, by_runner = _parameters(r, s)
    known = s.get("known_mismatch") or {}
    if not isinstance(known, Mapping) or not all(
            isinstance(v, str) and len(v.strip()) >= 10 for v in known.values()):
        raise r.fail("expect.known_mismatch",
                     "must map runner name -> the reason it is known to mismatch (a sentence, "
                     "ideally with a link), e.g. {torch.mha: 'why it differs: <link>'}")
    return Expect(params, by_runner, _tolerances(r, s), _behaviours(r, s, case), dict(known))


def _top_fields(r: _Reader, raw: Mapping, index: int) -> tuple[str, tuple, dict]:
    case_id = raw.get("id")
    if case_id is None:
        raise r.fail("id", f"is required (case #{index} in the file): a lowercase slug")
    if not isinstance(case_id, str) or not _SLUG.fullmatch(case_id) or len(case_id) > MAX_ID:
        raise r.fail("id", "must be a lowercase slug (a-z, 0-9, '.', '_', '-') of at most "
                     f"{MAX_ID} characters, got {short(case_id, 120)}")
    unknown = sorted(set(raw) - _TOP)
    if unknown:
        raise r.fail(unknown[0], f"unknown field; valid top-level fields are {sorted(_TOP)}")
    tags = raw.get("tags", [])
    if not isinstance(tags, list) or not all(isinstance(t, str) for t in tags):
        raise r.fail("tags", "must be a list of strings")
    typed = raw.get("typed", {})
    if not isinstance(typed, Mapping) or not all(isinstance(v, (int, str)) or (
            isinstance(v, float) and math.isfinite(v)) for v in typed.values()):
        raise r.fail("typed", "must map names to plain numbers (finite) or strings, "
                     "e.g. {num_heads: 4, key_channels: 784}")
    return case_id, tuple(tags), dict(typed)


def parse_case(raw: Any, path: Path | str, index: int = 0, *,
               budget: Budget | None = None) -> Case:
    """Validate one case mapping; raises CaseError naming file, case and field.
    `budget` bounds the elements it may ask for (default: load_budget(), 10**12 each)."""
    path = Path(path)
    if not isinstance(raw, Mapping):
        raise CaseError(path, None, f"cases[{index}]",
                        f"each case must be a mapping, got {type(raw).__name__}")
    case_id = raw.get("id")
    good_id = isinstance(case_id, str) and _SLUG.fullmatch(case_id) and len(case_id) <= MAX_ID
    r = _Reader(path, raw, case_id if good_id else None)
    case_id, tags, typed = _top_fields(r, raw, index)
    r.raw = typed_numbers.with_attention(r, raw, typed)  # typed in a system's words
    att = _attention(r)
    inputs = _inputs(r, att)
    _check_budget(r, att, inputs, budget or load_budget())
    mask, ws = _mask(r, inputs), r.section("weights")
    att, inputs, mask, decode = case_features.read(r, att, inputs, mask)  # rope, windows...
    case = Case(  # expect is read last: whether a row is fully masked is the case's to say
        case_id, r.text("title", case_id), r.text("description"), r.text("source"), tags, att,
        inputs, mask, Expect(None, {}, {}, {}),
        Weights(r.choice(ws, "bias_values", "weights.bias_values", "random", BIAS_VALUES)),
        typed, str(path), decode=decode)
    return replace(case, expect=case_extreme.checked(r, _expect(r, case), inputs))


def file_cases(path: Path, budget: Budget) -> tuple[list[Case], list[CaseError]]:
    """The cases of one file and the errors of the others, before ids and runner names are
    checked across files (file_report does that): a bad case hides no good one."""
    try:
        raw = read_document(path)
        items = [raw]
        if isinstance(raw, Mapping) and "cases" in raw:
            items = raw["cases"]
            if set(raw) != {"cases"}:
                raise CaseError(path, None, sorted(set(raw) - {"cases"})[0], "a file with a "
                                "'cases:' list may hold nothing else at top level")
            if not isinstance(items, list) or not items:
                raise CaseError(path, None, "cases", "must be a non-empty list of case mappings")
    except CaseError as exc:
        return [], [exc]
    cases, errors = [], []
    for i, item in enumerate(items):
        try:
            cases.append(parse_case(item, path, i, budget=budget))
        except CaseError as exc:
            errors.append(exc)
    return cases, errors


def load_file(path: Path | str, *, budget: Budget | None = None) -> list[Case]:
    """Every case of one file; raises the first CaseError."""
    cases, errors = file_cases(Path(path), budget or load_budget())
    if errors:
        raise errors[0]
    return cases


def _check_names(case: Case, runner_names: set[str] | None, seen: dict[str, str]) -> None:
    """Ids are unique; a runner name that matches nothing would silently pin nothing."""
    if case.id in seen:
        raise CaseError(case.path, case.id, "id", f"duplicate id: already defined in "
                        f"{seen[case.id]}; ids must be unique across all case files")
    named = [(f"expect.parameters.{n}", n) for n in case.expect.parameters_by_runner]
    named += [(f"expect.behaviours.{edge}.{n}", n)
              for edge, per in case.expect.behaviours.items() for n in per]
    named += [(f"expect.known_mismatch.{n}", n) for n in case.expect.known_mismatch]
    for dotted, name in named:
        if runner_names is not None and name not in runner_names:
            raise CaseError(case.path, case.id, dotted,
                            f"names no runner; known runners: {sorted(runner_names)}")


def load_cases_report(directory: Path | str, runner_names: set[str] | None = None, *,
                      budget: Budget | None = None) -> tuple[list[Case], list[CaseError]]:
    """Every good case under `directory` (file-name order) and one CaseError per bad
    case, file or refused entry (discovery.py): one bad file never hides the others'
    cases.  Ids must be unique.  Skipped entries: discover(directory).skipped."""
    budget, seen, found = budget or load_budget(), {}, discover(directory)
    cases, errors = [], list(found.refused)
    for path in found.files:
        try:
            good, bad = file_report(path, runner_names, seen, budget)
        except Exception as exc:  # a loader bug must not hide the other files
            good, bad = [], [CaseError(path, None, "(loader)", short(exc))]
        cases, errors = cases + good, errors + bad
    return cases, errors


def file_report(path: Path, runner_names, seen: dict, budget: Budget) -> tuple[list, list]:
    """One file's good cases and errors; names checked, ids against `seen` (updated)."""
    cases, (found, errors) = [], file_cases(path, budget)
    for case in found:
        try:
            _check_names(case, runner_names, seen)
            seen[case.id] = case.path
            cases.append(case)
        except CaseError as exc:
            errors.append(exc)
    return cases, errors


def load_cases(directory: Path | str, runner_names: set[str] | None = None, *,
               budget: Budget | None = None) -> list[Case]:
    """Every case under `directory`, in file-name order; raises the first CaseError."""
    cases, errors = load_cases_report(directory, runner_names, budget=budget)
    if errors:
        raise errors[0]
    return cases
