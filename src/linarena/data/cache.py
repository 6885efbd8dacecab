"""Cache of preprocessed tensors, keyed by the configuration that produced them.

A cache file holds a dict of named tensors plus the configuration and a CRC32 per tensor. It is
written to a temporary file in the same folder and renamed, so a crash never leaves a file that
looks finished. On load, a file that fails to unpickle, was written by another format version or
configuration, or whose checksums disagree is reported with a warning and rebuilt.
"""

from __future__ import annotations

import hashlib
import json
import warnings
import zlib
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import torch

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


def _normalise(config: Mapping[str, Any]) -> dict[str, Any]:
    """Round-trip through JSON so tuples, paths etc. compare equal after loading."""
    return json.loads(json.dumps(dict(config), sort_keys=True, default=str))


def save_tensors(
    path: Path, config: Mapping[str, Any], tensors: Mapping[str, torch.Tensor]
) -> None:
    """Write `tensors` and `config` to `path` atomically (temp file in the same folder, rename)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    payload = {
        "format_version": FORMAT_VERSION,
        "config": _normalise(config),
        "tensors": {name: t.contiguous() for name, t in tensors.items()},
        "checksums": {name: tensor_checksum(t) for name, t in tensors.items()},
    }
    write_atomic(path, lambda handle: torch.save(payload, handle), binary=True)


def load_tensors(
    path: Path, config: Mapping[str, Any], warn: bool = True
) -> dict[str, torch.Tensor] | None:
    """Load a cache written by `save_tensors` for this `config`.

    Returns None when the file is absent, or (with a warning, unless `warn` is false) when it is
    unreadable, stale or corrupt, so that the caller rebuilds it. Tensors are memory-mapped, not
    read into RAM.
    """
    tensors, problem = _read(path, config)
    if problem is not None and warn:
        warnings.warn(f"Data cache {path} {problem}; rebuilding it.", RuntimeWarning, stacklevel=2)
    return tensors


def _read(
    path: Path, config: Mapping[str, Any]
) -> tuple[dict[str, torch.Tensor] | None, str | None]:
    """(tensors, None) for a sound cache; (None, what is wrong) otherwise; (None, None) when
    the file is absent."""
    if not path.exists():
        return None, None
    try:
        payload = torch.load(path, map_location="cpu", mmap=True, weights_only=True)
        problem = _check_payload(payload, _normalise(config))
    except Exception as error:
        problem = f"cannot be read ({type(error).__name__}: {error})"
    return (None, problem) if problem is not None else (payload["tensors"], None)


def _check_payload(payload: Any, config: dict[str, Any]) -> str | None:
    """Return what is wrong with a loaded cache payload, or None when it is sound."""
    if not isinstance(payload, dict) or not {"tensors", "checksums", "config"} <= payload.keys():
        return "is not a linarena data cache"
    if payload.get("format_version") != FORMAT_VERSION:
        return f"has format version {payload.get('format_version')}, expected {FORMAT_VERSION}"
    if payload["config"] != config:
        return "was built from a different configuration"
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
) -> dict[str, torch.Tensor]:
    """Return the cached tensors for `config`, building and caching them first if needed.

    The build runs under a file lock: a second job that needs the same cache at the same time
    waits, then reads what the first one wrote. Temp files of killed builds are removed. A
    cache that has to be rebuilt is reported once, by the check made under the lock.
    """
    tensors = load_tensors(path, config, warn=False)
    if tensors is not None:
        return tensors
    with build_lock(path):
        # Built by another job while this one waited?
        tensors = load_tensors(path, config, warn=True)
        if tensors is None:
            remove_stale_temps(path.parent, path.name)
            save_tensors(path, config, build())
            tensors, problem = _read(path, config)
            if tensors is None:
                raise RuntimeError(
                    f"Data cache {path} could not be read back right after writing it: {problem}"
                )
    return tensors
