"""JAX's persistent compilation cache, kept as signed entries of the suite's own cache.

JAX compiles every eager op per new shape (about 40 ms each, 30+ per case), so the Flax and
Keras-on-JAX rows keep compiled programs between runs.  A cached program is a serialized
XLA executable: machine code that runs when JAX loads it, and JAX trusts its cache folder
as found (jax/_src/compilation_cache.py, set_cache_dir: "Sharing a compilation cache is
equivalent to allowing anyone who can write to the cache directory to run code on your
machine"; jax/_src/lru_cache.py reads `<key>-cache` files unchecked).  The cache folder is
shared, so JAX's own file cache is never installed: its cache object (the module's
`_cache`, consulted through `_get_cache` by get_executable_and_time and
put_executable_and_time) is replaced by `SignedExecutables`, whose get returns only bytes
whose HMAC verifies (conformance/cache.py), so an executable planted or rewritten in the
folder is evicted and compiled again, never loaded.  Where a JAX release lacks that hook,
the persistent cache stays off: every program is compiled again, said once.  JAX's keys
hash the program, versions and flags, so the cache cannot change a result.
"""
from __future__ import annotations

from dataclasses import dataclass

from conformance.cache import BytesCache, key, say_once

HOOKS = ("_cache", "_cache_initialized", "_cache_initialized_mutex")  # compilation_cache's


@dataclass(frozen=True)
class SignedExecutables:
    """JAX's CacheInterface (get / put of a compiled executable by JAX's cache key) over a
    signed BytesCache; JAX's key is hashed to the entry's name."""

    store: BytesCache

    def get(self, jax_key: str) -> bytes | None:
        return self.store.get(key("jax-executable", jax_key))

    def put(self, jax_key: str, value: bytes) -> None:
        self.store.put(key("jax-executable", jax_key), value)


def signed_compilation_cache() -> str | None:
    """Install SignedExecutables as JAX's persistent compilation cache (again where it was
    reset); its folder, or None where this JAX offers no hook (the cache stays off)."""
    import jax

    try:
        from jax._src import compilation_cache as jax_cache
    except ImportError:
        jax_cache = None
    if jax_cache is None or not all(hasattr(jax_cache, h) for h in HOOKS):
        say_once(f"JAX {jax.__version__}'s compilation cache has no hook for verified "
                 "entries: it stays off (every program is compiled again)")
        return None
    signed = SignedExecutables(BytesCache(f"jax-signed-{jax.__version__}", ".xla", counts=False))
    folder = str(signed.store.directory)
    with jax_cache._cache_initialized_mutex:
        if jax_cache._cache != signed:
            jax_cache._cache = signed  # before the folder is named: JAX never opens its own
            jax_cache._cache_initialized = True
    if jax.config.jax_compilation_cache_dir != folder:  # JAX consults a cache only with one
        try:  # XLA's GPU caches write files of their own there (jax/_src/compiler.py)
            jax.config.update("jax_persistent_cache_enable_xla_caches", "none")
        except AttributeError:
            pass  # a JAX older than that option (the drift command's releases)
        jax.config.update("jax_compilation_cache_dir", folder)
        jax.config.update("jax_persistent_cache_min_compile_time_secs", 0.0)
        jax.config.update("jax_persistent_cache_min_entry_size_bytes", 0)
    return folder
