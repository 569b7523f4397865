"""The instruction-set features of this CPU that move kernels' results, and the floor the
suite holds a CPU-dispatching engine at so that a committed outcome holds on any CPU.

OpenVINO's CPU plugin picks its kernels by the ISA it finds (its oneDNN fork honours
ONEDNN_MAX_CPU_ISA, measured: a bfloat16 ONNX spec vector passes at AVX-512 and is 0.70 off
at AVX2), so a report written on one CPU and checked on another would differ.  The suite
runs such an engine at ISA_FLOOR, a level every x86-64 machine it runs on has, and also at
the CPU's own level; what the native level moves is recorded beside the floor's outcome as
CPU-dependent (never compared by check-reports), naming the features of the CPU that
showed it.  A lower ONEDNN_MAX_CPU_ISA already in the environment (a simulated machine,
benchmarks/portability.py) is kept.
"""
from __future__ import annotations

import functools
import os
from pathlib import Path

ISA_ENV = "ONEDNN_MAX_CPU_ISA"
ISA_FLOOR = "AVX2"
# /proc/cpuinfo flags that select other kernels in oneDNN, OpenVINO, XLA or MLAS
MOVING_FEATURES = ("avx2", "avx512f", "avx512_vnni", "avx_vnni", "avx512_bf16",
                   "avx512_fp16", "amx_tile", "amx_bf16", "amx_int8", "amx_fp16")
# oneDNN's ISA names, lowest first (unset or another name: the floor is set)
ISA_ORDER = ("SSE41", "AVX", "AVX2", "AVX2_VNNI", "AVX2_VNNI_2", "AVX512_CORE",
             "AVX512_CORE_VNNI", "AVX512_CORE_BF16", "AVX10_1_512", "AVX512_CORE_FP16",
             "AVX10_1_512_AMX", "AVX512_CORE_AMX", "AVX10_1_512_AMX_FP16",
             "AVX512_CORE_AMX_FP16", "DEFAULT", "ALL")


@functools.lru_cache(maxsize=1)
def cpu_features(cpuinfo: str = "/proc/cpuinfo") -> tuple[str, ...]:
    """MOVING_FEATURES this CPU has, in that order (empty where /proc/cpuinfo is absent)."""
    try:
        text = Path(cpuinfo).read_text(errors="replace")
    except OSError:
        return ()
    flags: set[str] = set()
    for line in text.splitlines():
        if line.startswith("flags"):
            flags.update(line.partition(":")[2].split())
            break
    return tuple(f for f in MOVING_FEATURES if f in flags)


def floor_env(env: dict[str, str] | None = None) -> dict[str, str]:
    """`env` (default os.environ) with the ISA held at ISA_FLOOR, or lower where it already
    is."""
    env = dict(os.environ if env is None else env)
    current = env.get(ISA_ENV, "").upper()
    if current not in ISA_ORDER or ISA_ORDER.index(current) > ISA_ORDER.index(ISA_FLOOR):
        env[ISA_ENV] = ISA_FLOOR
    return env
