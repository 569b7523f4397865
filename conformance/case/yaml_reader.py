"""Bounded reading of an untrusted case file: refused while composing, before any
Python object is built (file size, UTF-8, node count, alias expansion, depth,
plain YAML types only).  The case reader (loader.py) calls `read_document`."""
from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml
from yaml.composer import Composer
from yaml.constructor import SafeConstructor
from yaml.nodes import MappingNode, ScalarNode, SequenceNode
from yaml.resolver import Resolver

from conformance.case.model import (
    MAX_DEPTH, MAX_EXPANDED_NODES, MAX_FILE_BYTES, MAX_YAML_NODES, CaseError, cut, short)

try:  # libyaml scans and parses in C (fast on big hostile files); composing stays here
    from yaml._yaml import CParser as _CParser
except ImportError:  # pragma: no cover - PyYAML built without libyaml
    _CParser = None

_TAG = "tag:yaml.org,2002:"
_TYPED = {_TAG + t for t in ("int", "float", "bool", "null")}  # an explicit tag must fit
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
        if (isinstance(node, ScalarNode) and node.tag in _TYPED
                and self.resolve(ScalarNode, node.value, (True, False)) != node.tag):
            raise self._refuse(f"{short(node.value, 60)} is tagged {node.tag[len(_TAG):]!r} "
                               "but is not written as one; drop the explicit tag (!!) and "
                               "write the value plainly")
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
        raise CaseError(path, None, "(yaml)",  # PyYAML's message spans lines: one line here
                        f"not valid YAML: {cut(' '.join(str(exc).split()), 400)}") from None
    except (ValueError, TypeError, OverflowError, RecursionError, MemoryError, KeyError,
            IndexError, AttributeError) as exc:  # a constructor's own error: still one line
        raise CaseError(path, None, "(yaml)",
                        f"not valid YAML: {type(exc).__name__}: {cut(str(exc), 300)}") from None
