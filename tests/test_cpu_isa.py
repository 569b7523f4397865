"""A check that holds on any CPU: engines that dispatch on the instruction sets run at the
floor, what the CPU's own level moves is recorded as CPU-dependent and never compared."""
from __future__ import annotations

import json

from conformance import cpu_isa
from conformance.cpu_isa import ISA_ENV, cpu_features, floor_env
from conformance.report.drift import compare_file
from conformance.report.spec_vectors import payload, render_markdown
from conformance.runners.onnx import spec_cache


def test_features_come_from_the_cpus_flags(tmp_path):
    info = tmp_path / "cpuinfo"
    info.write_text("processor : 0\nflags : fpu sse avx2 avx512f avx512_bf16 amx_tile\n"
                    "flags : avx512_fp16\n")
    cpu_features.cache_clear()
    try:
        assert cpu_features(str(info)) == ("avx2", "avx512f", "avx512_bf16", "amx_tile")
        assert cpu_features(str(tmp_path / "absent")) == ()
    finally:
        cpu_features.cache_clear()


def test_the_floor_is_set_and_a_lower_cap_is_kept():
    assert floor_env({})[ISA_ENV] == "AVX2"
    assert floor_env({ISA_ENV: "AVX512_CORE_BF16"})[ISA_ENV] == "AVX2"
    assert floor_env({ISA_ENV: "sse41"})[ISA_ENV] == "sse41"
    assert floor_env({ISA_ENV: "nonsense"})[ISA_ENV] == "AVX2"


def test_openvino_runs_at_the_floor_and_natively(monkeypatch):
    started = []

    class Proc:
        def __init__(self, argv, env, **kw):
            started.append((argv[-1], env.get(ISA_ENV)))

    monkeypatch.delenv(ISA_ENV, raising=False)
    monkeypatch.setattr(spec_cache.subprocess, "Popen", Proc)
    spec_cache._start("openvino")
    spec_cache._start("openvino", native=True)
    spec_cache._start("onnxruntime")
    assert started == [("openvino", "AVX2"), ("openvino", None), ("onnxruntime", None)]
    assert spec_cache._key("openvino") != spec_cache._key("openvino", native=True)


def _row(case, outcome, kind="", err=0.001):
    return {"case": case, "runner": "openvino", "opset": 24, "outcome": outcome,
            "kind": kind, "reason": "", "max_abs_error": err}


def test_only_a_changed_outcome_is_marked_moved(monkeypatch):
    monkeypatch.setattr(cpu_isa, "cpu_features", lambda: ("avx512_bf16",))
    monkeypatch.setattr(spec_cache, "cpu_features", lambda: ("avx512_bf16",))
    floor = [_row("a", "fail", "values", 0.7), _row("b", "pass")]
    spec_cache.moved(floor, [_row("a", "pass", "", 0.0078), _row("b", "pass", err=0.002)])
    assert floor[0]["isa_moved"] == {"features": "avx512_bf16", "outcome": "pass", "kind": "",
                                     "max_abs_error": 0.0078}
    assert "isa_moved" not in floor[1]


def _spec(rows, features):
    return payload({"engines": ["openvino"], "versions": {}, "rows": rows,
                    "isa": {"floor": "AVX2", "features": features}})


def test_check_reports_ignores_what_the_cpu_moved_and_nothing_else():
    plain = _spec([_row("a", "fail", "values", 0.7)], ["avx2"])
    moved_row = dict(_row("a", "fail", "values", 0.7),
                     isa_moved={"features": "avx512_bf16", "outcome": "pass", "kind": "",
                                "max_abs_error": 0.0078})
    richer = _spec([moved_row], ["avx2", "avx512_bf16"])
    for name, render in (("spec_vectors.json", lambda d: json.dumps(d)),
                         ("spec_vectors.md", render_markdown)):
        assert compare_file(name, render(plain), render(richer)) == [], name
    assert "moved by this CPU" in render_markdown(richer)
    wrong = _spec([_row("a", "pass", "", 0.0078)], ["avx2"])  # planted: the native outcome
    assert compare_file("spec_vectors.json", json.dumps(plain), json.dumps(wrong)) != []
    assert compare_file("spec_vectors.md", render_markdown(plain), render_markdown(wrong)) != []
