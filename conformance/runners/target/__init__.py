"""Your attention, judged: a runner built around an implementation the user points the suite
at (`python -m conformance probe TARGET --kind KIND`, or `pytest --attention TARGET
--attention-kind KIND`), so any attention that answers native calls gets every ledger axis
and every matrix row its kind can express, with no Runner subclass of its own.

A target is one registry line, added for the run through CONFORMANCE_ATTENTION (a JSON
object the plugin and the CLI set: the target, its kind, its array library, its name and the
directory its module is imported from), so every process of the run (xdist workers, the
isolation subprocesses) builds the same runner.  Its cells are reported, never pinned: there
is no expectations file of the user's code.
"""
from __future__ import annotations

import json
import os
from dataclasses import asdict, dataclass

from conformance.contract.runner import Runner

ENV = "CONFORMANCE_ATTENTION"
KINDS = {"sdpa": "conformance.runners.target.sdpa:TargetSDPA",
         "onnx": "conformance.runners.target.onnx_file:TargetOnnx",
         "torch-mha": "conformance.runners.target.torch_mha:TargetTorchMHA",
         "hf": "conformance.runners.hf.target:TargetHF"}
ARRAYS = ("numpy", "torch", "jax", "mlx")
NAME_LIMIT = 60


class TargetError(ValueError):
    """A target that cannot be used: the message names it and the fix (never a traceback)."""


@dataclass(frozen=True)
class TargetSpec:
    """What the user pointed the suite at."""

    target: str  # "module:attribute", a .onnx path (onnx) or a transformers model_type (hf)
    kind: str  # a key of KINDS
    array: str = "numpy"  # the array library an sdpa target takes (ARRAYS)
    name: str = ""  # its column in the reports (default: target.<attribute>)
    cwd: str = ""  # the directory `module` is imported from

    def runner_name(self) -> str:
        if self.name:
            return self.name
        text = self.target.replace("\\", "/").rsplit("/", 1)[-1].removesuffix(".onnx")
        module, _, attribute = text.rpartition(":")
        parts = [module.rsplit(".", 1)[-1], attribute] if module else [attribute]
        name = ".".join(p for p in parts if p)
        return "target." + "".join(c if c.isalnum() or c in "._-" else "_" for c in name)

    def line(self) -> tuple[str, dict]:
        """The registry line of this target."""
        return KINDS[self.kind], {"spec": asdict(self), "name": self.runner_name()}


def check_spec(spec: TargetSpec) -> TargetSpec:
    """The spec, or a TargetError naming the option and the fix."""
    if spec.kind not in KINDS:
        raise TargetError(f"--kind {spec.kind!r}: unknown; choose one of {sorted(KINDS)}")
    if spec.array not in ARRAYS:
        raise TargetError(f"--array {spec.array!r}: unknown; choose one of {list(ARRAYS)}")
    if spec.array != "numpy" and spec.kind != "sdpa":
        raise TargetError(f"--array {spec.array}: only a --kind sdpa target takes arrays of "
                          "another library")
    name = spec.runner_name()
    if not name or len(name) > NAME_LIMIT or not all(c.isalnum() or c in "._-" for c in name):
        raise TargetError(f"--name {name!r}: use at most {NAME_LIMIT} letters, digits, '.', "
                          "'_' or '-'")
    if spec.kind in ("sdpa", "torch-mha") and ":" not in spec.target:
        raise TargetError(f"TARGET {spec.target!r}: a --kind {spec.kind} target is "
                          "module:attribute (e.g. examples.textbook:attention)")
    return spec


def encode(spec: TargetSpec) -> str:
    return json.dumps(asdict(spec), sort_keys=True)


def from_environment(environ=None) -> TargetSpec | None:
    """The target of this run (CONFORMANCE_ATTENTION), or None."""
    text = (os.environ if environ is None else environ).get(ENV, "")
    if not text:
        return None
    try:
        raw = json.loads(text)
        spec = TargetSpec(**{k: str(raw[k]) for k in ("target", "kind", "array", "name",
                                                      "cwd")})
    except (ValueError, KeyError, TypeError) as exc:
        raise TargetError(f"{ENV}: not a target description ({exc}); set it with "
                          "pytest --attention TARGET --attention-kind KIND") from None
    return check_spec(spec)


class TargetRunner(Runner):
    """What every kind's runner shares: the spec it was built from (its registry params),
    the user's object loaded once on first use (`load`), and `available` naming a target
    that cannot be loaded.  Its cells are reported, never pinned."""

    framework = "target"
    spec: dict = {}  # TargetSpec fields
    pinned = False  # no expectations file of the user's code

    def __init__(self, **params):
        super().__init__(**params)
        self.target_spec = TargetSpec(**self.spec)
        self.system = self.target_spec.target
        self._loaded = None

    def load(self):
        """The user's object (TargetError when it cannot be used)."""
        raise NotImplementedError

    def loaded(self):
        if self._loaded is None:
            self._loaded = self.load()
        return self._loaded

    def available(self) -> str | None:
        missing = super().available()
        if missing:
            return missing
        try:
            self.loaded()
        except TargetError as exc:
            return str(exc)
        return None
