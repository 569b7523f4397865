"""Another CPU on this machine: the matrix under lowered instruction sets, then check-reports.

    .venv/bin/python benchmarks/portability.py [--out DIR] [--profile sse4.2|avx2]
                                               [--default DIR] [--lowered DIR] [--probe-only]

The committed reports were made on one CPU; CI and users run on others, where
BLAS, oneDNN, XLA and NumPy pick other kernels and every float32 figure moves in
its last digits.  This script makes such a CPU here: it asks each library to
stay below an instruction set (the switches of PROFILES), checks by measurement
which switches the installed libraries honour (each library's own report of the
ISA it uses, and a bit hash of a few of its kernels, next to the default
process), runs the full matrix twice (default environment, then the profile;
reports under --out, so reports/ is never touched), counts how many figures
moved, and runs `python -m conformance check-reports LOWERED --against DEFAULT`,
which must pass.  --default DIR reuses the reports of an earlier default run (the
committed reports/: another CPU against the one that made them); --lowered DIR the
reports of an earlier lowered run: with both, nothing runs (not even the switch probe)
and only the figures are counted and check-reports compares, e.g. after a masking fix.

Caches: ONNX exports are reused (an export does not depend on the ISA); JAX's
persistent compilation cache keys programs by XLA_FLAGS, so a program compiled
for another ISA is never reused.
"""
from __future__ import annotations

import argparse
import hashlib
import json
import os
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PROFILES = {
    "sse4.2": {  # an x86-64-v2 machine: no AVX at all where a library lets us say so
        "ATEN_CPU_CAPABILITY": "default",  # torch's vectorised ATen kernels
        "MKL_ENABLE_INSTRUCTIONS": "SSE4_2",  # MKL's dispatch (torch's float32 GEMM)
        "MKL_CBWR": "COMPATIBLE",  # MKL's conditional reproducibility: SSE2-compatible code
        "ONEDNN_MAX_CPU_ISA": "SSE41", "DNNL_MAX_CPU_ISA": "SSE41",  # TF's and torch's oneDNN
        "TF_ENABLE_ONEDNN_OPTS": "0",  # TF's oneDNN graph rewrites (off by default on CPUs
        # without AVX-512 VNNI, i.e. on the AVX2 machine that made the committed reports)
        "NPY_DISABLE_CPU_FEATURES": "@dispatch",  # every NumPy dispatch target above baseline
        "OPENBLAS_CORETYPE": "Nehalem",  # NumPy's OpenBLAS: an SSE4.2 core
        # JAX's CPU code generation.  Not SSE4_2: with it this jaxlib (0.10.2) fails every
        # float16 program of flax.linen / flax.nnx ("JaxRuntimeError: INTERNAL: Failed to
        # materialize symbols: ... wrapped_sqrt / convert_divide_fusion"), 4 error rows
        "XLA_FLAGS": "--xla_cpu_max_isa=AVX",
    },
    "avx2": {  # the kind of machine that made the committed reports
        "ATEN_CPU_CAPABILITY": "avx2",
        "MKL_ENABLE_INSTRUCTIONS": "AVX2",
        "ONEDNN_MAX_CPU_ISA": "AVX2", "DNNL_MAX_CPU_ISA": "AVX2",
        "TF_ENABLE_ONEDNN_OPTS": "0",
        "NPY_DISABLE_CPU_FEATURES": "@avx512",
        "OPENBLAS_CORETYPE": "Haswell",
        "XLA_FLAGS": "--xla_cpu_max_isa=AVX2",
    },
}
FIGURES = ("max_abs_error", "max_rel_error", "weights_max_abs_error", "weights_max_rel_error")


# --- the child: what each library says it uses, and bit hashes of its kernels -------------

def _h(array) -> str:
    import numpy as np

    return hashlib.sha256(np.ascontiguousarray(array).tobytes()).hexdigest()[:10]


