"""What several frameworks' runners build alike: the module a framework runner runs and
the export and deployment runners convert (#16).

`onnx.torch-export` exports the very nn.MultiheadAttention `torch.mha` runs, `openvino.*`
compiles that export (or converts the module), `executorch.xnnpack` lowers it,
`onnx.keras-export` and `litert.keras*` convert the Keras layer `keras.tensorflow` runs.
So the builders live here, and both the framework's own folder and the runners of another
framework import them from here; no runners/<framework>/ folder imports another
(tests/test_layering.py), and nothing here imports a framework folder.

- torch_mha.py: nn.MultiheadAttention's translation, build, masks, tensors and its
  probe helpers;
- keras_mha.py: keras.layers.MultiHeadAttention's translation (sliding window included),
  worker, weight load and call errors;
- onnx_runtime.py: the ONNX export cache, onnxruntime sessions, the checker, combining
  two exported graphs and the scale readings of a float64 graph;
- onnx_accounting.py: what an ONNX graph's initializers hold, against the framework;
- torch_onnx.py: nn.MultiheadAttention exported by torch.onnx (cached);
- export_probe.py: the probe graphs of that export (exported the runner's way, cached),
  run in onnxruntime (no judgement);
- torch_export_answers.py: what the runners of that export and of its deployments answer
  the ledger's probes through them, and their API facts (no oracle);
- deployed.py: the probe artifacts of a converted module in a deployment runtime
  (OpenVINO, ExecuTorch: RuntimeProbe) and `both_calls`, one module making both exported
  calls;
- keras_export.py: the functional Keras model a user converts (ONNX, LiteRT) and its
  ONNX bytes;
- keras_export_probes.py: the probe graphs of that converted model (one input or argument
  of their own), run in onnxruntime or another runtime (LiteRT);
- keras_export_answers.py: what those runners answer the ledger's probes through them, and
  their API facts (no oracle).

Frameworks are imported inside functions only.
"""
