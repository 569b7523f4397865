"""One conversion per distinct graph: cases whose torch modules export to the same program
share its converted artifact.

A case's artifact is keyed by the case's content (`Case.fingerprint()`), and many cases
differ only in what the graph takes as inputs (mask values, extreme inputs, a causal
alignment that is a mask input): the same module and shapes, converted again, seconds
each (an ExecuTorch lowering 2.5-4.3 s).  On a miss under the case's key, the module is
exported with `torch.export` (0.1 s) and the artifact is looked up under a digest of the
program -- its graph's code and signature, every parameter, buffer and constant (dtype,
shape, bytes), each argument's shape and dtype, and what the caller adds (variant, input
names, versions) -- and converted only when no equal program was converted before.  The
case's key then names the digest (a small entry of its own), so a warm run reads the
artifact in two lookups and never exports.  An artifact is a function of the program it
is converted from, so sharing one changes no result (tests/test_same_graph.py).  The digest
holds every weight byte, so the artifacts under it leave out the cache's `covers` (the
source of the weights' generator): an edit there that leaves a program as it was costs
that case one `torch.export`, not a conversion; the case keys' names keep them.  torch is
the caller's; nothing here imports a framework.
"""
from __future__ import annotations

import hashlib
from dataclasses import dataclass, replace
from typing import Callable

from conformance.cache import BytesCache, key


def program_digest(torch, module, args, *parts: object) -> str | None:
    """The digest of what determines an artifact converted from `module(*args)`, with the
    caller's `parts`; None where torch.export fails (the converter then says why itself)."""
    try:
        program = torch.export.export(module, tuple(args))
    except Exception:  # the converter's own export reports it, as without this module
        return None
    h = hashlib.sha256()
    h.update(program.graph_module.code.encode())
    h.update(str(program.graph_signature).encode())
    tensors = {**program.state_dict, **program.constants}
    for name in sorted(tensors):
        t = tensors[name]
        if not isinstance(t, torch.Tensor):
            h.update(f"{name}={t!r}".encode())
            continue
        raw = t.detach().contiguous().reshape(-1).view(torch.uint8).numpy().tobytes()
        h.update(f"{name}:{t.dtype}:{tuple(t.shape)}:".encode() + raw)
    h.update(repr([(tuple(a.shape), str(a.dtype)) for a in args]).encode())
    return key("program", h.hexdigest(), *parts)


@dataclass(frozen=True)
class SameGraph:
    """An artifact cache whose entries are shared by equal programs: `cache` holds the
    artifacts, `names` (its own namespace, not counted as conversions) maps a case key to
    the digest key its artifact is stored under."""

    cache: BytesCache

    @property
    def artifacts(self) -> BytesCache:
        """Where the artifacts under a program digest live: `cache` without its covers."""
        return replace(self.cache, covers=())

    @property
    def names(self) -> BytesCache:
        return BytesCache(f"{self.cache.namespace}-same", ".key", self.cache.covers,
                          counts=False)

    def get_or_make(self, k: str, torch, module, args, make: Callable[[], bytes],
                    *parts: object) -> tuple[bytes, bool]:
        """(artifact, True) when it was in the cache under `k` or an equal program's
        digest, else (make(), False) after storing it under the digest."""
        data = self.cache.get(k)  # an entry of the case key itself (older caches)
        if data is not None:
            return data, True
        named = self.names.get(k)
        if named is not None:
            data = self.artifacts.get(named.decode("ascii", "replace"))
            if data is not None:
                return data, True
        digest = program_digest(torch, module, args, *parts)
        if digest is None:
            return self.cache.get_or_make(k, make)
        data, hit = self.artifacts.get_or_make(digest, make)
        self.names.put(k, digest.encode("ascii"))
        return data, hit
