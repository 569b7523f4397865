"""Expectation files: `expectations/<runner>.yaml`, what each system answers.

One file per runner (the file name is the runner's name), five optional sections:

    behaviours:
      fully_masked_row: nan             # stated once, for every case with such a row
      nonfinite_input:                  # extreme-input answers, by case id
        extreme-nan-key: nan_spreads
    known_mismatches:                   # each a strict xfail where `when` matches
      - when: {dtype: float64}          # words: case/expectations.py CONDITIONS
        reason: "why, with a link"
        strict: false                   # optional: a matching case may also pass
    conventions:                        # the pinned ledger cells (pinning.py checks them)
      softmax_scale: inv_sqrt_head_dim
    documented:                         # what the system's documentation states, by axis
      causal_flag: {word: upper_left, source: "https://..."}  # word optional: the
                                        # page documents the axis without naming a word

Files are read like case files (case/yaml_reader.py: bounded, plain YAML) and
validated here; every error names the file, the field and the fix.  `update`
writes observed values into a file line by line (--update-expectations), keeping
its comments and order, so a review sees only the lines that changed.  The documented
claims are data here, not runner code: the ledger's probes read them (`documented`) to
show a system's statement beside what it did.
"""
from __future__ import annotations

import os
import re
import tempfile
from pathlib import Path
from typing import Any, Iterable, Mapping

import yaml

from conformance.case.expectations import CONDITIONS, Expectations, KnownMismatch
from conformance.case.model import BEHAVIOURS, CaseError, short
from conformance.case.yaml_reader import read_document
from conformance.conventions.axes import BY_ID, NOT_PROBED, Convention
from conformance.paths import ROOT

EXPECTATIONS_DIR = ROOT / "expectations"
SECTIONS = ("behaviours", "known_mismatches", "conventions", "documented", "cited")
_SLUG = re.compile(r"[a-z0-9][a-z0-9._-]*")


class ExpectationError(CaseError):
    """An expectations file that cannot be used: file, field and fix (a CaseError, so
    it reads like one and every bounded-reading error of yaml_reader fits it)."""

    def __init__(self, path, field_name: str, problem: str):
        super().__init__(path, None, field_name, problem)


def path_for(directory: Path | str, runner: str) -> Path:
    return Path(directory) / f"{runner}.yaml"


def _mapping(path: Path, value: Any, dotted: str) -> Mapping:
    if value is None:
        return {}
    if not isinstance(value, Mapping):
        raise ExpectationError(path, dotted, f"must be a mapping, got {short(value, 80)}")
    return value


def _behaviours(path: Path, raw: Any) -> tuple[str | None, dict[str, str]]:
    section = _mapping(path, raw, "behaviours")
    for edge in section:
        if edge not in BEHAVIOURS:
            raise ExpectationError(path, f"behaviours.{edge}", "unknown behaviour; valid: "
                                   f"{sorted(BEHAVIOURS)}")
    masked = section.get("fully_masked_row")
    if masked is not None and masked not in BEHAVIOURS["fully_masked_row"]:
        raise ExpectationError(path, "behaviours.fully_masked_row", f"must be one of "
                               f"{list(BEHAVIOURS['fully_masked_row'])}, got {short(masked)}")
    nonfinite = dict(_mapping(path, section.get("nonfinite_input"), "behaviours.nonfinite_input"))
    for case_id, word in nonfinite.items():
        dotted = f"behaviours.nonfinite_input.{case_id}"
        if not _SLUG.fullmatch(case_id):
            raise ExpectationError(path, dotted, "keys are case ids (lowercase slugs)")
        if word not in BEHAVIOURS["nonfinite_input"]:
            raise ExpectationError(path, dotted, f"must be one of "
                                   f"{list(BEHAVIOURS['nonfinite_input'])}, got {short(word)}")
    return masked, nonfinite


def _when(path: Path, raw: Any, dotted: str) -> dict[str, tuple]:
    when = _mapping(path, raw, dotted)
    if not when:
        raise ExpectationError(path, dotted, "is required: the condition under which the "
                               "mismatch shows, e.g. {dtype: float64}; words: "
                               f"{sorted(CONDITIONS)}")
    out = {}
    for key, value in when.items():
        if key not in CONDITIONS:
            raise ExpectationError(path, f"{dotted}.{key}", f"unknown condition; valid "
                                   f"conditions: {sorted(CONDITIONS)}")
        values = tuple(value) if isinstance(value, list) else (value,)
        allowed = CONDITIONS[key].values
        bad = [v for v in values if type(v) is not type(allowed[0]) or v not in allowed]
        if bad or not values:
            raise ExpectationError(path, f"{dotted}.{key}", f"must be one of {list(allowed)} "
                                   f"(or a list of them), got {short(value)}")
        out[key] = values
    return out


