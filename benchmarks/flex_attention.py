"""Whether `torch.nn.attention.flex_attention` can be a CPU runner: compile and eager times.

    .venv/bin/python benchmarks/flex_attention.py [--cold]

The calls a `torch.flex` runner would make for the #20 cases (B 2, H 2, 8 positions, head
size 4): a causal `mask_mod` through `create_block_mask`, then a sliding-window
`mask_mod` and a softcap `score_mod` (Gemma 2's `30 * tanh(score / 30)`), each eager (the
unfused path torch warns about) and under `torch.compile(flex_attention)` (Inductor's CPU
kernel).  A new mask_mod or score_mod is a new graph: compiled, every case with its own
mods pays a compile.  `--cold` points TORCHINDUCTOR_CACHE_DIR at a fresh temporary
directory, so Inductor's on-disk caches (FX graph, kernels) start empty; without it a
second run finds them warm.  Each figure is printed with the largest difference from
`F.scaled_dot_product_attention` on the same masks.  Prints figures, asserts nothing.
"""
from __future__ import annotations

import argparse
import os
import tempfile
import time


def _mods(torch):
    def causal(b, h, q, kv):
        return q >= kv

    def window(b, h, q, kv):  # query i sees keys i - 2 .. i
        return (q >= kv) & (q - kv <= 2)

    def softcap(score, b, h, q, kv):
        return 30.0 * torch.tanh(score / 30.0)

    return causal, window, softcap


def _reference(torch, q, k, v, t, left=None, cap=None):
    i = torch.arange(t)
    allowed = i[:, None] >= i[None, :]
    if left is not None:
        allowed &= i[:, None] - i[None, :] <= left
    s = q @ k.transpose(-1, -2) / q.shape[-1] ** 0.5
    s = s if cap is None else cap * torch.tanh(s / cap)
    return torch.softmax(s.masked_fill(~allowed, float("-inf")), -1) @ v


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--cold", action="store_true", help="empty Inductor caches")
    args = parser.parse_args()
    if args.cold:
        os.environ["TORCHINDUCTOR_CACHE_DIR"] = tempfile.mkdtemp(prefix="flex-inductor-")
    start = time.perf_counter()
    import torch
    from torch.nn.attention.flex_attention import create_block_mask, flex_attention

    torch.set_num_threads(1)
    print(f"torch {torch.__version__}: import {time.perf_counter() - start:.1f} s")
    b, h, t, d = 2, 2, 8, 4
    gen = torch.Generator().manual_seed(0)
    q, k, v = (torch.randn(b, h, t, d, generator=gen) for _ in range(3))
    causal, window, softcap = _mods(torch)
    calls = [("causal mask_mod", causal, None, {}), ("window mask_mod", window, None,
                                                    {"left": 2}),
             ("causal + softcap score_mod", causal, softcap, {"cap": 30.0})]
    compiled = torch.compile(flex_attention)
    for mode, fn in (("eager", flex_attention), ("compiled", compiled)):
        for name, mask_mod, score_mod, ref in calls:
            tic = time.perf_counter()
            block = create_block_mask(mask_mod, b, h, t, t, device="cpu")
            out = fn(q, k, v, block_mask=block, score_mod=score_mod)
            first = time.perf_counter() - tic
            tic = time.perf_counter()
            fn(q, k, v, block_mask=block, score_mod=score_mod)
            again = time.perf_counter() - tic
            err = float((out - _reference(torch, q, k, v, t, **ref)).abs().max())
            print(f"{mode:8s} {name:28s} first call {first:7.2f} s, again {again:7.3f} s, "
                  f"max |flex - reference| {err:.1e}")


if __name__ == "__main__":
    main()
