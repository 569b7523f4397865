"""A content-addressed cache of bytes on disk, for artefacts that are slow to make.

A dynamo ONNX export of one small attention module costs 1-3 s; the matrix
makes dozens, all fully determined by the case content and library versions.
So they are cached: `key(...)` hashes whatever determines the artefact (the
caller passes case fingerprint, runner name, variant and versions), and the
bytes live in `<root>/<namespace>/<key>`.

The root is the user's cache folder (`$XDG_CACHE_HOME/attention-conformance`, else
`~/.cache/attention-conformance`), shared by every clone on the machine, or the
directory named by the environment variable CONFORMANCE_CACHE_DIR (benchmarks point it
at a fresh temporary directory to measure a cold run); paths.cache_root resolves it.
A hit refreshes the entry's time, and `prune` (run at the end of every session) removes
the least recently used entries until the folder fits its size limit.  Writes are atomic
(temporary file in the same directory, then `os.replace`), so two processes
(the pytest process and a worker) never read a half-written entry.  A cache
that cannot be written (read-only checkout) is not an error: the artefact is
made again next time.

Every entry is signed, and verified before use, in a way no file beside it can forge: the
cache folder is shared (by every clone, and by whoever else may write where
CONFORMANCE_CACHE_DIR points), so a plain digest beside an entry proves nothing (a
rewritten entry comes with its recomputed digest).  Beside `<key><suffix>` lies
`<key>.sha256`, its seal: an HMAC-SHA256, under a per-user secret key kept outside the cache
(paths.cache_key_path, made 0600 from os.urandom on first use, read once per process), of
the entry's place (namespace, key, suffix) and bytes, and a second HMAC of its place and size
that names the entry as the suite's own to the pruner (cache_prune.py), which reads no
entry's bytes.  An entry whose seal does not verify (truncated, damaged, rewritten, another
key's, made under another secret key) is evicted (both files removed), made again, and
reported once on stderr naming the file.  An entry is read once (no symlink followed, no
FIFO waited on, nothing over MAX_ENTRY read) and only its verified bytes are used.  A
namespace may add a `check` of verified bytes (the ONNX exports: no tensor whose data lies
outside the entry, `onnx_external_data`).  Without a usable key, or under a cache folder
that is a symbolic link, the cache is off for the run (said once): every artefact is made
again.  `covers` names source files whose code the artefact depends on (the ONNX exports
embed the weights of oracle/canonical.py's seeded generator): their content is hashed into
every key, so a change of that code never reuses an old entry.
"""
from __future__ import annotations

import functools
import hashlib
import hmac
import json
import os
import re
import stat
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from conformance import progress
from conformance.paths import CACHE_ENV, ROOT, cache_key_path, cache_root

__all__ = ["CACHE_ENV", "BytesCache", "cache_root", "key"]

KEY_BYTES = 32  # the secret key: os.urandom(32)
SEAL_HEADER = "attention-conformance hmac-sha256 v1"  # first line of every seal
SEAL_SUFFIX = ".sha256"
MAX_SEAL = 512  # bytes: a seal is three short lines
TAG = re.compile(r"[0-9a-f]{64}")  # an HMAC-SHA256 in hex, as a seal holds it
MAX_ENTRY = 2 ** 30  # bytes: no artefact is near it; a larger planted file is never read
UNSEALED = "written by an older suite, or not by this suite"  # an entry without a seal
_SECRETS: dict[str, bytes | None] = {}  # key file -> its key (None: unusable), once a process
_SAID: set[str] = set()  # warnings already printed this process


def key(*parts: object) -> str:
    """A stable hash of JSON-able parts (order matters)."""
    text = json.dumps(parts, sort_keys=True, default=str, separators=(",", ":"))
    return hashlib.sha256(text.encode()).hexdigest()[:32]


@functools.lru_cache(maxsize=None)
def code_hash(*files: str) -> str:
    """A hash of the given source files (paths relative to the repository root)."""
    digest = hashlib.sha256()
    for name in files:
        digest.update(name.encode() + b"\0" + (ROOT / name).read_bytes() + b"\0")
    return digest.hexdigest()[:16]


def say_once(text: str) -> None:
    """One stderr line per distinct message and process (a run says each doubt once)."""
    if text not in _SAID:
        _SAID.add(text)
        print(f"conformance cache: {text}", file=sys.stderr)


def read_regular(path: Path | str, limit: int | None = None, dir_fd: int | None = None) -> bytes:
    """A regular file's bytes, read once: a symlink (O_NOFOLLOW), FIFO or device is an
    OSError, never followed or waited on; so is a file over `limit` bytes."""
    fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK, dir_fd=dir_fd)
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise OSError(f"{path} is not a regular file")
        if limit is not None and st.st_size > limit:
            raise OSError(f"{path} holds over {limit} bytes")
        with os.fdopen(os.dup(fd), "rb") as fh:
            return fh.read() if limit is None else fh.read(limit + 1)[:limit]
    finally:
        os.close(fd)


