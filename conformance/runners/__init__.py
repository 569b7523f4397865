"""The registry: one line per runner, `(target, params)`, in report column order.

A runner module holds one system (contract/runner.py says what a runner is); runners
that differ only by a backend or a flag are one class with parameters, so a
backend is a registry line, not a subclass.  Runner modules import the
contract, the case, oracle and convert layers and their framework folder's
helper (`<framework>/common.py`), never another runner module.  What the rest of
the suite needs to know of a runner (its README line, its seconds per item, its
typed-number system) is declared on its class (contract/runner.py).
"""
from __future__ import annotations

import importlib
from typing import Any

from conformance.contract.runner import Runner

_T, _K, _G = ("conformance.runners.torch.mha:TorchMHA", "conformance.runners.keras.mha:KerasMHA",
              "conformance.runners.keras.gqa:KerasGQA")
_R, _KC = ("conformance.runners.keras.rope:KerasRope",
           "conformance.runners.keras.cached:KerasCached")
_X, _A, _C = ("conformance.runners.onnx.torch_export:OnnxTorchExport",
              "conformance.runners.onnx.attention_op:OnnxAttentionOp",
              "conformance.runners.onnx.attention_cache:OnnxAttentionCache")

REGISTRY: tuple[tuple[str, dict[str, Any]], ...] = (
    (_T, {}),
    ("conformance.runners.torch.mha:TorchMHAFastPath", {}),
    (_T, {"need_weights": False}),
    ("conformance.runners.torch.sdpa:TorchSDPA", {}),
    ("conformance.runners.torch.sdpa:TorchSDPA", {"gqa": True}),
    ("conformance.runners.torch.sdpa_cache:TorchSDPACache", {}),
    (_K, {"backend": "tensorflow"}),
    (_K, {"backend": "jax"}),
    (_K, {"backend": "torch"}),
    (_K, {"backend": "tensorflow", "scores": True}),
    (_K, {"backend": "jax", "scores": True}),
    (_K, {"backend": "torch", "scores": True}),
    (_G, {"backend": "tensorflow"}),
    (_G, {"backend": "jax"}),
    (_G, {"backend": "torch"}),
    (_R, {"backend": "tensorflow"}),
    (_R, {"backend": "jax"}),
    (_R, {"backend": "torch"}),
    (_KC, {"backend": "tensorflow"}),
    (_KC, {"backend": "jax"}),
    (_KC, {"backend": "torch"}),
    (_X, {"dynamo": True}),
    (_X, {"dynamo": False}),
    (_X, {"dynamo": True, "opset": 23}),
    (_X, {"dynamo": True, "opset": 24}),
    (_A, {"engine": "ort"}),
    (_A, {"engine": "reference"}),
    (_C, {"engine": "ort", "cache": "past"}),
    (_C, {"engine": "reference", "cache": "past"}),
    (_C, {"engine": "ort", "cache": "static"}),
    (_C, {"engine": "reference", "cache": "static"}),
    ("conformance.runners.onnx.contrib_mha:OnnxContribMHA", {}),
    ("conformance.runners.onnx.contrib_gqa:OnnxContribGQA", {}),
    ("conformance.runners.onnx.keras_export:OnnxKerasExport", {}),
    ("conformance.runners.documented.matlab:MatlabSelfAttentionModel", {}),
    ("conformance.runners.hf.bert:HFBert", {"attn_implementation": "eager"}),
    ("conformance.runners.hf.bert:HFBert", {"attn_implementation": "sdpa"}),
    ("conformance.runners.hf.t5:HFT5", {}),
    ("conformance.runners.hf.gpt2:HFGpt2", {}),
    ("conformance.runners.hf.marian:HFMarian", {}),
    ("conformance.runners.hf.llama:HFLlama", {}),
    ("conformance.runners.hf.mistral:HFMistral", {}),
    ("conformance.runners.hf.gemma2:HFGemma2", {}),
    ("conformance.runners.hf.gpt_oss:HFGptOss", {}),
    ("conformance.runners.hf.gptj:HFGptj", {}),
    ("conformance.runners.hf.gpt_neox:HFGptNeox", {}),
    ("conformance.runners.hf.qwen3:HFQwen3", {}),
    ("conformance.runners.hf.olmo2:HFOlmo2", {}),
    ("conformance.runners.hf.bloom:HFBloom", {}),
    ("conformance.runners.hf.mpt:HFMpt", {}),
    # M-RoPE and 2-D RoPE
    ("conformance.runners.hf.qwen2_vl:HFQwen2VL", {}),
    ("conformance.runners.hf.qwen3_vl:HFQwen3VL", {}),
    ("conformance.runners.hf.pixtral:HFPixtral", {}),
    ("conformance.runners.hf.qwen2_vl_vision:HFQwen2VLVision", {}),
    ("conformance.runners.mlx.lm_vl:MlxLmQwen2VL", {}),
    ("conformance.runners.mlx.lm_vl:MlxLmQwen3VL", {}),
    ("conformance.runners.keras.hub_qwen3_5_mrope:KerasHubQwen35MRoPE", {}),
    ("conformance.runners.keras.hub_qwen3_5_vision:KerasHubQwen35Vision", {}),
    # per-layer schedules
    ("conformance.runners.hf.gemma3:HFGemma3", {}),
    ("conformance.runners.keras.hub_gemma3:KerasHubGemma3", {}),
    ("conformance.runners.mlx.lm_gemma3:MlxLmGemma3", {}),
    ("conformance.runners.hf.smollm3:HFSmolLM3", {}),
    ("conformance.runners.mlx.lm_smollm3:MlxLmSmolLM3", {}),
    # chunked attention and temperature
    ("conformance.runners.hf.llama4:HFLlama4", {}),
    ("conformance.runners.mlx.lm_llama4:MlxLmLlama4", {}),
    # multi-head latent attention
    ("conformance.runners.hf.deepseek_v3:HFDeepseekV3", {}),
    ("conformance.runners.hf.deepseek_v2:HFDeepseekV2", {}),
    ("conformance.runners.mlx.lm_deepseek_v3:MlxLmDeepseekV3", {}),
    # T5's relative bias
    ("conformance.runners.keras.hub_t5:KerasHubT5", {}),
    # gated head outputs
    ("conformance.runners.hf.qwen3_next:HFQwen3Next", {}),
    ("conformance.runners.hf.afmoe:HFAfmoe", {}),
    ("conformance.runners.mlx.qwen3_next:MlxLmQwen3Next", {}),
    ("conformance.runners.keras.hub_qwen3_5:KerasHubQwen35", {}),
    ("conformance.runners.flax.linen:FlaxLinen", {}),
    ("conformance.runners.flax.nnx:FlaxNnx", {}),
    ("conformance.runners.flax.nnx:FlaxNnx", {"decode": True}),
    ("conformance.runners.flax.dpa:JaxDPA", {}),
    ("conformance.runners.mlx.mha:MlxMHA", {}),
    ("conformance.runners.mlx.sdpa:MlxSDPA", {}),
    ("conformance.runners.mlx.sdpa_cache:MlxSDPACache", {}),
    ("conformance.runners.mlx.lm_rope:MlxLmRope", {}),
    ("conformance.runners.flax.linen:FlaxLinen", {"x64": True}),
    ("conformance.runners.flax.nnx:FlaxNnx", {"x64": True}),
    ("conformance.runners.documented.marian:MarianCppModel", {}),
    ("conformance.runners.openvino.mha:OpenVINOMHA", {"source": "onnx"}),
    ("conformance.runners.openvino.mha:OpenVINOMHA", {"source": "torch"}),
    ("conformance.runners.executorch.xnnpack:ExecuTorchXnnpack", {}),
    ("conformance.runners.litert.keras:LiteRTKeras", {}),
    ("conformance.runners.litert.keras:LiteRTKeras", {"precision": "f16"}),
)
EXTRA_ENV = "CONFORMANCE_EXTRA_RUNNERS"  # "module:Class,module:Class": out-of-tree runners


