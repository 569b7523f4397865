"""`pytest tests` runs on the base install (`pip install -e .`, no extra): a test module
that imports a framework (or any package the base install does not bring) when it is
imported turns a missing extra into a collection error, where it must be a skip with its
reason.  Read with ast (tests/import_scan.py), every statement that runs at import (the
module's body, class bodies, `if`/`with`/`for` blocks; not function bodies, nor
`if TYPE_CHECKING:`) may import only the standard library, the base install's own
dependencies and the suite's modules; anything else needs a guard before it:
`pytest.importorskip("x")` or tests.helpers' `require("x")` at module level, or a `try`
whose handler catches ImportError.  The tests .ci/run selects for the base install are
those of the modules that name such a package anywhere."""
from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from conformance.paths import ROOT

from .import_scan import UnguardedImport, base_modules, names_optional, unguarded_imports

TESTS = Path(__file__).resolve().parent


def test_no_test_module_imports_an_optional_package_unguarded():
    found = unguarded_imports(TESTS, base_modules())
    assert not found, "\n".join(map(str, found))


def test_no_suite_module_imports_an_optional_package_at_import():
    """Most test modules import the suite's modules at their top: a framework imported
    there (rather than inside the function that needs it) would fail their collection."""
    found = unguarded_imports(TESTS.parent / "conformance", base_modules(), "**/*.py")
    assert not found, "\n".join(map(str, found))


def test_the_base_install_holds_its_dependencies_and_no_framework():
    allowed = base_modules()
    assert {"numpy", "yaml", "pandas", "pytest", "json", "conformance"} <= allowed
    assert not {"torch", "jax", "flax", "keras", "tensorflow", "onnx", "onnxruntime",
                "transformers", "mlx", "openvino", "executorch", "ai_edge_litert",
                "hypothesis", "matplotlib", "jsonschema", "xdist"} & allowed


PLANTED = [
    ("import torch\n", 1, "torch"),
    ("import numpy\nfrom jax import numpy as jnp\n", 2, "jax"),
    ("import tensorflow.compat.v1 as tf\n", 1, "tensorflow"),
    ("class Layer:\n    import keras\n", 2, "keras"),
    ("if True:\n    from onnxruntime import InferenceSession\n", 2, "onnxruntime"),
    ("with open(__file__):\n    import mlx.core as mx\n", 2, "mlx"),
    ("import importlib\nnnx = importlib.import_module('flax.nnx')\n", 2, "flax"),
    ("import pytest\npytest.importorskip('onnx')\nimport torch\n", 3, "torch"),
    ("import torch\nimport pytest\ntorch = pytest.importorskip('torch')\n", 1, "torch"),
    ("try:\n    import numpy\nexcept ValueError:\n    pass\nimport openvino\n", 5,
     "openvino"),
    ("try:\n    import yaml\nexcept ImportError:\n    import hypothesis\n", 4,
     "hypothesis"),
]


@pytest.mark.parametrize("source, line, module", PLANTED)
def test_a_planted_import_time_import_is_caught(tmp_path, source, line, module):
    (tmp_path / "test_planted.py").write_text(source)
    (tmp_path / "test_clean.py").write_text("import json\nimport numpy as np\n")
    assert unguarded_imports(tmp_path, base_modules()) == [
        UnguardedImport("test_planted.py", line, module)]
    (tmp_path / "runners").mkdir()
    (tmp_path / "test_planted.py").rename(tmp_path / "runners" / "deep.py")
    assert unguarded_imports(tmp_path, base_modules(), "**/*.py") == [
        UnguardedImport("runners/deep.py", line, module)]


GUARDED = [
    "import pytest\ntorch = pytest.importorskip('torch')\nimport torch.nn as nn\n",
    "from tests.helpers import require\nrequire('onnx', 'onnxruntime')\n"
    "from onnx import helper\nimport onnxruntime as ort\n",
    "import pytest\nmx = pytest.importorskip('mlx.core', reason='no mlx')\nimport mlx.nn\n",
    "try:\n    import jax\nexcept (ImportError, RuntimeError):\n    jax = None\n",
    "def test_x():\n    import torch\n    from flax import nnx\n",
    "class Probe:\n    def run(self):\n        import keras\n",
    "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    import torch\n",
    "from . import helpers\nfrom .mha_call import mha\nfrom conformance.paths import ROOT\n",
]


@pytest.mark.parametrize("source", GUARDED)
def test_a_guarded_or_deferred_import_passes(tmp_path, source):
    (tmp_path / "test_guarded.py").write_text(source)
    assert unguarded_imports(tmp_path, base_modules()) == []


NAMED = [
    ("def test_x():\n    from flax import nnx\n", {"flax"}),
    ("import pytest\n\ndef test_x():\n    pytest.importorskip('onnx')\n", {"onnx"}),
    ("from tests.helpers import require\n\ndef test_x():\n    require('torch', 'jax')\n",
     {"torch", "jax"}),
    ("import importlib.util\nimport pytest\nNEEDS = pytest.mark.skipif("
     "importlib.util.find_spec('xdist') is None, reason='no xdist')\n", {"xdist"}),
    ("import json\nimport numpy as np\nfrom conformance.paths import ROOT\n\n"
     "def test_x():\n    import yaml\n    assert json and np and ROOT and yaml\n", set()),
]


@pytest.mark.parametrize("source, named", NAMED)
def test_the_packages_a_module_names_anywhere(tmp_path, source, named):
    (tmp_path / "test_named.py").write_text(source)
    assert names_optional(tmp_path / "test_named.py", base_modules()) == named


def test_the_base_install_run_selects_the_modules_that_name_an_optional_package():
    """`-m optional_packages` (tests/conftest.py): every item of a module that imports
    flax inside a test is selected, none of a module that names no optional package."""
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "--co", "-q", "-p", "no:cacheprovider",
         "-m", "optional_packages", "tests/test_flax_ledger.py", "tests/test_progress.py"],
        cwd=ROOT, capture_output=True, text=True, timeout=120)
    ids = [line for line in done.stdout.splitlines() if "::" in line]
    assert done.returncode == 0 and ids, done.stdout[-2000:] + done.stderr[-2000:]
    assert {i.split("::")[0] for i in ids} == {"tests/test_flax_ledger.py"}
    assert " deselected" in done.stdout.splitlines()[-1]
