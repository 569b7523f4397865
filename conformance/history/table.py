"""The default drift table: which libraries, which releases, which companions per era.

A companion era is the newest (minimum release, requirements) entry at or below the
release probed: JAX for Keras and Flax, onnx for onnxruntime, `numpy<2` where the era's
wheels were built against NumPy 1 (Keras 3.0 with JAX 0.4.25 fails with "Unknown NumPy
dtype" under NumPy 2; onnxruntime 1.17 fails to import).  torch is pinned to the local
CPU wheel (2.13.0) wherever it is needed: every other torch release is a CUDA build here.
"""
from __future__ import annotations

from dataclasses import dataclass, field

TORCH = "torch==2.13.0"


@dataclass(frozen=True)
class Library:
    id: str  # the table's name, e.g. keras.jax
    package: str  # the distribution whose releases are walked
    probe_group: str  # the argument of probes/run_probes.py
    versions: tuple[str, ...]  # the default releases, oldest first
    eras: tuple[tuple[str, tuple[str, ...]], ...]  # (minimum release, companion requirements)
    env: dict[str, str] = field(default_factory=dict)  # variables of the probe process
    note: str = ""  # what the report says about the scope

    def companions(self, version: str) -> tuple[str, ...]:
        """The companion requirements of the newest era that starts at or below `version`."""
        from packaging.version import Version
        chosen: tuple[str, ...] = ()
        for start, reqs in self.eras:
            if Version(start) <= Version(version):
                chosen = reqs
        return chosen


KERAS_JAX_ERAS = (
    ("3.0", ("jax[cpu]==0.4.25", "numpy<2", "packaging")),
    ("3.3", ("jax[cpu]==0.4.28", "numpy<2", "packaging")),
    ("3.6", ("jax[cpu]==0.4.35",)),
    ("3.9", ("jax[cpu]==0.6.2",)),
    ("3.12", ("jax[cpu]==0.7.2",)),
    ("3.14", ("jax[cpu]==0.10.2",)),
)
KERAS_TORCH_ERAS = (("3.0", (TORCH, "numpy<2", "packaging")), ("3.6", (TORCH,)))

DEFAULT_TABLE: tuple[Library, ...] = (
    Library("keras.jax", "keras", "keras",
            ("3.0.5", "3.3.3", "3.5.0", "3.8.0", "3.10.0", "3.12.0", "3.15.1"),
            KERAS_JAX_ERAS, {"KERAS_BACKEND": "jax"},
            "keras.layers.MultiHeadAttention on the JAX backend (eager call)"),
    Library("keras.torch", "keras", "keras", ("3.3.3", "3.8.0", "3.12.0", "3.15.1"),
            KERAS_TORCH_ERAS, {"KERAS_BACKEND": "torch"},
            "the same layer on the torch backend, with the pinned torch 2.13.0; the "
            "TensorFlow backend is not in the default table (each era needs its own "
            "tensorflow-cpu, about 250 MB a release)"),
    Library("onnxruntime", "onnxruntime", "onnxruntime",
            ("1.17.3", "1.19.2", "1.21.1", "1.23.2", "1.26.0", "1.32.0"),
            (("1.16", ("onnx==1.16.2", "numpy<2")), ("1.20", ("onnx==1.17.0",)),
             ("1.23", ("onnx==1.19.1",)), ("1.27", ("onnx==1.23.2",))),
            note="contrib com.microsoft.MultiHeadAttention and the ONNX Attention operator "
                 "(opset 23), CPU provider"),
    Library("onnx.reference", "onnx", "onnx",
            ("1.16.2", "1.17.0", "1.18.0", "1.19.1", "1.21.0", "1.23.2"),
            (("1.16", ("numpy<2",)), ("1.17", ())),
            note="the ONNX Attention operator (opset 23) in onnx.reference.ReferenceEvaluator"),
    Library("transformers", "transformers", "transformers",
            ("4.44.2", "4.50.3", "4.57.6", "5.10.4", "5.24.0"),
            (("4.0", (TORCH, "numpy<2")), ("4.50", (TORCH,))),
            note="BertModel (eager and sdpa attention) with the pinned torch 2.13.0"),
    Library("flax", "flax", "flax", ("0.8.5", "0.10.2", "0.11.0", "0.12.0", "0.12.8"),
            (("0.8", ("jax[cpu]==0.4.30", "numpy<2")), ("0.10", ("jax[cpu]==0.4.38",)),
             ("0.11", ("jax[cpu]==0.6.2",)), ("0.12", ("jax[cpu]==0.8.1",)),
             ("0.12.5", ("jax[cpu]==0.10.2",))),
            note="flax.linen.MultiHeadDotProductAttention and flax.nnx.MultiHeadAttention"),
    Library("jax", "jax", "jax", ("0.4.31", "0.4.38", "0.6.2", "0.7.2", "0.10.2"),
            (("0.4", ("numpy<2",)), ("0.4.36", ())),
            note="jax.nn.dot_product_attention (projected tensors), its XLA implementation"),
)


def requirement(library: Library, version: str) -> list[str]:
    """What uv installs for one release: the package pinned (jax with its CPU jaxlib)."""
    own = f"{library.package}[cpu]=={version}" if library.package == "jax" else \
        f"{library.package}=={version}"
    return [own, *library.companions(version)]
