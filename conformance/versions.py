"""Installed package versions, read from metadata: nothing is imported, so
collection stays fast.  Reports, cache keys and the pytest header use it.

Standard library only: history/probes/run_probes.py reads it in the version-drift envs
(this repository's source on their PYTHONPATH) before it imports any library probed."""
from __future__ import annotations

import platform
from importlib import metadata

REPORTED = ("numpy", "pandas", "torch", "tensorflow-cpu", "tensorflow", "keras", "jax",
            "onnx", "onnxruntime", "onnxscript")


def package_versions(packages: tuple[str, ...] = REPORTED) -> dict[str, str]:
    """{package: version} for the installed ones among `packages`, in that order."""
    found = {}
    for pkg in packages:
        try:
            found[pkg] = metadata.version(pkg)
        except metadata.PackageNotFoundError:
            continue
    return found


def versions() -> dict[str, str]:
    """Python and the reported packages: the report metadata and pytest header."""
    return {"python": platform.python_version(), **package_versions()}
