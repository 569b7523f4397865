"""The default drift table: which libraries, which releases, which companions per era.

A companion era is the newest (minimum release, requirements) entry at or below the
release probed: JAX for Keras and Flax, onnx for onnxruntime, `numpy<2` where the era's
wheels were built against NumPy 1 (Keras 3.0 with JAX 0.4.25 fails with "Unknown NumPy
dtype" under NumPy 2; onnxruntime 1.17 fails to import).  torch is pinned to the local
CPU wheel (2.13.0) wherever it is needed: every other torch release is a CUDA build here.

Each library names the suite's runners (registry names) whose ledger cells the drift matrix
asks at every release: the ledger's probes on the suite's own runners (probes/run_probes.py),
one cell `<runner>.<axis>` per runner and axis of DRIFT_AXES.
"""
from __future__ import annotations

from dataclasses import dataclass, field

TORCH = "torch==2.13.0"
# what the probe path imports besides NumPy (the case loader's YAML reader), unpinned: this
# package's source is on the env's PYTHONPATH, never installed, so nothing else is pulled in
PROBE_DEPS = ("pyyaml",)
# the ledger axes the drift matrix asks of every runner of the table
DRIFT_AXES = ("fully_masked_row", "float_mask", "attn_mask_polarity", "causal_flag",
              "key_padding_polarity")


@dataclass(frozen=True)
class Library:
    id: str  # the table's name, e.g. keras.jax
    package: str  # the distribution whose releases are walked
    runners: tuple[str, ...]  # the registry's runner names asked (their ledger cells)
    versions: tuple[str, ...]  # the default releases, oldest first
    eras: tuple[tuple[str, tuple[str, ...]], ...]  # (minimum release, companion requirements)
    env: dict[str, str] = field(default_factory=dict)  # variables of the probe process
    note: str = ""  # what the report says about the scope
    imports: tuple[str, ...] = ()  # modules whose failed import marks the env broken
    packages: tuple[str, ...] = ()  # distributions whose versions the report lists
    axes: tuple[str, ...] = DRIFT_AXES  # the ledger axes asked of each runner
    probe_deps: tuple[str, ...] = PROBE_DEPS  # installed beside the release for the probes

    def spec(self) -> dict:
        """What probes/run_probes.py is told: runners, axes, imports, packages."""
        return {"runners": list(self.runners), "axes": list(self.axes),
                "imports": list(self.imports or (self.package,)),
                "packages": list(self.packages or (self.package, "numpy"))}

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
    Library("keras.jax", "keras", ("keras.jax", "keras.jax.scores"),
            ("3.0.5", "3.3.3", "3.5.0", "3.8.0", "3.10.0", "3.12.0", "3.15.1"),
            KERAS_JAX_ERAS, {"KERAS_BACKEND": "jax"},
            "keras.layers.MultiHeadAttention on the JAX backend: the runners keras.jax (the "
            "default call) and keras.jax.scores (return_attention_scores=True)",
            imports=("keras",), packages=("keras", "jax", "jaxlib", "numpy")),
    Library("keras.torch", "keras", ("keras.torch", "keras.torch.scores"),
            ("3.3.3", "3.8.0", "3.12.0", "3.15.1"),
            KERAS_TORCH_ERAS, {"KERAS_BACKEND": "torch"},
            "the same layer on the torch backend (keras.torch, keras.torch.scores), with the "
            "pinned torch 2.13.0; the TensorFlow backend is not in the default table (each era "
            "needs its own tensorflow-cpu, about 250 MB a release)",
            imports=("keras",), packages=("keras", "torch", "numpy")),
    Library("onnxruntime", "onnxruntime", ("onnx.contrib-mha.ort", "onnx.attention-op.ort"),
            ("1.17.3", "1.19.2", "1.21.1", "1.23.2", "1.26.0", "1.32.0"),
            (("1.16", ("onnx==1.16.2", "numpy<2")), ("1.20", ("onnx==1.17.0",)),
             ("1.23", ("onnx==1.19.1",)), ("1.27", ("onnx==1.23.2",))),
            note="contrib com.microsoft.MultiHeadAttention (onnx.contrib-mha.ort) and the ONNX "
                 "Attention operator (onnx.attention-op.ort), CPU provider",
            imports=("onnx", "onnxruntime"), packages=("onnxruntime", "onnx", "numpy")),
    Library("onnx.reference", "onnx", ("onnx.attention-op.reference",),
            ("1.16.2", "1.17.0", "1.18.0", "1.19.1", "1.21.0", "1.23.2"),
            (("1.16", ("numpy<2",)), ("1.17", ())),
            note="the ONNX Attention operator in onnx.reference.ReferenceEvaluator "
                 "(onnx.attention-op.reference)", packages=("onnx", "numpy")),
    Library("transformers", "transformers", ("hf.bert", "hf.bert.sdpa"),
            ("4.44.2", "4.50.3", "4.57.6", "5.10.4", "5.24.0"),
            (("4.0", (TORCH, "numpy<2")), ("4.50", (TORCH,))),
            note="BERT self-attention, eager (hf.bert) and sdpa (hf.bert.sdpa), with the "
                 "pinned torch 2.13.0", imports=("torch", "transformers"),
            packages=("transformers", "torch", "numpy")),
    Library("flax", "flax", ("flax.linen", "flax.nnx"),
            ("0.8.5", "0.10.2", "0.11.0", "0.12.0", "0.12.8"),
            (("0.8", ("jax[cpu]==0.4.30", "numpy<2")), ("0.10", ("jax[cpu]==0.4.38",)),
             ("0.11", ("jax[cpu]==0.6.2",)), ("0.12", ("jax[cpu]==0.8.1",)),
             ("0.12.5", ("jax[cpu]==0.10.2",))),
            note="flax.linen.MultiHeadDotProductAttention (flax.linen) and "
                 "flax.nnx.MultiHeadAttention (flax.nnx)", imports=("jax", "flax"),
            packages=("flax", "jax", "jaxlib", "numpy")),
    Library("jax", "jax", ("jax.dpa",), ("0.4.31", "0.4.38", "0.6.2", "0.7.2", "0.10.2"),
            (("0.4", ("numpy<2",)), ("0.4.36", ())),
            note="jax.nn.dot_product_attention (jax.dpa), its XLA implementation",
            packages=("jax", "jaxlib", "numpy")),
)


def requirement(library: Library, version: str) -> list[str]:
    """What uv installs for one release: the package pinned (jax with its CPU jaxlib)."""
    own = f"{library.package}[cpu]=={version}" if library.package == "jax" else \
        f"{library.package}=={version}"
    return [own, *library.companions(version), *library.probe_deps]
