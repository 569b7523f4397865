"""Every module or file the docstrings, comments and docs name exists.

Scanned: the docstrings and comments of every Python file of conformance/, tests/ and
benchmarks/ (comments read with tokenize, string statements with ast: code is not
scanned, an import of a missing module fails on its own), README.md and docs/*.md (the
whole text).  A reference is one of

    conformance/<package>/<module>.py    a path from the repository root, file or folder
                                         (conformance/, tests/, benchmarks/, docs/, examples/)
    conformance.<package>.<module>       a dotted module, optionally followed by a name
                                         the module defines or imports
    <folder>/<module>.py                 a path relative to conformance/ or to one of its
                                         folders (runners/torch/sdpa.py, torch/sdpa.py)
    <module>.py                          a bare file name that some Python file of
                                         conformance/, tests/ or benchmarks/ has

and, in Markdown, every relative link target.
Placeholders (`runners/<framework>/`) and globs (`cases/rope_*.yaml`) are not references;
nor are cases/ and expectations/ paths (a user adds files there).  Upstream source files that
comments cite (torch/nn/functional.py, transformers' modeling_llama.py) are in UPSTREAM;
references left in files that another change is editing are in PENDING, each with the
fix, and an entry that no longer occurs fails until it is removed.
"""
from __future__ import annotations

import ast
import functools
import io
import re
import tokenize
from pathlib import Path

from conformance.paths import ROOT

ROOTED = ("conformance", "tests", "benchmarks", "docs", "examples")
_SEG = r"[A-Za-z_][\w-]*"
REFERENCE = re.compile(
    rf"(?<![\w./<>{{}}$-])("
    rf"(?:{'|'.join(ROOTED)})/(?:{_SEG}/)*(?:{_SEG}(?:\.\w+)*)?"  # rooted path or folder
    rf"|(?:{_SEG}/)+{_SEG}\.py"  # relative path
    rf"|{_SEG}\.py"  # bare file name
    rf"|conformance(?:\.[A-Za-z_]\w*)+"  # dotted module
    rf")(?![\w/<{{*-]|\.[\w*])")  # not a placeholder, a glob or a longer name
# upstream source files the comments cite, by path prefix and by file name
UPSTREAM_PREFIXES = ("torch/nn/", "transformers/", "flax/nnx/", "flax/linen/", "jax/_src/",
                     "onnx/backend/", "mlx_lm/", "keras/src/", "torch/onnx/",
                     "onnx/external_data_helper.py", "onnx/reference/", "openvino/",
                     "keras_hub/", "models/", "gguf-py/")
UPSTREAM_NAMES = re.compile(r"(modeling|configuration)_\w+\.py|masking_utils\.py|"
                            r"sdpa_attention\.py|functions\.py|rotary_embedding\.py|"
                            r"(cached_)?multi_head_attention\.py|litert\.py|"
                            # keras-hub's model files, mlx-lm's, llama.cpp's converter
                            r"\w+_(backbone|attention|layers|decoder|vision_encoder)\.py|"
                            r"rope_utils\.py|gemma3_text\.py|qwen2\.py|bailing_moe_v3\.py|"
                            r"convert_hf_to_gguf\.py")
# (file, reference) -> the fix, for files another change is editing now; may only shrink
PENDING: dict[tuple[str, str], str] = {}
LINK = re.compile(r"\]\(([^)#\s]+)")  # a Markdown link's target


def references(text: str) -> list[tuple[int, str]]:
    """(offset, reference) for every module or file reference in `text`."""
    return [(m.start(), m.group(1)) for m in REFERENCE.finditer(text)]


def _python_texts(source: str):
    """(line, text) of every comment and every string statement (docstrings)."""
    for tok in tokenize.generate_tokens(io.StringIO(source).readline):
        if tok.type == tokenize.COMMENT:
            yield tok.start[0], tok.string
    for node in ast.walk(ast.parse(source)):
        if (isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant)
                and isinstance(node.value.value, str)):
            yield node.lineno, node.value.value


def texts(path: Path):
    """(first line, text) of what is scanned in `path`."""
    source = path.read_text(encoding="utf-8")
    if path.suffix == ".md":
        yield 1, source
    else:
        yield from _python_texts(source)


def _defined_names(path: Path) -> set[str]:
    names = set()
    for node in ast.parse(path.read_text(encoding="utf-8")).body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names.add(node.name)
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            names.update((a.asname or a.name).split(".")[0] for a in node.names)
        elif isinstance(node, (ast.Assign, ast.AnnAssign)):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            names.update(n.id for t in targets for n in ast.walk(t) if isinstance(n, ast.Name))
    return names


def _module_file(root: Path, parts: list[str]) -> Path | None:
    base = root.joinpath(*parts)
    for candidate in (base.with_suffix(".py"), base / "__init__.py"):
        if candidate.is_file():
            return candidate
    return None


def dotted_exists(dotted: str, root: Path = ROOT) -> bool:
    """The dotted name is a module, or a name that its longest module prefix defines."""
    parts = dotted.split(".")
    for n in range(len(parts), 0, -1):
        found = _module_file(root, parts[:n])
        if found is not None:
            return n == len(parts) or parts[n] in _defined_names(found)
    return False


