"""The layering of conformance/ (DESIGN.md, "Layers"), read from the source with ast.

Every import statement counts, top-level or inside a function, absolute or relative:
`from . import x` and `from .pkg import x` are imports of the module x where x is one,
and a package's __init__ importing its submodules is an import of them.
(a) a runner module (runners/<name>.py, name not starting with "_") imports no other
    runner module; helpers (runners/_*.py) are fine;
(b) the module graph is acyclic;
(c) nothing under runners/ imports pandas, the report package, the pytest plugin,
    matrix, verdict, ledger or workers;
(d) no module over 400 lines, no function over 60 lines;
(e) the packages keep the pipeline's order (LAYERS): a module imports only from its own
    layer or below (paths/versions/cache/datafile/settings < case < oracle, contract,
    convert < runners < compare < run < conventions < report < plugin < cli < __main__);
(f) a module of runners/<framework>/ imports no module of another framework's folder;
    what several frameworks' runners build alike (the torch module and the Keras layer
    the ONNX exports and OpenVINO convert) lives in a shared folder whose name starts
    with "_" (runners/_export/), which imports no framework folder, nor does a module
    directly under runners/ (counting.py).
"""
from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent / "conformance"
RUNNERS = "conformance.runners"
FORBIDDEN_IN_RUNNERS = ("pandas", "conformance.report", "conformance.plugin",
                        "conformance.plugin.conventions_items", "conformance.run.evaluate",
                        "conformance.compare.verdict", "conformance.conventions.ledger",
                        "conformance.run.workers")
# (g) runners only answer native calls: the judgement of a convention (the reference
# oracle, candidate readings, classification) belongs to the ledger (conventions/)
JUDGEMENT = ("conformance.oracle.reference", "conformance.conventions")
MAX_LINES, MAX_FUNCTION = 400, 60
LAYERS = (("paths", "versions", "progress", "cache", "cache_prune", "cpu_isa", "datafile",
           "settings"),
          ("case",),
          ("oracle", "contract", "convert"), ("runners",), ("compare",), ("run",),
          ("conventions",), ("report", "history"), ("plugin",), ("cli",), ("__main__",))