def _read_key(path: Path) -> bytes:
    data = read_regular(path, limit=4 * KEY_BYTES)
    st = os.lstat(path)
    if st.st_uid != os.getuid() or st.st_mode & 0o077:
        raise OSError(f"{path} may be read or written by others (chmod 600 it, or delete it "
                      "and a new key is made)")
    if len(data) != KEY_BYTES:
        raise OSError(f"{path} does not hold a {KEY_BYTES}-byte key (delete it and a new "
                      "one is made)")
    return data


def _make_key(path: Path) -> None:
    """A new random key, in place whole or not at all (link: the first of two processes
    making it at once wins, and both use its key)."""
    path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=".cache.key.")  # mode 0600
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(os.urandom(KEY_BYTES))
        try:
            os.link(tmp, path)
        except FileExistsError:
            pass
    finally:
        os.unlink(tmp)


def secret() -> bytes | None:
    """This user's secret key (read once per process and key file), made on first use;
    None where it cannot be had safely (said once): the cache is then off."""
    path = cache_key_path()
    if str(path) not in _SECRETS:
        try:
            try:
                found = _read_key(path)
            except FileNotFoundError:
                _make_key(path)
                found = _read_key(path)
        except OSError as exc:
            found = None
            say_once(f"off for this run (every artefact is made again): its key: {exc}")
        _SECRETS[str(path)] = found
    return _SECRETS[str(path)]


def _mac(secret_key: bytes, kind: str, where: str, *data: bytes) -> str:
    mac = hmac.new(secret_key, f"{kind}\0{where}\0".encode(), hashlib.sha256)
    for chunk in data:
        mac.update(chunk)
    return mac.hexdigest()


def content_tag(secret_key: bytes, where: str, data: bytes) -> str:
    """The HMAC of an entry's place (`namespace/file name`) and bytes."""
    return _mac(secret_key, "content", where, data)


def owner_tag(secret_key: bytes, where: str, size: int) -> str:
    """The HMAC of an entry's place and size: the pruner's proof that the suite wrote it."""
    return _mac(secret_key, "owner", where, str(size).encode())


@dataclass(frozen=True)
class Seal:
    """What `<key>.sha256` holds: the entry's content tag and owner tag."""

    content: str
    owner: str

    def text(self) -> str:
        return f"{SEAL_HEADER}\n{self.content}\n{self.owner}\n"

    @staticmethod
    def parse(raw: bytes) -> Seal | None:
        lines = raw.decode("ascii", "replace").split("\n")
        if len(lines) != 4 or lines[0] != SEAL_HEADER or lines[3] or not all(
                TAG.fullmatch(tag) for tag in lines[1:3]):
            return None  # compare_digest takes ASCII only: a damaged seal is no seal
        return Seal(lines[1], lines[2])


def read_seal(path: Path | str, dir_fd: int | None = None) -> Seal | None:
    try:
        return Seal.parse(read_regular(path, MAX_SEAL, dir_fd))
    except OSError:
        return None


def root_problem(root: Path) -> str | None:
    """Why the cache folder cannot be used safely, or None: a folder that is a symbolic link
    (reads, writes and deletions would land where it points)."""
    if root.is_symlink():
        return (f"{root} is a symbolic link (to {os.readlink(root)}): the cache neither reads, "
                f"writes nor prunes through it; set {CACHE_ENV} to a real folder of the "
                "cache's own (the link's target, if it is one)")
    return None


def onnx_external_data(data: bytes) -> str | None:
    """Why an ONNX entry must not be loaded, or None: any tensor whose data lies outside the
    entry (data_location EXTERNAL, or external_data set).  Entries are loaded from bytes, so
    a relative location resolves against the working directory and an absolute one anywhere
    (OpenVINO's read_model(bytes, ...) reads it: onnx/external_data_helper.py names the
    fields); the suite's exports hold their weights inline, so none is accepted."""
    try:
        import onnx
    except ImportError:
        return "onnx is not installed to check it"
    try:
        model = onnx.load_from_string(data)
    except Exception as exc:  # protobuf's DecodeError and kin
        return f"it is no ONNX model ({type(exc).__name__})"
    names = list(_external_tensors(model, onnx.TensorProto))
    if names:
        return (f"tensor {names[0]!r} keeps its data outside the entry "
                f"({len(names)} such tensors): never resolved")
    return None


def _external_tensors(message, tensor_type):
    """Names of every TensorProto under `message` (initializers, attributes, sparse
    tensors, subgraphs, functions) whose data is external."""
    for descriptor, value in message.ListFields():
        if descriptor.message_type is None:
            continue  # a scalar, bytes or string field (raw_data: never walked)
        for item in [value] if hasattr(value, "ListFields") else value:
            if isinstance(item, tensor_type) and (
                    item.data_location == tensor_type.EXTERNAL or len(item.external_data)):
                yield item.name or "(unnamed)"
            yield from _external_tensors(item, tensor_type)


