"""Keep the shared cache folder within a size limit: least recently used entries go first.

The cache outlives a clone (paths.cache_root: the user's cache folder), so without a limit
it grows with every version of every framework a machine has run.  An entry is the files
of one key (`<key><suffix>` and its seal `<key>.sha256`), removed together so that no seal
is left without its bytes; a hit refreshes its time (cache.BytesCache.get).  The limit is
2 GB unless `--cache-limit` or CONFORMANCE_CACHE_LIMIT says otherwise (`0` = no limit).

The pruner deletes only what the suite wrote: an entry whose seal's owner tag (an HMAC of
its place and size under the user's secret key, cache.owner_tag) verifies; it reads seals,
never an entry's bytes.  CONFORMANCE_CACHE_DIR may name a folder shared with other files,
so a folder holding anything else (a file it cannot verify, a symbolic link, a folder
below a namespace) is not pruned at all, said once; a cache folder that is itself a
symbolic link is refused.  No symlink is followed: folders are opened with O_NOFOLLOW and
files removed by name relative to them, so nothing outside the folder is touched.  Files
a write in progress keeps (`.<name>.<random>.tmp`) are neither counted, removed nor held
against the folder.  The drift command's folder (`drift/`: one virtualenv per release and
uv's own cache) is no set of keyed entries: deleting a file inside an env breaks that env,
so the pruner neither lists, counts nor touches it (`python -m conformance drift --prune`
removes it).
"""
from __future__ import annotations

import hmac
import os
import re
import stat
from dataclasses import dataclass, field
from pathlib import Path

from conformance.cache import SEAL_SUFFIX, owner_tag, read_seal, root_problem, say_once, secret
from conformance.paths import CACHE_ENV, cache_root

LIMIT_ENV = "CONFORMANCE_CACHE_LIMIT"
OWN_LIFECYCLE = ("drift",)  # top-level folders managed by their own command, never pruned
DEFAULT_LIMIT = "2GB"
FOLDER_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW  # a folder, never through a link
UNITS = {"": 1, "B": 1, "K": 1e3, "KB": 1e3, "M": 1e6, "MB": 1e6, "G": 1e9, "GB": 1e9,
         "KIB": 2 ** 10, "MIB": 2 ** 20, "GIB": 2 ** 30, "T": 1e12, "TB": 1e12}


def parse_size(text: str, source: str = LIMIT_ENV) -> int:
    """'2GB', '500 MB', '1.5GiB', '0' -> bytes; anything else is a usage error naming
    where it came from and the form it takes."""
    m = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*([A-Za-z]*)\s*", str(text))
    unit = m.group(2).upper() if m else None
    if m is None or unit not in UNITS:
        raise ValueError(f"{source}: {text!r} is not a size; write a number with an optional "
                         "unit, e.g. 2GB, 500MB, 1.5GiB (0 = no limit)")
    return int(float(m.group(1)) * UNITS[unit])


def limit_bytes(option: str | None = None) -> int:
    """The limit from the option, else the environment, else 2 GB."""
    if option is not None:
        return parse_size(option, "--cache-limit")
    return parse_size(os.environ.get(LIMIT_ENV) or DEFAULT_LIMIT)


@dataclass(frozen=True)
class Pruned:
    """What one prune did, or why it did nothing (`refused`)."""

    root: Path
    removed: int  # entries removed
    freed: int  # bytes
    kept: int  # bytes left
    refused: str = ""  # why the folder was left as it is

    def line(self) -> str:
        if self.refused:
            return f"conformance cache {self.root}: not pruned: {self.refused}"
        return (f"conformance cache {self.root}: removed {self.removed} least recently used "
                f"entries ({self.freed / 1e6:.1f} MB); {self.kept / 1e6:.1f} MB kept")


@dataclass(frozen=True)
class Entry:
    """One entry the suite wrote: its namespace folder, its files there, when last used and
    how many bytes they hold."""

    folder: str
    names: tuple[str, ...]
    used: float
    size: int


@dataclass
class Survey:
    """The folder's entries, and the files in it that the pruner does not know."""

    entries: list[Entry] = field(default_factory=list)
    foreign: list[str] = field(default_factory=list)  # paths relative to the root


def _is_temporary(name: str) -> bool:
    return name.startswith(".") and name.endswith(".tmp")  # cache.BytesCache._write's


def _group(names: list[str]) -> dict[str, list[str]]:
    """Files by the part of their name before the first dot (a key and its seal)."""
    groups: dict[str, list[str]] = {}
    for name in names:
        groups.setdefault(name.split(".")[0], []).append(name)
    return groups


