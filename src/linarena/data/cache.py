"""Cache of preprocessed tensors, keyed by the configuration that produced them.

A cache file holds a dict of named tensors plus the configuration, a CRC32 per tensor and the
stamps (size, modification time) of the source files it was built from. It is written to a
temporary file in the same folder and renamed, so a crash never leaves a file that looks
finished. On load, a file that fails to unpickle, was written by another format version or
configuration, whose checksums disagree, or whose source files changed since (those still
present: a release deleted after the build leaves its cache usable) is reported with a warning
and rebuilt.
"""

from __future__ import annotations

import errno
import hashlib
import json
import os
import warnings
import zlib
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import torch

from linarena.data.errors import CacheWriteError
from linarena.files import build_lock, remove_stale_temps, write_atomic

# Bump when the meaning or layout of cached tensors changes: old caches are then rebuilt.
FORMAT_VERSION = 1


def config_hash(config: Mapping[str, Any]) -> str:
    """Short stable hash of a JSON-serialisable config plus the cache format version."""
    text = json.dumps({"format_version": FORMAT_VERSION, **config}, sort_keys=True, default=str)
    return hashlib.sha256(text.encode()).hexdigest()[:12]


def tensor_checksum(tensor: torch.Tensor) -> int:
    """CRC32 of a tensor's bytes (tensors are made contiguous first)."""
    if tensor.numel() == 0:
        return zlib.crc32(b"")
    array = tensor.detach().contiguous().view(-1).view(torch.uint8).numpy()
    return zlib.crc32(memoryview(array))


def source_stamps(sources: Mapping[str, Path]) -> dict[str, list[int] | None]:
    """What a cache records of the files a task reads, so that a file replaced after the cache
    was built is read again: per name, a file's [size, modification time in ns]; a folder's
    [files, total size, newest modification time] over everything below it, folders included
    (moving a file in or out changes its folder's time); None for an absent path. Stats only,
    no reading."""
    stamps: dict[str, list[int] | None] = {}
    for name, path in sources.items():
        if not path.exists():
            stamps[name] = None
        elif not path.is_dir():
            stat = path.stat()
            stamps[name] = [stat.st_size, stat.st_mtime_ns]
        else:
            stamps[name] = _folder_stamp(path)
    return stamps


def _folder_stamp(path: Path) -> list[int]:
    """[files, total size, newest modification time in ns] of everything below `path`."""
    count, size, newest = 0, 0, 0
    for folder, _, files in os.walk(path):
        newest = max(newest, os.stat(folder).st_mtime_ns)
        for file in files:
            stat = os.stat(os.path.join(folder, file))
            count, size, newest = count + 1, size + stat.st_size, max(newest, stat.st_mtime_ns)
    return [count, size, newest]


def _normalise(config: Mapping[str, Any]) -> dict[str, Any]:
    """Round-trip through JSON so tuples, paths etc. compare equal after loading."""
    return json.loads(json.dumps(dict(config), sort_keys=True, default=str))


def save_tensors(
    path: Path, config: Mapping[str, Any], tensors: Mapping[str, torch.Tensor],
    stamps: Mapping[str, list[int] | None] | None = None,
) -> None:
    """Write `tensors`, `config` and the `stamps` of the source files (source_stamps) to `path`
    atomically (temp file in the same folder, rename).

    A failed write leaves no file and raises CacheWriteError (an OSError naming `path`), also
    where torch's writer turns the OSError of a write (a full disk, a file-size limit) into a
    RuntimeError.
    """
    payload = {
        "format_version": FORMAT_VERSION,
        "config": _normalise(config),
        "tensors": {name: t.contiguous() for name, t in tensors.items()},
        "checksums": {name: tensor_checksum(t) for name, t in tensors.items()},
        "sources": dict(stamps or {}),
    }
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        write_atomic(path, lambda handle: torch.save(payload, handle), binary=True)
    except OSError as error:
        raise CacheWriteError(error, path) from error
    except RuntimeError as error:
        # torch's writer reports a failed write of the file as "unexpected pos", the OSError
        # (errno and all) being the context it was raised in.
        if not isinstance(error.__context__, OSError):
            raise
        raise CacheWriteError(error.__context__, path) from error