def _known(path: Path, raw: Any) -> tuple[KnownMismatch, ...]:
    if raw is None:
        return ()
    if not isinstance(raw, list):
        raise ExpectationError(path, "known_mismatches", "must be a list of {when: {...}, "
                               "reason: '... with a link'}")
    known = []
    for n, item in enumerate(raw):
        dotted = f"known_mismatches[{n}]"
        item = _mapping(path, item, dotted)
        unknown = sorted(set(item) - {"when", "reason", "strict"})
        if unknown:
            raise ExpectationError(path, f"{dotted}.{unknown[0]}", "unknown field; valid: "
                                   "['reason', 'strict', 'when']")
        reason = item.get("reason")
        if not isinstance(reason, str) or len(reason.strip()) < 10:
            raise ExpectationError(path, f"{dotted}.reason", "is required: why it is known to "
                                   "mismatch (a sentence, ideally with a link)")
        strict = item.get("strict", True)
        if not isinstance(strict, bool):
            raise ExpectationError(path, f"{dotted}.strict", "must be true or false")
        known.append(KnownMismatch(_when(path, item.get("when"), f"{dotted}.when"),
                                   reason.strip(), strict))
    return tuple(known)


def value_problem(axis: str, value) -> str | None:
    """Why `value` cannot be pinned on `axis` (None when it can)."""
    spec = BY_ID.get(axis)
    if spec is None:
        return f"unknown axis (axes: {', '.join(BY_ID)})"
    if not isinstance(value, str) or not value.strip() or value == NOT_PROBED:
        return f"value {value!r} must be a non-empty string (an observation, not {NOT_PROBED})"
    if spec.words and value not in spec.words:
        return f"value {value!r} is not in the vocabulary ({', '.join(spec.words)})"
    return None


def _conventions(path: Path, raw: Any) -> dict[str, str]:
    cells = dict(_mapping(path, raw, "conventions"))
    for axis, value in cells.items():
        problem = value_problem(str(axis), value)
        if problem:
            raise ExpectationError(path, f"conventions.{axis}", problem)
    return cells


_LINK = re.compile(r"https://\S+")


def _documented(path: Path, raw: Any) -> dict[str, tuple[str | None, str]]:
    """axis -> (the word the documentation states, or None where it documents the axis
    without one of its words; the link to it)."""
    claims = {}
    for axis, entry in _mapping(path, raw, "documented").items():
        dotted = f"documented.{axis}"
        entry = _mapping(path, entry, dotted)
        unknown = sorted(set(entry) - {"word", "source"})
        if unknown or not entry:
            raise ExpectationError(path, f"{dotted}.{unknown[0]}" if unknown else dotted,
                                   "an entry is {word: <a word of the axis>, source: "
                                   "<https link>} (word optional)")
        word, source = entry.get("word"), entry.get("source")
        problem = None if word is None else value_problem(str(axis), word)
        if problem or str(axis) not in BY_ID:
            raise ExpectationError(path, f"{dotted}.word" if str(axis) in BY_ID else dotted,
                                   problem or f"unknown axis (axes: {', '.join(BY_ID)})")
        if not isinstance(source, str) or not _LINK.fullmatch(source):
            raise ExpectationError(path, f"{dotted}.source", f"must be the https link of the "
                                   f"documentation that states it, got {short(source)}")
        claims[str(axis)] = (word, source)
    return claims


def documented(runner: str, directory: Path | str | None = None
               ) -> dict[str, tuple[str | None, str]]:
    """What `runner`'s documentation states, axis -> (word or None, link), from the
    `documented:` section of its expectations file in `directory` (default
    EXPECTATIONS_DIR, read when called); none for an absent file or section."""
    path = path_for(directory or EXPECTATIONS_DIR, runner)
    key = (str(path), path.stat().st_mtime_ns if path.exists() else 0)
    if key not in _DOCUMENTED:
        raw = _mapping(path, read_document(path), "(top level)") if path.exists() else {}
        _DOCUMENTED[key] = _documented(path, raw.get("documented"))
    return _DOCUMENTED[key]