@functools.lru_cache(maxsize=None)
def _tree(root: Path) -> tuple[frozenset[str], tuple[Path, ...]]:
    """The Python file names of conformance/, tests/ and benchmarks/, and the folders of
    conformance/ (each a base of relative paths)."""
    names = frozenset(p.name for top in ("conformance", "tests", "benchmarks")
                      for p in (root / top).rglob("*.py"))
    package = root / "conformance"
    return names, (package, *sorted(d for d in package.rglob("*") if d.is_dir()))


def resolves(ref: str, root: Path = ROOT) -> bool:
    """Whether `ref` names something that exists."""
    if ref.startswith("conformance."):
        return dotted_exists(ref, root)
    path = ref.rstrip("/")
    if ref.startswith(tuple(f"{top}/" for top in ROOTED)) or path in ROOTED:
        return (root / path).exists()
    names, folders = _tree(root)
    if "/" not in path:
        return UPSTREAM_NAMES.fullmatch(path) is not None or path in names
    return (path.startswith(UPSTREAM_PREFIXES) or any((f / path).exists() for f in folders)
            or UPSTREAM_NAMES.fullmatch(path.rsplit("/", 1)[1]) is not None)


def stale(path: Path, root: Path = ROOT) -> list[tuple[int, str]]:
    """(line, reference) for every reference in `path` that names nothing, sorted."""
    found = []
    for line, text in texts(path):
        for offset, ref in references(text):
            if not resolves(ref, root):
                found.append((line + text.count("\n", 0, offset), ref))
        if path.suffix == ".md":  # a relative link resolves from the file's folder
            found += [(line + text.count("\n", 0, m.start()), m.group(1))
                      for m in LINK.finditer(text) if "://" not in m.group(1)
                      and not (path.parent / m.group(1)).exists()]
    return sorted(found)


def scanned_files(root: Path = ROOT) -> list[Path]:
    python = [p for top in ("conformance", "tests", "benchmarks")
              for p in sorted((root / top).rglob("*.py"))]
    return python + [root / "README.md", *sorted((root / "docs").glob("*.md"))]


def all_stale(root: Path = ROOT) -> dict[tuple[str, str], list[int]]:
    out: dict[tuple[str, str], list[int]] = {}
    for path in scanned_files(root):
        for line, ref in stale(path, root):
            out.setdefault((path.relative_to(root).as_posix(), ref), []).append(line)
    return out


def test_every_referenced_module_and_file_exists():
    found = all_stale()
    missing = [f"{file}:{lines[0]}: {ref}" for (file, ref), lines in found.items()
               if (file, ref) not in PENDING]
    assert missing == [], "stale references (name what exists now):\n" + "\n".join(missing)
    gone = [key for key in PENDING if key not in found]
    assert gone == [], f"PENDING entries that no longer occur (remove them): {gone}"


def test_the_checker_reports_a_planted_missing_path():
    planted = ("See conformance/case/gone.py, conformance.case.gone, "
               "conformance.case.loader.no_such_name, tests/test_gone.py, "
               "benchmarks/gone.py, runners/torch/gone.py, gone_module.py and docs/gone.md.")
    refs = [ref for _, ref in references(planted)]
    assert refs == ["conformance/case/gone.py", "conformance.case.gone",
                    "conformance.case.loader.no_such_name", "tests/test_gone.py",
                    "benchmarks/gone.py", "runners/torch/gone.py", "gone_module.py",
                    "docs/gone.md"]
    assert [r for r in refs if resolves(r)] == []


def test_the_checker_accepts_what_exists():
    present = ("conformance/case/loader.py, conformance/case/, conformance.case.loader, "
               "conformance.case.loader.parse_case, tests/test_readme.py, "
               "benchmarks/floor.py, runners/torch/sdpa.py, case/loader.py, common.py, "
               "torch/nn/functional.py (upstream), modeling_llama.py, docs/running.md, "
               "runners/<framework>/ (a placeholder), cases/rope_*.yaml (a glob) and "
               "expectations/flax.*.yaml.")
    refs = [ref for _, ref in references(present)]
    assert "runners/" not in refs and len(refs) == 12
    assert [r for r in refs if not resolves(r)] == []


def test_a_planted_stale_reference_in_a_file_is_found_with_its_line(tmp_path):
    package = tmp_path / "conformance" / "case"
    package.mkdir(parents=True)
    (tmp_path / "conformance" / "__init__.py").write_text('"""conformance/case/model.py"""\n')
    (package / "__init__.py").write_text("")
    (package / "model.py").write_text('"""The model."""\nX = 1\n')
    module = package / "loader.py"
    module.write_text('"""Reads cases (model.py).\n\nMoved from case/modern.py."""\n'
                      "x = 1  # see conformance.case.model.X and conformance.case.model.Y\n")
    assert stale(module, root=tmp_path) == [(3, "case/modern.py"),
                                            (4, "conformance.case.model.Y")]
    assert stale(tmp_path / "conformance" / "__init__.py", root=tmp_path) == []
    doc = tmp_path / "docs" / "guide.md"
    doc.parent.mkdir()
    doc.write_text("# Guide\n\n[cases](cases.md), [site](https://example.org/x.md), "
                   "[back](../conformance/case/model.py)\n")
    assert stale(doc, root=tmp_path) == [(3, "cases.md")]