def load_tensors(
    path: Path, config: Mapping[str, Any], warn: bool = True,
    stamps: Mapping[str, list[int] | None] | None = None,
) -> dict[str, torch.Tensor] | None:
    """Load a cache written by `save_tensors` for this `config` and the source files' current
    `stamps` (source_stamps; an absent file's None is not compared).

    Returns None when the file is absent, or (with a warning, unless `warn` is false) when it is
    unreadable, stale or corrupt, so that the caller rebuilds it. Tensors are memory-mapped, not
    read into RAM.
    """
    tensors, problem = _read(path, config, stamps or {})
    if problem is not None and warn:
        warnings.warn(f"Data cache {path} {problem}; rebuilding it.", RuntimeWarning, stacklevel=2)
    return tensors


def _read(
    path: Path, config: Mapping[str, Any], stamps: Mapping[str, list[int] | None]
) -> tuple[dict[str, torch.Tensor] | None, str | None]:
    """(tensors, None) for a sound cache; (None, what is wrong) otherwise; (None, None) when
    the file is absent."""
    if not path.exists():
        return None, None
    try:
        payload = torch.load(path, map_location="cpu", mmap=True, weights_only=True)
        problem = _check_payload(payload, _normalise(config), stamps)
    except Exception as error:
        problem = f"cannot be read ({type(error).__name__}: {error})"
    return (None, problem) if problem is not None else (payload["tensors"], None)


def _check_payload(payload: Any, config: dict[str, Any],
                   stamps: Mapping[str, list[int] | None]) -> str | None:
    """Return what is wrong with a loaded cache payload, or None when it is sound."""
    if not isinstance(payload, dict) or not {"tensors", "checksums", "config"} <= payload.keys():
        return "is not a linarena data cache"
    if payload.get("format_version") != FORMAT_VERSION:
        return f"has format version {payload.get('format_version')}, expected {FORMAT_VERSION}"
    if payload["config"] != config:
        return "was built from a different configuration"
    built_from = payload.get("sources", {})
    changed = [name for name, stamp in stamps.items()
               if stamp is not None and built_from.get(name) != stamp]
    if changed:
        return f"was built before its source {changed[0]} changed (size or modification time)"
    tensors, checksums = payload["tensors"], payload["checksums"]
    if tensors.keys() != checksums.keys():
        return "lists tensors without checksums"
    for name, tensor in tensors.items():
        if tensor_checksum(tensor) != checksums[name]:
            return f"is corrupt (checksum mismatch in {name!r})"
    return None


def load_or_build(
    path: Path,
    config: Mapping[str, Any],
    build: Callable[[], Mapping[str, torch.Tensor]],
    sources: Mapping[str, Path] | None = None,
) -> dict[str, torch.Tensor]:
    """Return the cached tensors for `config` and the source files `sources` (name -> file or
    folder, see source_stamps), building and caching them first if needed.

    The build runs under a file lock: a second job that needs the same cache at the same time
    waits, then reads what the first one wrote. Temp files of killed builds are removed. A
    cache that has to be rebuilt is reported once, by the check made under the lock.
    """
    sources = sources or {}
    if path.is_dir():  # found now, not after a build that could not be saved
        error = IsADirectoryError(errno.EISDIR, os.strerror(errno.EISDIR), str(path))
        raise CacheWriteError(error, path)
    tensors = load_tensors(path, config, warn=False, stamps=source_stamps(sources))
    if tensors is not None:
        return tensors
    with build_lock(path):
        # Built by another job while this one waited?
        tensors = load_tensors(path, config, warn=True, stamps=source_stamps(sources))
        if tensors is None:
            remove_stale_temps(path.parent, path.name)
            built = build()
            # Stamped after the build: the files it read, one it downloaded included.
            stamps = source_stamps(sources)
            save_tensors(path, config, built, stamps)
            tensors, problem = _read(path, config, stamps)
            if tensors is None:
                raise RuntimeError(
                    f"Data cache {path} could not be read back right after writing it: {problem}"
                )
    return tensors