_DOCUMENTED: dict[tuple[str, int], dict[str, tuple[str | None, str]]] = {}
_CITED_KEYS = {"word", "evidence", "source", "documented"}


def _cited(path: Path, raw: Any) -> list[Convention]:
    """A documented model's cells (a system that cannot run here): axis -> {word, evidence
    (the quotation), source (the https link cited), documented (optional: the word the
    page states)}; word not_probed where the page leaves an option's behaviour unstated."""
    cells = []
    for axis, entry in _mapping(path, raw, "cited").items():
        dotted = f"cited.{axis}"
        entry = _mapping(path, entry, dotted)
        unknown = sorted(set(entry) - _CITED_KEYS)
        if unknown or not {"word", "evidence", "source"} <= set(entry):
            raise ExpectationError(path, f"{dotted}.{unknown[0]}" if unknown else dotted,
                                   "an entry is {word, evidence: <the quotation>, source: "
                                   "<https link>, documented: <optional word>}")
        word, documented_word = entry["word"], entry.get("documented")
        for key, value in (("word", word), ("documented", documented_word)):
            if value == NOT_PROBED or (key == "documented" and value is None):
                continue  # an unstated behaviour; a page stating no word
            problem = value_problem(str(axis), value)
            if problem:
                raise ExpectationError(path, f"{dotted}.{key}", problem)
        if not isinstance(entry["evidence"], str) or not entry["evidence"].strip():
            raise ExpectationError(path, f"{dotted}.evidence", "must be the quotation (text)")
        if not isinstance(entry["source"], str) or not _LINK.fullmatch(entry["source"]):
            raise ExpectationError(path, f"{dotted}.source", "must be the https link cited, "
                                   f"got {short(entry['source'])}")
        cells.append(Convention(str(axis), word, entry["evidence"], documented_word,
                                entry["source"]))
    return cells


def cited(runner: str, directory: Path | str | None = None) -> list[Convention]:
    """A documented model's cells from the `cited:` section of its expectations file (in
    `directory`, default EXPECTATIONS_DIR): the ledger's cells of a system that cannot run
    here, every one from its citation."""
    path = path_for(directory or EXPECTATIONS_DIR, runner)
    raw = _mapping(path, read_document(path), "(top level)") if path.exists() else {}
    return _cited(path, raw.get("cited"))


def _document(path: Path) -> Any:
    """The file's YAML (yaml_reader: bounded, regular files only); a reading error is an
    ExpectationError, which the plugin reports as a usage error, never an INTERNALERROR."""
    try:
        return read_document(path)
    except ExpectationError:
        raise
    except CaseError as exc:
        raise ExpectationError(path, exc.field_name, exc.problem) from None


def load_file(path: Path | str, runner: str) -> Expectations:
    """One runner's file, validated; an absent file expects nothing (a dangling symlink
    is not absent: it is refused)."""
    path = Path(path)
    if not path.exists() and not path.is_symlink():
        return Expectations(runner, str(path))
    raw = _mapping(path, _document(path), "(top level)")
    unknown = sorted(set(raw) - set(SECTIONS))
    if unknown:
        raise ExpectationError(path, unknown[0], f"unknown section; valid: {list(SECTIONS)}")
    masked, nonfinite = _behaviours(path, raw.get("behaviours"))
    _documented(path, raw.get("documented"))
    _cited(path, raw.get("cited"))
    return Expectations(runner, str(path), masked, nonfinite,
                        _known(path, raw.get("known_mismatches")),
                        _conventions(path, raw.get("conventions")))


def load_dir(directory: Path | str, runner_names: Iterable[str]) -> dict[str, Expectations]:
    """runner -> its expectations, for every runner (an absent file: none); a file that
    names no runner is an error (it would silently expect nothing)."""
    directory, names = Path(directory), sorted(runner_names)
    if directory.exists() and not directory.is_dir():
        raise ExpectationError(directory, "(directory)", "must be a directory of "
                               "<runner>.yaml files")
    for path in sorted(directory.glob("*.yaml")) if directory.is_dir() else []:
        if path.stem not in names:
            raise ExpectationError(path, "(file name)", f"names no runner; the file name is "
                                   f"the runner's, one of: {names}")
        if path.is_symlink() and directory.resolve() not in path.resolve().parents:
            raise ExpectationError(path, "(file)", "a symlink leading out of the folder; "
                                   "put the file itself in the folder")
    return {name: load_file(path_for(directory, name), name) for name in names}