def _owned(folder: str, fd: int, stem: str, names: list[str], secret_key: bytes,
           stats: dict[str, os.stat_result]) -> Entry | None:
    """The entry of one key's files when its seal's owner tag verifies for one of them."""
    seal_name = stem + SEAL_SUFFIX
    if seal_name not in names or not stat.S_ISREG(stats[seal_name].st_mode):
        return None
    seal = read_seal(seal_name, dir_fd=fd)
    if seal is None:
        return None
    for name in names:
        st = stats[name]
        if name != seal_name and stat.S_ISREG(st.st_mode) and hmac.compare_digest(
                seal.owner, owner_tag(secret_key, f"{folder}/{name}", st.st_size)):
            return Entry(folder, (name, seal_name), st.st_mtime,
                         st.st_size + stats[seal_name].st_size)
    return None


def _survey_folder(folder: str, fd: int, secret_key: bytes, survey: Survey) -> None:
    stats = {}
    for found in os.scandir(fd):
        try:
            stats[found.name] = found.stat(follow_symlinks=False)
        except FileNotFoundError:
            pass  # evicted by another process meanwhile
    names = [n for n in stats if not _is_temporary(n)]
    for stem, group in _group(names).items():
        entry = _owned(folder, fd, stem, group, secret_key, stats)
        if entry is not None:
            survey.entries.append(entry)
        survey.foreign += [f"{folder}/{n}" for n in group
                           if entry is None or n not in entry.names]


def _survey(root_fd: int, secret_key: bytes, folders: dict[str, int]) -> Survey:
    """Every entry and every unknown file, one namespace folder deep (never `drift/`);
    each folder opened is kept in `folders` (name -> fd) for the removal."""
    survey = Survey()
    for top in os.scandir(root_fd):
        if top.is_dir(follow_symlinks=False) and top.name in OWN_LIFECYCLE:
            continue  # never listed: a drift build holds ~500k files
        if not top.is_dir(follow_symlinks=False):
            survey.foreign.append(top.name)  # a file or a symlink at the top: not the suite's
            continue
        fd = os.open(top.name, FOLDER_FLAGS, dir_fd=root_fd)
        folders[top.name] = fd
        _survey_folder(top.name, fd, secret_key, survey)
    return survey


def _refusal(root: Path) -> str:
    problem = root_problem(root)
    if problem:
        return problem
    if secret() is None:
        return "the cache's key is unusable, so no entry can be told to be the suite's own"
    return ""


def _foreign_line(foreign: list[str]) -> str:
    return (f"it holds {len(foreign)} file(s) the suite did not write or cannot verify "
            f"(first: {foreign[0]!r}); remove them (entries of an older suite, unsealed, are "
            f"made again: its folders may go), or set {CACHE_ENV} to a folder of the cache's "
            "own")


def prune(limit: int, root: Path | None = None) -> Pruned:
    """Remove the oldest of the suite's entries until the folder holds at most `limit` bytes
    of them (0: no limit); nothing at all where the folder is not the cache's alone."""
    root = root or cache_root()
    if limit <= 0 or not (root.exists() or root.is_symlink()):
        return Pruned(root, 0, 0, 0)
    refused = _refusal(root)
    if refused:
        return _said(Pruned(root, 0, 0, 0, refused=refused))
    folders: dict[str, int] = {}
    try:
        root_fd = os.open(root, FOLDER_FLAGS)
        try:
            survey = _survey(root_fd, secret(), folders)
        finally:
            os.close(root_fd)
        total = sum(e.size for e in survey.entries)
        if survey.foreign:
            return _said(Pruned(root, 0, 0, total, refused=_foreign_line(survey.foreign)))
        return _remove(root, limit, survey.entries, folders)
    except OSError as exc:
        return _said(Pruned(root, 0, 0, 0, refused=f"it cannot be listed ({exc})"))
    finally:
        for fd in folders.values():
            os.close(fd)


def _remove(root: Path, limit: int, entries: list[Entry], folders: dict[str, int]) -> Pruned:
    """Unlink the least recently used entries by name inside their opened folder."""
    total = sum(e.size for e in entries)
    removed = freed = 0
    for entry in sorted(entries, key=lambda e: e.used):
        if total - freed <= limit:
            break
        for name in entry.names:
            try:
                os.unlink(name, dir_fd=folders[entry.folder])
            except OSError:
                pass
        removed, freed = removed + 1, freed + entry.size
    return Pruned(root, removed, freed, total - freed)


def _said(done: Pruned) -> Pruned:
    """A refusal, said once a process on stderr (it recurs at every session's end)."""
    say_once(done.line().removeprefix("conformance cache "))
    return done