def load(target: str, params: dict[str, Any] | None = None) -> Runner:
    """The runner object of one registry line."""
    module, cls = target.split(":")
    runner = getattr(importlib.import_module(module), cls)(**(params or {}))
    runner.target = target
    return runner


def registry() -> tuple[tuple[str, dict[str, Any]], ...]:
    """REGISTRY plus out-of-tree runners named in CONFORMANCE_EXTRA_RUNNERS, so a
    runner can be tried without editing this package, plus the user's attention of this
    run (CONFORMANCE_ATTENTION: `probe`, `pytest --attention`; runners/target/)."""
    from conformance.runners.target import from_environment
    from conformance.settings import extra_runners

    target = from_environment()
    return REGISTRY + tuple((f"{module}:{cls}", {}) for module, cls in extra_runners()) \
        + ((target.line(),) if target else ())


def all_runners() -> list[Runner]:
    return [load(target, params) for target, params in registry()]


def runner_names() -> list[str]:
    return [r.name for r in all_runners()]


def runner_table() -> str:
    """The README's runner table, from the registry: one row per `description`, naming
    its runners in registry order (tests/test_toy_runner.py checks the README holds it)."""
    rows: dict[str, list[str]] = {}
    for r in all_runners():
        rows.setdefault(r.description, []).append(f"`{r.name}`")
    return "\n".join(["| runner | what runs |", "|---|---|"]
                     + [f"| {', '.join(names)} | {text} |" for text, names in rows.items()])