def _probe_numpy(a) -> dict:
    import ctypes
    import glob

    import numpy as np
    from numpy._core._multiarray_umath import __cpu_dispatch__, __cpu_features__

    libs = glob.glob(os.path.join(os.path.dirname(np.__file__) + ".libs", "*openblas*"))
    core = ""
    if libs:
        lib = ctypes.CDLL(libs[0])
        for name in ("scipy_openblas_get_corename64_", "openblas_get_corename64_",
                     "openblas_get_corename"):
            if hasattr(lib, name):
                getattr(lib, name).restype = ctypes.c_char_p
                core = getattr(lib, name)().decode()
                break
    found = [f for f in __cpu_dispatch__ if __cpu_features__.get(f)]
    try:  # NumPy 2: the dispatch targets in use after NPY_DISABLE_CPU_FEATURES
        from numpy._core._multiarray_umath import __cpu_targets__  # type: ignore
        found = list(__cpu_targets__)
    except ImportError:
        pass
    return {"says": f"dispatch {' '.join(found) or 'baseline only'}; OpenBLAS core {core}",
            "bits": {"matmul": _h(a @ a), "exp": _h(np.exp(a)), "tanh": _h(np.tanh(a))}}


def _probe_torch(a) -> dict:
    import torch

    t = torch.from_numpy(a)
    return {"says": f"ATen capability {torch.backends.cpu.get_cpu_capability()}",
            "bits": {"bmm (MKL)": _h((t @ t).numpy()),
                     "softmax (ATen)": _h(torch.softmax(t, -1).numpy()),
                     "sdpa": _h(torch.nn.functional.scaled_dot_product_attention(t, t, t).numpy()),
                     "bf16 matmul": _h((t.bfloat16() @ t.bfloat16()).float().numpy())}}


def _probe_tf(a) -> dict:
    import tensorflow as tf

    x = tf.constant(a)
    return {"says": "(oneDNN ISA: see onednn_verbose below)",
            "bits": {"einsum": _h(tf.einsum("bij,bjk->bik", x, x).numpy()),
                     "softmax": _h(tf.nn.softmax(x).numpy())}}


def _probe_jax(a) -> dict:
    import jax
    import jax.numpy as jnp

    x = jnp.asarray(a)
    return {"says": f"XLA_FLAGS={os.environ.get('XLA_FLAGS', '')!r}",
            "bits": {"einsum": _h(jax.jit(lambda v: jnp.einsum("bij,bjk->bik", v, v))(x)),
                     "softmax": _h(jax.jit(lambda v: jax.nn.softmax(v, -1))(x)),
                     "tanh*exp": _h(jax.jit(lambda v: jnp.tanh(v) * jnp.exp(v))(x))}}


def _probe_ort(a) -> dict:
    import onnx
    import onnxruntime as ort
    from onnx import TensorProto, helper

    node = helper.make_node("MatMul", ["x", "x"], ["y"])
    soft = helper.make_node("Softmax", ["y"], ["z"], axis=-1)
    vi = [helper.make_tensor_value_info(n, TensorProto.FLOAT, list(a.shape)) for n in "xz"]
    graph = helper.make_graph([node, soft], "g", [vi[0]], [vi[1]])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    sess = ort.InferenceSession(onnx._serialize(model) if hasattr(onnx, "_serialize")
                                else model.SerializeToString(), providers=["CPUExecutionProvider"])
    return {"says": "no ISA switch (MLAS dispatches on CPUID)",
            "bits": {"matmul+softmax": _h(sess.run(None, {"x": a})[0])}}


def probe_child() -> None:
    """Print one JSON line: {library: {says, bits} or {error}}."""
    import numpy as np

    a = np.random.default_rng(0).standard_normal((2, 67, 67)).astype(np.float32)
    out = {}
    for name, fn in (("numpy", _probe_numpy), ("torch", _probe_torch), ("tensorflow", _probe_tf),
                     ("jax", _probe_jax), ("onnxruntime", _probe_ort)):
        try:
            out[name] = fn(a)
        except Exception as exc:  # a library not installed: said, not fatal
            out[name] = {"error": f"{type(exc).__name__}: {exc}"}
    print("PROBE " + json.dumps(out))


