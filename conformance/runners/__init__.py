"""The runner contract and the registry: one module per system, one line each.

A runner turns the framework-neutral Case into what a user of one system
would type (`translate`), loads the canonical weights into that system's own
layout and runs it (`run`), returning NumPy arrays and the system's own
accounting in an Observation.  Runners never assert and never compare: the
matrix (matrix.py) and the reporter judge.

Frameworks are imported inside `run` only, so listing runners, collecting
the pytest matrix and `--help` stay fast and work without any framework.
"""
from __future__ import annotations

import importlib
import importlib.util
import os
from dataclasses import dataclass, field
from typing import Any

import numpy as np

# One line per runner: "module:Class".  Order is the column order of reports.
REGISTRY: tuple[str, ...] = (
    "conformance.runners.torch_mha:TorchMHA",
    "conformance.runners.torch_mha:TorchMHAFastPath",
    "conformance.runners.torch_sdpa:TorchSDPA",
    "conformance.runners.keras_mha:KerasTensorFlow",
    "conformance.runners.keras_mha:KerasJax",
    "conformance.runners.keras_mha:KerasTorch",
    "conformance.runners.keras_mha:KerasTensorFlowScores",
    "conformance.runners.keras_mha:KerasJaxScores",
    "conformance.runners.keras_mha:KerasTorchScores",
    "conformance.runners.keras_gqa:KerasGQATensorFlow",
    "conformance.runners.keras_gqa:KerasGQAJax",
    "conformance.runners.keras_gqa:KerasGQATorch",
    "conformance.runners.onnx_export:OnnxTorchExport",
    "conformance.runners.onnx_export:OnnxTorchExportLegacy",
    "conformance.runners.onnx_attention_op:OnnxAttentionOpORT",
    "conformance.runners.onnx_attention_op:OnnxAttentionOpReference",
    "conformance.runners.onnx_keras:OnnxKerasExport",
    "conformance.runners.matlab_model:MatlabSelfAttentionModel",
)


@dataclass(frozen=True)
class Translation:
    """The native configuration: what a user of the system would type."""

    call: str  # e.g. "torch.nn.MultiheadAttention(embed_dim=512, num_heads=8)"
    kwargs: dict[str, Any] = field(default_factory=dict)  # the same, as arguments


@dataclass(frozen=True)
class NotExpressible:
    """The system cannot express the case; `reason` quotes the limitation."""

    reason: str


class NotExpressibleError(Exception):
    """Raised from `run` when the limit shows only on trying (the framework's
    constructor rejected the configuration, a fast path did not engage...).
    The message should quote the framework's own words."""


@dataclass
class Observation:
    """What one system produced for one case, as plain NumPy and numbers."""

    output: np.ndarray  # (B, T, E_o) as float64 (converted from the native dtype)
    attention_weights: np.ndarray | None = None  # (B, H, T, S) per head, when returned
    weights_returned: str = "none"  # "per_head", "averaged" or "none": what the system gives
    parameters: int | None = None  # the system's own count; None = it holds no parameters
    projection_parameters: int | None = None  # for systems holding none: arrays we passed in
    weight_shapes: dict[str, tuple[int, ...]] = field(default_factory=dict)  # native names
    notes: list[str] = field(default_factory=list)  # facts worth a reader's attention
    executed: bool = True  # False for documented models of systems that cannot run here
    extras: dict[str, Any] = field(default_factory=dict)  # JSON-able details for the report


class Runner:
    """Base class: subclasses set the class attributes and implement two methods."""

    name: str = ""  # the id in reports and pytest ids, e.g. "torch.mha"
    framework: str = ""  # the pytest marker, e.g. "torch"
    requires: tuple[str, ...] = ()  # importable modules needed to run
    extras: str = ""  # the pip extras that bring them, when not just `framework`
    # Runners sharing a `worker` key run in one long-lived subprocess with
    # `worker_env` set before anything is imported (e.g. KERAS_BACKEND).
    worker: str | None = None
    worker_env: dict[str, str] = {}
    entry: str = ""  # "module:Class", filled in by the registry
    # Extra report sections this runner family contributes: functions
    # (frame, cases, runners) -> report.Section | None (see report.py).
    sections: tuple = ()

    def available(self) -> str | None:
        """None when runnable here, else the reason to skip.  Looked up once per
        runner object (every item asks; find_spec reads the file system)."""
        if "_missing" not in self.__dict__:
            missing = [m for m in self.requires if importlib.util.find_spec(m) is None]
            self._missing = (f"{', '.join(missing)} not installed "
                             f"(pip install -e '.[{self.extras or self.framework}]')"
                             if missing else None)
        return self._missing

    def translate(self, case) -> Translation | NotExpressible:
        raise NotImplementedError

    def run(self, case, translation: Translation, data) -> Observation:
        raise NotImplementedError


def load(entry: str) -> Runner:
    module, cls = entry.split(":")
    runner = getattr(importlib.import_module(module), cls)()
    runner.entry = entry
    return runner


def registry() -> tuple[str, ...]:
    """REGISTRY plus out-of-tree runners named in CONFORMANCE_EXTRA_RUNNERS
    ("module:Class,module:Class"), so a runner can be tried without editing
    this package."""
    extra = os.environ.get("CONFORMANCE_EXTRA_RUNNERS", "")
    return REGISTRY + tuple(e.strip() for e in extra.split(",") if e.strip())


def all_runners() -> list[Runner]:
    return [load(entry) for entry in registry()]


def runner_names() -> list[str]:
    return [r.name for r in all_runners()]


def to_numpy(x) -> np.ndarray:
    """Any framework tensor -> float64 NumPy (bfloat16 has no NumPy dtype)."""
    if hasattr(x, "detach"):  # torch
        x = x.detach().cpu()
        return x.double().numpy() if x.is_floating_point() else x.numpy()
    return np.asarray(x).astype(np.float64)
