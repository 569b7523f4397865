"""Run one library's probes in this interpreter and print one JSON object on stdout.

Usage (by the drift command, in an env built for one release):
    ENV/bin/python run_probes.py keras
Standalone on purpose: an old env has only the library probed and its companions, not
this package nor its dependencies (installing it there would pin their versions too).
Every probe is wrapped: an exception becomes a `probe_error` cell with its message, a
missing API an `api_absent` cell; only a failed import of the library marks the env broken.
"""
from __future__ import annotations

import importlib
import json
import os
import sys
import traceback
import warnings

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

from outcomes import ABSENT, Absent  # noqa: E402

GROUPS = {"keras": "keras_probes", "flax": "jax_probes", "jax": "jax_probes",
          "onnxruntime": "onnx_probes", "onnx": "onnx_probes",
          "transformers": "hf_probes", "toy": "toy_probes"}


def _versions_module():
    """conformance/versions.py, loaded by its path: the one reader of installed versions.
    It needs only the standard library, so it runs in an env without this package."""
    import importlib.util

    path = os.path.join(os.path.dirname(os.path.dirname(HERE)), "versions.py")
    spec = importlib.util.spec_from_file_location("conformance_versions", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _one(probe):
    try:
        value, evidence = probe()
    except Absent as e:
        return {"value": ABSENT, "evidence": str(e)}
    except Exception as e:  # recorded, not fatal: the other probes still run
        line = traceback.extract_tb(e.__traceback__)[-1]
        return {"value": "probe_error",
                "evidence": f"{type(e).__name__}: {str(e)[:300]} (at {line.name}:{line.lineno})"}
    return {"value": value, "evidence": str(evidence)[:400]}


def main(library: str) -> dict:
    warnings.filterwarnings("ignore")
    module = importlib.import_module(GROUPS[library])
    result = {"library": library,
              "versions": _versions_module().package_versions(tuple(module.PACKAGES))}
    try:
        for name in getattr(module, "IMPORTS_BY_LIBRARY", {}).get(library, module.IMPORTS):
            importlib.import_module(name)
    except BaseException as e:  # noqa: BLE001 - an import that fails is the finding
        result["broken"] = f"import {name}: {type(e).__name__}: {str(e)[:400]}"
        return result
    cells = module.probes(library)
    result["cells"] = {cell: _one(probe) for cell, probe in cells.items()}
    return result


if __name__ == "__main__":
    out = main(sys.argv[1])
    sys.stdout.flush()
    print("DRIFT-RESULT " + json.dumps(out, sort_keys=True))