def module_files(root: Path = ROOT) -> dict[str, Path]:
    """Dotted module name -> file, for every .py under `root` (packages by __init__)."""
    out = {}
    for path in sorted(root.rglob("*.py")):
        parts = ("conformance", *path.relative_to(root).with_suffix("").parts)
        out[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    return out


def imported_names(name: str, path: Path, modules: set[str]) -> list[tuple[int, str]]:
    """(line, imported name) for every import in the file: a module of `modules` where the
    name resolves to one, else the dotted name as written (third-party: its top name)."""
    is_package = path.name == "__init__.py"
    package = name.split(".") if is_package else name.split(".")[:-1]
    found = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            found += [(node.lineno, a.name) for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = package[:len(package) - node.level + 1] if node.level else []
            source = ".".join(base + ([node.module] if node.module else []))
            for a in node.names:
                full = f"{source}.{a.name}"
                found.append((node.lineno, full if full in modules else source))
    return found


def module_graph(root: Path = ROOT) -> dict[str, set[str]]:
    """Module -> the conformance modules it imports (anywhere in its file)."""
    files = module_files(root)
    graph: dict[str, set[str]] = {}
    for name, path in files.items():
        graph[name] = {target for _, target in imported_names(name, path, set(files))
                       if target in files and target != name}
    return graph


def find_cycle(graph: dict[str, set[str]]) -> list[str] | None:
    """One import cycle as [a, b, ..., a], or None when the graph is acyclic."""
    state: dict[str, int] = {}  # 1 on the current path, 2 done
    for start in sorted(graph):
        if state.get(start):
            continue
        path, stack = [start], [iter(sorted(graph.get(start, ())))]
        state[start] = 1
        while stack:
            nxt = next(stack[-1], None)
            if nxt is None:
                state[path.pop()] = 2
                stack.pop()
            elif state.get(nxt) == 1:
                return path[path.index(nxt):] + [nxt]
            elif not state.get(nxt):
                state[nxt] = 1
                path.append(nxt)
                stack.append(iter(sorted(graph.get(nxt, ()))))
    return None


def is_runner(module: str) -> bool:
    prefix, _, last = module.rpartition(".")
    return prefix == RUNNERS and not last.startswith("_")


def runner_imports_runner(graph: dict[str, set[str]]) -> list[str]:
    return [f"{m} imports the runner module {t}" for m, targets in sorted(graph.items())
            if is_runner(m) for t in sorted(targets) if is_runner(t)]


def layer_of(module: str) -> int | None:
    """The LAYERS index of a conformance module (None: the package root itself)."""
    parts = module.split(".")
    if len(parts) < 2:
        return None
    return next(i for i, names in enumerate(LAYERS) if parts[1] in names)


def upward_imports(graph: dict[str, set[str]]) -> list[str]:
    """Imports of a module from a layer above its own."""
    return [f"{m} (layer {LAYERS[layer_of(m)][0]}) imports {t} (layer {LAYERS[layer_of(t)][0]})"
            for m, targets in sorted(graph.items()) for t in sorted(targets)
            if layer_of(m) is not None and layer_of(t) is not None
            and layer_of(t) > layer_of(m)]


def framework_of(module: str) -> str | None:
    """The framework folder of a module under runners/<framework>/, else None."""
    parts = module.split(".")
    inside = parts[:2] == ["conformance", "runners"] and len(parts) > 3
    return parts[2] if inside and not parts[2].startswith("_") else None


def is_shared(module: str) -> bool:
    """A module of runners/ that no one framework owns: in a folder named _*, or directly
    under runners/ (not the package itself)."""
    parts = module.split(".")
    return parts[:2] == ["conformance", "runners"] and (
        len(parts) == 3 or len(parts) > 3 and parts[2].startswith("_"))


def cross_framework_imports(graph: dict[str, set[str]]) -> list[str]:
    across = [f"{m} imports {t} (another framework's folder)"
              for m, targets in sorted(graph.items()) for t in sorted(targets)
              if framework_of(m) and framework_of(t) and framework_of(t) != framework_of(m)]
    return across + [f"{m} imports {t} (a shared module imports a framework's folder)"
                     for m, targets in sorted(graph.items()) if is_shared(m)
                     for t in sorted(targets) if framework_of(t)]


def test_packages_keep_the_pipeline_order():
    assert upward_imports(module_graph()) == []


def test_every_package_has_a_layer():
    unplaced = {m.split(".")[1] for m in module_files() if "." in m} - {
        n for names in LAYERS for n in names}
    assert unplaced == set()


def test_runner_folders_import_no_other_framework():
    assert cross_framework_imports(module_graph()) == []


def test_no_runner_imports_another_runner():
    assert runner_imports_runner(module_graph()) == []


def test_the_module_graph_is_acyclic():
    cycle = find_cycle(module_graph())
    assert cycle is None, "import cycle: " + " -> ".join(cycle or [])


def test_runners_import_no_report_plugin_or_pandas():
    files = module_files()
    bad = [f"{path.relative_to(ROOT.parent)}:{line}: imports {target}"
           for name, path in files.items() if name.startswith(RUNNERS + ".")
           for line, target in imported_names(name, path, set(files))
           if any(target == f or target.startswith(f + ".") for f in FORBIDDEN_IN_RUNNERS)]
    assert bad == []


def judging_imports(files: dict[str, Path] | None = None) -> dict[str, list[str]]:
    """Runner module -> the judgement modules it imports (rule g)."""
    files = files or module_files()
    found: dict[str, list[str]] = {}
    for name, path in files.items():
        if name.startswith(RUNNERS + "."):
            hits = [f"{line}: {target}" for line, target in imported_names(name, path, set(files))
                    if any(target == j or target.startswith(j + ".") for j in JUDGEMENT)]
            if hits:
                found[name] = hits
    return found


def test_runners_import_no_oracle_or_classification():
    """Rule (g): a runner answers native calls; it imports neither the reference oracle nor
    any classification (every runner module: the ledger's conventions/probes/ judge)."""
    found = judging_imports()
    assert found == {}, f"runner modules that judge conventions (move it to conventions/): {found}"


def test_a_planted_judging_runner_is_found(tmp_path):
    pkg = tmp_path / "conformance"
    (pkg / "runners" / "toy").mkdir(parents=True)
    (pkg / "oracle").mkdir()
    for init in (pkg, pkg / "runners", pkg / "runners" / "toy", pkg / "oracle"):
        (init / "__init__.py").write_text("")
    (pkg / "oracle" / "reference.py").write_text("def attention(): pass\n")
    (pkg / "runners" / "toy" / "probes.py").write_text(
        "from conformance.oracle.reference import attention\n")
    found = judging_imports(module_files(pkg))
    assert list(found) == ["conformance.runners.toy.probes"]


def test_modules_and_functions_are_short():
    long = []
    for path in module_files().values():
        text = path.read_text()
        if len(text.splitlines()) > MAX_LINES:
            long.append(f"{path.relative_to(ROOT.parent)}: {len(text.splitlines())} lines")
        for node in ast.walk(ast.parse(text)):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                n = (node.end_lineno or node.lineno) - node.lineno + 1
                if n > MAX_FUNCTION:
                    long.append(f"{path.relative_to(ROOT.parent)}:{node.lineno}: {node.name} "
                                f"is {n} lines")
    assert long == []


# -- the checkers catch what they are for --------------------------------------
def test_a_planted_cycle_is_found():
    graph = {"conformance.a": {"conformance.b"}, "conformance.b": {"conformance.c"},
             "conformance.c": {"conformance.a", "conformance.d"}, "conformance.d": set()}
    assert find_cycle(graph) == ["conformance.a", "conformance.b", "conformance.c",
                                 "conformance.a"]
    graph["conformance.c"] = {"conformance.d"}
    assert find_cycle(graph) is None
    assert find_cycle({"conformance.x": {"conformance.x"}}) == ["conformance.x"] * 2


def test_planted_imports_are_resolved(tmp_path):
    """Relative, absolute and in-function imports, and a package re-exporting a submodule,
    become edges; a runner importing a runner is reported."""
    pkg = tmp_path / "conformance"
    (pkg / "runners").mkdir(parents=True)
    (pkg / "__init__.py").write_text("from .core import thing\n")
    (pkg / "core.py").write_text("def f():\n    from . import runners\n")
    (pkg / "runners" / "__init__.py").write_text("from . import alpha\n")
    (pkg / "runners" / "_helper.py").write_text("import pandas\n")
    (pkg / "runners" / "alpha.py").write_text("from ._helper import x\n\n\ndef g():\n"
                                              "    import conformance.runners.beta\n")
    (pkg / "runners" / "beta.py").write_text("from .. import core\n")
    graph = module_graph(pkg)
    assert graph == {"conformance": {"conformance.core"},
                     "conformance.core": {"conformance.runners"},
                     "conformance.runners": {"conformance.runners.alpha"},
                     "conformance.runners._helper": set(),
                     "conformance.runners.alpha": {"conformance.runners._helper",
                                                   "conformance.runners.beta"},
                     "conformance.runners.beta": {"conformance.core"}}
    assert runner_imports_runner(graph) == [
        "conformance.runners.alpha imports the runner module conformance.runners.beta"]
    assert find_cycle(graph) == ["conformance.core", "conformance.runners",
                                 "conformance.runners.alpha", "conformance.runners.beta",
                                 "conformance.core"]
    files = module_files(pkg)
    helper = imported_names("conformance.runners._helper", files["conformance.runners._helper"],
                            set(files))
    assert helper == [(1, "pandas")]


def test_planted_upward_imports_are_found():
    """Each rule of LAYERS on a planted violation: a lower layer importing a higher one."""
    edges = [("conformance.case.loader", "conformance.runners.torch.mha"),
             ("conformance.runners.torch.mha", "conformance.compare.verdict"),
             ("conformance.compare.verdict", "conformance.run.evaluate"),
             ("conformance.run.evaluate", "conformance.conventions.ledger"),
             ("conformance.conventions.ledger", "conformance.report.base"),
             ("conformance.report.base", "conformance.plugin.items"),
             ("conformance.plugin.items", "conformance.cli.cases"),
             ("conformance.oracle.reference", "conformance.runners"),
             ("conformance.paths", "conformance.case.model")]
    for low, high in edges:
        assert len(upward_imports({low: {high}, high: set()})) == 1, (low, high)
        assert upward_imports({high: {low}, low: set()}) == [], (high, low)
    same = {"conformance.contract.runner": {"conformance.oracle.canonical"}}
    assert upward_imports(same) == []  # one layer: oracle, contract, convert


def test_planted_cross_framework_import_is_found():
    graph = {"conformance.runners.hf.bert": {"conformance.runners.torch.common"},
             "conformance.runners.onnx.torch_export": {"conformance.runners.torch.common",
                                                       "conformance.runners._export.torch_mha"},
             "conformance.runners.torch.mha": {"conformance.runners.torch.common",
                                               "conformance.runners._export.torch_mha"},
             "conformance.runners._export.torch_mha": {"conformance.contract.runner"}}
    assert cross_framework_imports(graph) == [
        "conformance.runners.hf.bert imports conformance.runners.torch.common "
        "(another framework's folder)",
        "conformance.runners.onnx.torch_export imports conformance.runners.torch.common "
        "(another framework's folder)"]


def test_planted_shared_module_importing_a_framework_is_found():
    """The shared folder and the modules directly under runners/ stay below every framework
    folder: one importing a framework's module is reported, importing another shared
    module is not."""
    graph = {"conformance.runners._export.deployed": {"conformance.runners.onnx.common",
                                                      "conformance.runners._export.torch_mha"},
             "conformance.runners.counting": {"conformance.runners.keras.common"},
             "conformance.runners": {"conformance.runners.torch.mha"}}
    assert cross_framework_imports(graph) == [
        "conformance.runners._export.deployed imports conformance.runners.onnx.common "
        "(a shared module imports a framework's folder)",
        "conformance.runners.counting imports conformance.runners.keras.common "
        "(a shared module imports a framework's folder)"]


# (h) no runner module names an axis id (the ledger's probes name axes): any string constant
# equal to one counts, but the ids that are also case features and native arguments
# (FEATURE_WORDS: a case's `softcap`, a layer's `dropout=`, MPT's `softmax_scale`) count
# only in an axis position: the first argument (or axis=) of Convention(...), a key of a
# dict literal with another axis id among its keys or assigned to `documented_conventions`.
# A runner reports ApiFacts (contract/api_facts.py), never a ledger cell: no runner module
# imports or builds a Convention.
FEATURE_WORDS = frozenset({"softcap", "sinks", "dropout", "softmax_scale"})


def _strings(node) -> list[str]:
    return [n.value for n in ([node] if node is not None else [])
            if isinstance(n, ast.Constant) and isinstance(n.value, str)]


def axis_names(path: Path, axis_ids) -> list[str]:
    """'line: id' for every axis id the module names (rule h)."""
    tree = ast.parse(path.read_text(), str(path))
    ids, plain = set(axis_ids), set(axis_ids) - FEATURE_WORDS
    found = {(n.lineno, n.value) for n in ast.walk(tree) if isinstance(n, ast.Constant)
             and isinstance(n.value, str) and n.value in plain}
    for node in ast.walk(tree):
        if isinstance(node, ast.Call) and getattr(node.func, "id", getattr(
                node.func, "attr", "")) == "Convention":
            first = node.args[:1] + [k.value for k in node.keywords if k.arg == "axis"]
            found |= {(node.lineno, s) for a in first for s in _strings(a) if s in ids}
        targets = [t.id for t in getattr(node, "targets", [getattr(node, "target", None)])
                   if isinstance(t, ast.Name)]
        value = getattr(node, "value", None)
        if isinstance(value, ast.Dict):
            keys = [s for k in value.keys for s in _strings(k)]
            if "documented_conventions" in targets or any(k in plain for k in keys):
                found |= {(value.lineno, k) for k in keys if k in ids}
    return [f"{line}: {name}" for line, name in sorted(found)]


def runner_axis_names(root: Path = ROOT) -> dict[str, list[str]]:
    """Runner module file (relative to conformance/) -> the axis ids it names."""
    from conformance.conventions.axes import AXIS_IDS

    found = {}
    for path in sorted((root / "runners").rglob("*.py")):
        names = axis_names(path, AXIS_IDS)
        if names:
            found[path.relative_to(root).as_posix()] = names
    return found


def test_no_runner_module_names_an_axis():
    found = runner_axis_names()
    assert found == {}, ("runner modules naming an axis id (the ledger's probes name axes; "
                         "a runner reports ApiFacts and passes native calls, RAW_ARGUMENTS): "
                         f"{found}")


def runner_cells(root: Path = ROOT) -> list[str]:
    """'module:line' for every runner module line that imports or calls Convention."""
    found = []
    for path in sorted((root / "runners").rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            names = ([a.name for a in node.names] if isinstance(node, ast.ImportFrom) else
                     [getattr(node.func, "id", getattr(node.func, "attr", ""))]
                     if isinstance(node, ast.Call) else [])
            if "Convention" in names:
                found.append(f"{path.relative_to(root).as_posix()}:{node.lineno}")
    return found


def test_no_runner_module_builds_a_ledger_cell(tmp_path):
    assert runner_cells() == [], "runner modules building a Convention: report an ApiFact"
    toy = tmp_path / "runners" / "toy"
    toy.mkdir(parents=True)
    (toy / "judging.py").write_text(  # planted: a runner building a cell itself
        "from conformance.contract.runner import Convention\n"
        "def cells(axis):\n    return [Convention(axis, 'accepted', '')]\n")
    (toy / "facts.py").write_text(
        "from conformance.contract.api_facts import ApiFact\n"
        "def facts():\n    return [ApiFact('unbatched_call', 'accepted', '')]\n")
    assert runner_cells(tmp_path) == ["runners/toy/judging.py:1", "runners/toy/judging.py:3"]


def test_a_planted_axis_name_is_found(tmp_path):
    """A Convention cell and a documented dict name axes, a feature argument does not."""
    toy = tmp_path / "runners" / "toy"
    toy.mkdir(parents=True)
    (toy / "named.py").write_text(
        'def cells(Convention, plan):\n'
        '    plan = {**plan, "dropout": 0.1, "softcap": 30.0}\n'
        '    return [Convention("dropout", "always", ""), Convention(axis="sinks")]\n'
        'documented_conventions = {"softcap": ("applied", "")}\n'
        'AXES = frozenset({"mixed_dtype"})\n')
    (toy / "clean.py").write_text(
        'def call(layer, plan):\n'
        '    return layer(dropout=plan["dropout"], sinks="sinks", **{"softcap": 1.0})\n')
    found = runner_axis_names(tmp_path)
    assert list(found) == ["runners/toy/named.py"]
    assert found["runners/toy/named.py"] == [
        "3: dropout", "3: sinks", "4: softcap", "5: mixed_dtype"]