# --- the parent -----------------------------------------------------------------------------

def profile_env(name: str) -> dict[str, str]:
    """The profile's variables, NumPy's feature list resolved for this NumPy build."""
    env = dict(PROFILES[name])
    spec = env.get("NPY_DISABLE_CPU_FEATURES", "")
    if spec.startswith("@"):
        code = ("from numpy._core._multiarray_umath import __cpu_dispatch__ as d;"
                "print(' '.join(d))")
        listed = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                                env={k: v for k, v in os.environ.items()
                                     if k != "NPY_DISABLE_CPU_FEATURES"}).stdout.split()
        keep = [f for f in listed if spec == "@dispatch" or "512" in f or f == "X86_V4"]
        env["NPY_DISABLE_CPU_FEATURES"] = " ".join(keep)
    return env


def run_probe(extra: dict[str, str]) -> tuple[dict, list[str]]:
    """The child's JSON and the ISA lines the libraries print (oneDNN, MKL, XLA)."""
    env = {**os.environ, **extra, "ONEDNN_VERBOSE": "1", "MKL_VERBOSE": "1",
           "TF_CPP_MIN_LOG_LEVEL": "0", "JAX_PLATFORMS": "cpu"}
    proc = subprocess.run([sys.executable, __file__, "--probe-child"], env=env,
                          capture_output=True, text=True, timeout=600)
    lines = (proc.stdout + proc.stderr).splitlines()
    data = next((json.loads(x[6:]) for x in lines if x.startswith("PROBE ")), {})
    said = sorted({x.split(",isa:")[-1] and "oneDNN isa: " + x.split(",isa:")[-1]
                   for x in lines if ",isa:" in x}
                  | {"MKL " + w for x in lines if "MKL_VERBOSE" in x and "GEMM" in x
                     for w in x.split() if w.startswith("CNR:")}
                  | {x.strip()[-80:] for x in lines if "Unknown CPU ISA" in x})
    return data, said


def compare_probes(base: dict, low: dict) -> list[str]:
    lines = []
    for lib in base:
        a, b = base[lib], low.get(lib, {})
        if "error" in a or "error" in b:
            lines.append(f"  {lib}: {a.get('error') or b.get('error')}")
            continue
        moved = [k for k in a["bits"] if a["bits"][k] != b["bits"].get(k)]
        kept = [k for k in a["bits"] if k not in moved]
        lines.append(f"  {lib}: default says {a['says']!r}; lowered says {b['says']!r}; "
                     f"bits moved: {', '.join(moved) or 'none'}"
                     + (f"; unchanged: {', '.join(kept)}" if kept else ""))
    return lines


def run_matrix(extra: dict[str, str], reports: Path) -> tuple[float, str]:
    env = {**os.environ, **extra, "TF_CPP_MIN_LOG_LEVEL": "3"}
    cmd = [sys.executable, "-m", "pytest", "cases", "-q", "-p", "no:cacheprovider",
           f"--report-dir={reports}"]
    start = time.perf_counter()
    proc = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True)
    tail = [x for x in proc.stdout.splitlines() if x.strip()][-1:] or ["(no output)"]
    return time.perf_counter() - start, tail[0]


