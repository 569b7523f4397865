"""What a Python file imports from outside the base install (`pip install -e .`), read
with ast: the imports that run when the file is imported, with no guard before them
(tests/test_import_guards.py), and every package a test module names at all, in an import
anywhere or a guard's argument (the tests .ci/run runs on the base install: tests/conftest.py
marks them `optional_packages`).  The suite's own tests must pass there, a test whose
framework is absent skipping with its reason."""
from __future__ import annotations

import ast
import importlib.metadata
import re
import sys
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

DISTRIBUTION = "attention-conformance"
OWN = frozenset({"conformance", "tests", "examples"})  # the repository's own packages
GUARDS = frozenset({"importorskip", "require"})  # pytest.importorskip, tests.helpers.require
IMPORT_ERRORS = frozenset({"ImportError", "ModuleNotFoundError", "Exception",
                           "BaseException"})


@dataclass(frozen=True)
class UnguardedImport:
    """An import that runs when the module is imported, of a package the base install
    may lack, with no guard before it."""

    path: str
    line: int
    module: str

    def __str__(self) -> str:
        return f"{self.path}:{self.line}: imports {self.module} with no guard"


def _distribution_name(requirement: str) -> str:
    """'PyYAML>=6; extra == "x"' -> 'pyyaml' (PEP 503's normalised name)."""
    return re.sub(r"[-_.]+", "-", re.split(r"[\s;<>=!~\[(]", requirement, 1)[0]).lower()


@lru_cache(maxsize=1)
def base_modules() -> frozenset[str]:
    """Top-level module names every base install has: the standard library, what the
    distribution's unconditional requirements provide (installed metadata, so `pyyaml`
    is `yaml`), and the suite's own packages."""
    requires = importlib.metadata.requires(DISTRIBUTION) or []
    base = {_distribution_name(r) for r in requires if "extra ==" not in r}
    provided = {name for name, dists in importlib.metadata.packages_distributions().items()
                if any(_distribution_name(d) in base for d in dists)}
    return frozenset(sys.stdlib_module_names) | provided | OWN


def _imported(node: ast.AST) -> list[str]:
    """Top-level names a statement or call imports (relative imports are the suite's)."""
    if isinstance(node, ast.Import):
        return [alias.name.split(".")[0] for alias in node.names]
    if isinstance(node, ast.ImportFrom):
        return [node.module.split(".")[0]] if node.level == 0 and node.module else []
    if isinstance(node, ast.Call) and _called(node) in ("import_module", "__import__"):
        return _string_arguments(node)
    return []


def _called(call: ast.Call) -> str:
    func = call.func
    return func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", "")


def _string_arguments(call: ast.Call) -> list[str]:
    return [a.value.split(".")[0] for a in call.args
            if isinstance(a, ast.Constant) and isinstance(a.value, str)]


def _catches_import_error(handler: ast.ExceptHandler) -> bool:
    if handler.type is None:
        return True
    names = handler.type.elts if isinstance(handler.type, ast.Tuple) else [handler.type]
    return any(getattr(n, "id", getattr(n, "attr", "")) in IMPORT_ERRORS for n in names)


def _is_type_checking(test: ast.expr) -> bool:
    return getattr(test, "id", getattr(test, "attr", "")) == "TYPE_CHECKING"


class _ImportTimeReader:
    """Walks the statements that run at import, in order, holding the modules guarded so
    far; each import of a module outside the base install and not guarded is a finding."""

    def __init__(self, path: str, allowed: frozenset[str]):
        self.path, self.allowed = path, allowed
        self.guarded: set[str] = set()
        self.found: list[UnguardedImport] = []

    def block(self, statements: list[ast.stmt], in_try: bool = False) -> None:
        for statement in statements:
            self.statement(statement, in_try)

    def statement(self, node: ast.stmt, in_try: bool) -> None:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            return  # runs when called, where a test skips or imports as it likes
        if isinstance(node, ast.If) and _is_type_checking(node.test):
            self.block(node.orelse, in_try)
            return
        if isinstance(node, ast.Try):
            caught = in_try or any(_catches_import_error(h) for h in node.handlers)
            self.block(node.body, caught)
            for part in (*(h.body for h in node.handlers), node.orelse, node.finalbody):
                self.block(part, in_try)
            return
        self.names(node, in_try)
        for nested in ("body", "orelse"):  # class, if, with, for, while
            if isinstance(getattr(node, nested, None), list):
                self.block(getattr(node, nested), in_try)

    def names(self, node: ast.stmt, in_try: bool) -> None:
        """The statement itself and the expressions of its own line (a value, an `if`'s
        test, a `for`'s iterable, a `with`'s contexts): imports, and guards for later."""
        for part in [node] + [n for e in _header(node) for n in ast.walk(e)]:
            for module in _imported(part):
                if module not in self.allowed and module not in self.guarded and not in_try:
                    self.found.append(UnguardedImport(self.path, node.lineno, module))
            if isinstance(part, ast.Call) and _called(part) in GUARDS:
                self.guarded.update(_string_arguments(part))


def _header(node: ast.stmt) -> list[ast.AST]:
    parts = [getattr(node, name, None) for name in ("value", "test", "iter")]
    parts += [item.context_expr for item in getattr(node, "items", [])]
    return [p for p in parts if isinstance(p, ast.AST)]


def unguarded_imports(folder: Path, allowed: frozenset[str],
                      pattern: str = "*.py") -> list[UnguardedImport]:
    """Every unguarded import-time import of a module outside `allowed`, in the files of
    folder that match pattern."""
    found: list[UnguardedImport] = []
    for path in sorted(folder.glob(pattern)):
        reader = _ImportTimeReader(str(path.relative_to(folder)), allowed)
        reader.block(ast.parse(path.read_text(encoding="utf-8"), str(path)).body)
        found += reader.found
    return found


GUARD_LIKE = GUARDS | {"find_spec"}  # importlib.util.find_spec("x") in a skipif names x


def names_optional(path: Path, allowed: frozenset[str]) -> frozenset[str]:
    """Every package outside `allowed` the file names anywhere: in an import statement
    (module level or in a function), in import_module, or as a guard's or find_spec's
    argument."""
    named: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), str(path))):
        named.update(_imported(node))
        if isinstance(node, ast.Call) and _called(node) in GUARD_LIKE:
            named.update(_string_arguments(node))
    return frozenset(named - allowed)
