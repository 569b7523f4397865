"""A deployed runtime's probe artifacts (an ExecuTorch program, an OpenVINO IR) are kept in
the runtime's own cache namespace and read back warm: the ONNX exports' namespace checks
that each entry is an ONNX model, so an artifact of another format stored there is evicted
at every read and converted again on every run (seconds per probe, every session)."""
from __future__ import annotations

import pytest

from conformance.cache import BytesCache
from tests.helpers import make_case, require

require("torch", "onnx")


class ToyRuntime:
    """An exporter whose artifacts are not ONNX, counting its conversions."""

    name = "toy.runtime"

    def __init__(self):
        self.made = 0

    def _export(self, torch, module, args, names) -> bytes:
        self.made += 1
        return f"a toy program, conversion {self.made}".encode()


def asked_twice(cache) -> tuple[int, bool]:
    """Conversions made when the same probe graph is asked for twice, and whether the
    second answer is the first's bytes."""
    from conformance.runners._export.deployed import RuntimeProbe
    from conformance.runners._export.torch_onnx import wrap_module

    toy = ToyRuntime()
    probe = RuntimeProbe(toy, execute=None, wrap=wrap_module, what="toy", cache=cache)
    case = make_case(inputs={"batch": 1, "query_len": 2, "self_attention": True})
    first = probe.graph("plain", case, {}, {})
    second = probe.graph("plain", case, {}, {})
    return toy.made, second == first


def test_a_runtime_probe_artifact_is_converted_once(tmp_path, monkeypatch):
    monkeypatch.setenv("CONFORMANCE_CACHE_DIR", str(tmp_path / "cache"))
    assert asked_twice(BytesCache("toy-runtime", ".bin")) == (1, True)


def test_planted_the_onnx_namespace_converts_it_at_every_ask(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("CONFORMANCE_CACHE_DIR", str(tmp_path / "cache"))
    assert asked_twice(None) == (2, False)  # the default: the ONNX exports' namespace
    assert "it is no ONNX model" in capsys.readouterr().err


@pytest.mark.parametrize("name, namespace", [("executorch.xnnpack", "executorch"),
                                             ("openvino.torch", "openvino"),
                                             ("openvino.onnx", "onnx")])
def test_each_deployed_runner_probes_into_its_artifacts_namespace(name, namespace):
    from conformance.runners import all_runners

    runner = next(r for r in all_runners() if r.name == name)
    if runner.available():
        pytest.skip(runner.available())
    assert runner.probe().cache.namespace == namespace
