"""Where official files live under the data folder, and downloading the ones that can be fetched."""

from __future__ import annotations

import logging
import os
import urllib.request
from pathlib import Path

from tqdm.auto import tqdm

from linarena.data.errors import missing_data_error
from linarena.files import atomic_path

log = logging.getLogger(__name__)

LRA_RELEASE_URL = "https://storage.googleapis.com/long-range-arena/lra_release.gz"
IMDB_URL = "https://ai.stanford.edu/~amaas/data/sentiment/aclImdb_v1.tar.gz"
CIFAR10_URL = "https://www.cs.toronto.edu/~kriz/cifar-10-binary.tar.gz"
DOWNLOAD_TIMEOUT_S = 60.0
SOURCES = ("auto", "official", "generated")


def lra_release_path(data_dir: Path, relative: str) -> Path | None:
    """`<data_dir>/lra_release/<relative>` if it exists.

    The release archive unpacks to `lra_release/lra_release/...` in some copies, so that nesting is
    accepted too. Returns None when neither exists.
    """
    for candidate in (
        data_dir / "lra_release" / relative,
        data_dir / "lra_release" / "lra_release" / relative,
    ):
        if candidate.exists():
            return candidate
    return None


def lra_release_hint(data_dir: Path) -> str:
    """How to unpack the LRA release archive into the data folder (a line for error messages)."""
    return (
        f"The release is one ~8 GB archive: unpack it with "
        f"`tar xzf lra_release.gz -C {data_dir.resolve()}`."
    )


def check_source(source: str) -> None:
    """Raise for a `data.source` value other than auto, official or generated."""
    if source not in SOURCES:
        raise ValueError(f"data.source must be one of {', '.join(SOURCES)}; got {source!r}")


def download(url: str, destination: Path, timeout: float = DOWNLOAD_TIMEOUT_S) -> None:
    """Download `url` to `destination` via a temporary file in the same folder, then rename.

    Raises OSError (urllib's URLError is one) when the network or server fails.
    """
    destination.parent.mkdir(parents=True, exist_ok=True)
    log.info("Downloading %s to %s", url, destination)
    with (
        atomic_path(destination) as tmp,
        open(tmp, "wb") as out,
        urllib.request.urlopen(url, timeout=timeout) as response,
    ):
        total = int(response.headers.get("Content-Length") or 0) or None
        with tqdm(total=total, unit="B", unit_scale=True, desc=destination.name) as bar:
            while chunk := response.read(1 << 20):
                out.write(chunk)
                bar.update(len(chunk))


def reads_official(
    source: str, official_dir: Path | None, task: str, expected: list[str], data_dir: Path
) -> bool:
    """Whether a generable task reads the LRA release (else its generated copy).

    source "official" with no release files is an error listing the `expected` files.
    """
    if source == "official" and official_dir is None:
        raise missing_data_error(
            task,
            expected,
            data_dir,
            [LRA_RELEASE_URL],
            hint=lra_release_hint(data_dir),
            reason="data.source=official; use data.source=auto to generate the data instead",
        )
    return source != "generated" and official_dir is not None