def _touch(path: Path) -> None:
    try:
        os.utime(path, follow_symlinks=False)
    except (OSError, NotImplementedError):
        pass


@dataclass(frozen=True)
class BytesCache:
    """key -> bytes in one namespace directory (e.g. "onnx"), each entry signed and verified."""

    namespace: str  # sub-directory of the cache root
    suffix: str = ""  # file extension, for people browsing the directory (".onnx")
    covers: tuple[str, ...] = ()  # source files hashed into every key (see module doc)
    counts: bool = True  # its writes are conversions for the progress line (not an index)
    check: Callable[[bytes], str | None] | None = None  # why verified bytes are refused

    @property
    def directory(self) -> Path:
        # Resolved at each use, so a benchmark may change the env var mid-process.
        return cache_root() / self.namespace

    def full_key(self, k: str) -> str:
        return key(k, code_hash(*self.covers)) if self.covers else k

    def path(self, k: str) -> Path:
        return self.directory / f"{self.full_key(k)}{self.suffix}"

    def _sidecar(self, k: str) -> Path:
        return self.directory / f"{self.full_key(k)}{SEAL_SUFFIX}"

    def where(self, k: str) -> str:
        """The entry's place, signed with its bytes: an entry moved elsewhere fails."""
        return f"{self.namespace}/{self.full_key(k)}{self.suffix}"

    def _secret(self) -> bytes | None:
        """The key, where the folders are safe to use (else None, said once)."""
        problem = root_problem(cache_root()) or root_problem(self.directory)
        if problem:
            say_once(problem)
            return None
        return secret()

    def get(self, k: str) -> bytes | None:
        """The entry's bytes when present and verified; a bad entry is evicted (None)."""
        secret_key = self._secret()
        if secret_key is None:
            return None
        path = self.path(k)
        try:
            data = read_regular(path, MAX_ENTRY)
        except FileNotFoundError:
            return None
        except OSError as exc:
            self.evict(k, f"it cannot be read as a file ({exc})")
            return None
        why = self._doubt(secret_key, k, data)
        if why == UNSEALED:  # every entry of an older suite: one line, not thousands
            self.evict(k, why, quiet=True)
            say_once(f"entries with no seal beside them ({UNSEALED}) are evicted and made "
                     f"again, e.g. {path}")
            return None
        if why:
            self.evict(k, why)
            return None
        _touch(path)  # least recently used goes first when the cache is pruned
        return data

    def _doubt(self, secret_key: bytes, k: str, data: bytes) -> str | None:
        seal = read_seal(self._sidecar(k))
        if seal is None:
            return UNSEALED
        if not hmac.compare_digest(seal.content, content_tag(secret_key, self.where(k), data)):
            return ("its seal does not match its content (truncated, damaged, rewritten, "
                    "another entry's, or signed with another key)")
        return self.check(data) if self.check else None

    def evict(self, k: str, why: str, quiet: bool = False) -> None:
        for p in (self.path(k), self._sidecar(k)):
            try:
                p.unlink()
            except OSError:
                pass
        if quiet:
            return
        print(f"conformance cache: evicted {self.path(k)}: {why}; it is made again",
              file=sys.stderr)  # once per bad entry: the entry it makes again verifies

    def _write(self, target: Path, data: bytes) -> None:
        fd, tmp = tempfile.mkstemp(dir=target.parent, prefix=f".{target.name}.", suffix=".tmp")
        try:
            with os.fdopen(fd, "wb") as fh:
                fh.write(data)
            os.replace(tmp, target)
        except BaseException:
            Path(tmp).unlink(missing_ok=True)
            raise

    def put(self, k: str, data: bytes) -> None:
        target = self.path(k)
        secret_key = self._secret()
        if secret_key is None or len(data) > MAX_ENTRY:
            return  # no key, or an unsafe folder: nothing unsigned is stored
        try:
            target.parent.mkdir(parents=True, exist_ok=True)
            where = self.where(k)
            seal = Seal(content_tag(secret_key, where, data),
                        owner_tag(secret_key, where, len(data)))
            self._write(target, data)  # the entry first: a seal never names missing bytes
            self._write(self._sidecar(k), seal.text().encode())
        except OSError:
            return  # an unwritable cache only costs time
        if self.counts:
            progress.record(k=self.namespace)  # a conversion made: the run's progress line

    def get_or_make(self, k: str, make: Callable[[], bytes]) -> tuple[bytes, bool]:
        """(data, True) from the cache, else (make(), False) after storing it."""
        data = self.get(k)
        if data is not None:
            return data, True
        data = make()
        self.put(k, data)
        return data, False