def moved_figures(default: Path, lowered: Path) -> dict[str, int]:
    """How many CPU-dependent figures differ between the two runs' raw files."""
    from conformance.report.results_files import read_results

    a = {(r["case"], r["runner"]): r for r in read_results(default / "results.json")["rows"]}
    b = {(r["case"], r["runner"]): r for r in read_results(lowered / "results.json")["rows"]}
    counts = {f: 0 for f in FIGURES} | {"output_digest rows": 0, "output_digest values": 0,
                                         "extras": 0, "notes": 0, "failures": 0,
                                         "ledger evidence": 0}
    for key in a.keys() & b.keys():
        ra, rb = a[key], b[key]
        for f in FIGURES:
            counts[f] += ra.get(f) != rb.get(f)
        da, db = ra.get("output_digest") or {}, rb.get("output_digest") or {}
        values = sum(x != y for x, y in zip(da.get("values", []), db.get("values", [])))
        counts["output_digest rows"] += values > 0
        counts["output_digest values"] += values
        counts["extras"] += ra.get("extras") != rb.get("extras")
        counts["notes"] += ra.get("notes") != rb.get("notes")
        counts["failures"] += ra.get("failures") != rb.get("failures")
    la, lb = default / "conventions.json", lowered / "conventions.json"
    if la.exists() and lb.exists():
        ca = {(c["system"], c["axis"]): c["evidence"] for c in json.loads(la.read_text())["cells"]}
        cb = {(c["system"], c["axis"]): c["evidence"] for c in json.loads(lb.read_text())["cells"]}
        counts["ledger evidence"] = sum(ca[k] != cb.get(k) for k in ca)
        sa, sb = ({(c["system"], c["axis"]): c.get("second_witness") for c in
                   json.loads(f.read_text())["cells"]} for f in (la, lb))
        counts["ledger second witness"] = sum(sa[k] != sb.get(k) for k in sa)
    counts["rows"] = len(a.keys() & b.keys())
    return counts


def check_reports(default: Path, lowered: Path) -> tuple[int, list[str]]:
    proc = subprocess.run([sys.executable, "-m", "conformance", "check-reports", str(lowered),
                           "--against", str(default)], cwd=ROOT, capture_output=True, text=True)
    return proc.returncode, (proc.stdout + proc.stderr).strip().splitlines()


def probe(env: dict[str, str], profile: str) -> None:
    """Print which switches the libraries honour (what they say, which bits moved)."""
    print(f"profile {profile}: " + " ".join(f"{k}={v!r}" for k, v in env.items()))
    (base, said_base), (low, said_low) = run_probe({}), run_probe(env)
    print("what the libraries say and which kernels' bits moved (default -> lowered):")
    print("\n".join(compare_probes(base, low)))
    print(f"  printed by the libraries: default {said_base}; lowered {said_low}")


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", default="/tmp/conformance-portability")
    parser.add_argument("--profile", choices=sorted(PROFILES), default="sse4.2")
    parser.add_argument("--default", help="reports of an earlier default run (skip that run)")
    parser.add_argument("--lowered", help="reports of an earlier lowered run (skip that run)")
    parser.add_argument("--probe-only", action="store_true", help="only the switch probe")
    parser.add_argument("--probe-child", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.probe_child:
        probe_child()
        return 0
    env = profile_env(args.profile)
    if not args.lowered:
        probe(env, args.profile)
        if args.probe_only:
            return 0
    out = Path(args.out)
    default = Path(args.default) if args.default else out / "default"
    if not args.default:
        seconds, tail = run_matrix({}, default)
        print(f"default run: {seconds:.0f} s, {tail}")
    lowered = Path(args.lowered) if args.lowered else out / args.profile
    if not args.lowered:
        seconds, tail = run_matrix(env, lowered)
        print(f"{args.profile} run: {seconds:.0f} s, {tail}")
    counts = moved_figures(default, lowered)
    print("moved between the runs (raw values): "
          + ", ".join(f"{k} {v}" for k, v in counts.items()))
    code, lines = check_reports(default, lowered)
    by_file: dict[str, int] = {}
    for line in lines:
        if line.startswith("changed: "):
            name = line[len("changed: "):].split(":", 1)[0]
            by_file[name] = by_file.get(name, 0) + 1
    print("\n".join(lines[-20:]))
    if by_file:
        print("changes by file: " + ", ".join(f"{k} {v}" for k, v in sorted(by_file.items())))
    print(f"check-reports {lowered} --against {default}: exit {code}")
    return code


if __name__ == "__main__":
    sys.exit(main())