# ---- writing observed values (--update-expectations) ------------------------------

def _scalar(value: str) -> str:
    text = yaml.safe_dump(value, allow_unicode=True, width=10**6)
    return text.removesuffix("\n").removesuffix("\n...").strip()


def _block_end(lines: list[str], start: int, end: int, indent: int) -> int:
    """The end of the block opened by lines[start - 1] (indented by `indent`)."""
    for n in range(start, end):
        text = lines[n]
        if text.strip() and not text.lstrip().startswith("#") \
                and len(text) - len(text.lstrip()) <= indent:
            return n
    return end


def _section_at(lines: list[str], key: str) -> int:
    """Where a missing top-level section goes: before the first one SECTIONS puts after it."""
    later = SECTIONS[SECTIONS.index(key) + 1:] if key in SECTIONS else ()
    return next((n for n, line in enumerate(lines)
                 if any(line.startswith(f"{k}:") for k in later)), len(lines))


def set_value(text: str, keys: tuple[str, ...], value: str | None) -> str:
    """`text` with the block-style mapping entry at `keys` set to `value`: its line
    replaced, or the entry (and any missing parent) added at the end of its block; None
    removes the entry's line (a pin the run no longer observes), if it is there."""
    lines, start, end, indent = text.splitlines(), 0, len(text.splitlines()), 0
    for depth, key in enumerate(keys):
        pad, last = " " * indent, depth == len(keys) - 1
        found = next((n for n in range(start, end) if re.match(
            rf"{pad}{re.escape(key)}:(\s|$)", lines[n])), None)
        if value is None and (found is None or last):
            if found is not None:
                del lines[found]
            return "\n".join(lines) + "\n"
        if found is None:
            at = end if depth else _section_at(lines, key)
            while at > start and not lines[at - 1].strip():
                at -= 1
            lines.insert(at, f"{pad}{key}:" + (f" {_scalar(value)}" if last else ""))
            found, end = at, end + 1
        elif last:
            lines[found] = f"{pad}{key}: {_scalar(value)}"
        start, end = found + 1, _block_end(lines, found + 1, end, indent)
        indent += 2
    return "\n".join(lines) + "\n"


def header(runner: str) -> str:
    return (f"# What {runner} answers, stated once for every case (README: \"Expectations "
            "per runner\").\n# Observed values: python -m pytest --update-expectations\n")


def update(path: Path | str, runner: str,
           entries: Mapping[tuple[str, ...], str | None]) -> None:
    """Write `entries` (keys path -> value; None removes the entry) into the runner's
    file, keeping the rest and the file's permissions; the result, read back by the
    suite's own reader (which refuses duplicate keys), must hold those values, else the
    file is left as it was."""
    path = Path(path)
    text = header(runner)
    if path.exists() or path.is_symlink():
        _document(path)  # bounded, a regular file, a document the suite reads
        text = path.read_text(encoding="utf-8")
    for keys, value in entries.items():
        text = set_value(text, keys, value)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.")
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(text)
        os.chmod(tmp, _mode(path))
        _check_written(Path(tmp), path, entries)
        os.replace(tmp, path)
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)


def _mode(path: Path) -> int:
    """The permissions the rewritten file keeps: the old file's, or for a new file what
    the umask leaves of 0o666 (mkstemp alone would leave 0o600)."""
    try:
        return path.stat().st_mode & 0o7777
    except OSError:
        umask = os.umask(0)
        os.umask(umask)
        return 0o666 & ~umask


def _check_written(tmp: Path, path: Path, entries) -> None:
    try:
        data = read_document(tmp)
    except CaseError as exc:
        raise ExpectationError(path, exc.field_name, f"would not read back ({exc.problem}); "
                               "write that section in block style, one entry a line, "
                               "each key once") from None
    for keys, value in entries.items():
        got = data
        for key in keys:
            got = got.get(key) if isinstance(got, dict) else None
        if got != value:
            raise ExpectationError(path, ".".join(keys), f"could not be written as {value!r} "
                                   "(write that section in block style, one entry a line)")
