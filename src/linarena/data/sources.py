"""Where official files live under the data folder, and downloading the ones that can be fetched."""

from __future__ import annotations

import hashlib
import http.client
import logging
import urllib.request
from pathlib import Path

from linarena.data.errors import DataConfigError, missing_data_error
from linarena.data.progress import progress
from linarena.files import atomic_path, build_lock, remove_stale_temps

log = logging.getLogger(__name__)

LRA_RELEASE_URL = "https://storage.googleapis.com/long-range-arena/lra_release.gz"
IMDB_URL = "https://ai.stanford.edu/~amaas/data/sentiment/aclImdb_v1.tar.gz"
CIFAR10_URL = "https://www.cs.toronto.edu/~kriz/cifar-10-binary.tar.gz"
# Published SHA-256 of the archives (the same values in TensorFlow Datasets' url_checksums and
# other dataset libraries): a corrupt or changed download is refused.
KNOWN_SHA256 = {
    IMDB_URL: "c40f74a18d3b61f90feba1e17730e0d38e8b97c05fde7008942e91923d1658fe",
    CIFAR10_URL: "c4a38c50a1bc5f3a1c5537f2155ab9d68f9f25eb1ed8d9ddda3db29a59bca1dd",
}
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
        raise DataConfigError(f"data.source must be one of {', '.join(SOURCES)}; got {source!r}")


def download(
    url: str,
    destination: Path,
    timeout: float = DOWNLOAD_TIMEOUT_S,
    sha256: str | None = None,
) -> None:
    """Download `url` to `destination` via a temporary file in the same folder, then rename.

    The body must have the announced Content-Length and, when known (`sha256`, by default from
    KNOWN_SHA256), that SHA-256; otherwise nothing is kept. Runs under a file lock, so a second
    job waits and then uses the first one's file. Raises OSError (urllib's URLError is one) when
    the network or server fails or the body is truncated or corrupt.
    """
    expected = sha256 or KNOWN_SHA256.get(url)
    with build_lock(destination):
        if destination.is_file():
            return  # downloaded by another job while this one waited
        remove_stale_temps(destination.parent, destination.name)
        log.info("Downloading %s to %s", url, destination)
        digest = hashlib.sha256()
        with (
            atomic_path(destination) as tmp,
            open(tmp, "wb") as out,
            urllib.request.urlopen(url, timeout=timeout) as response,
        ):
            total = int(response.headers.get("Content-Length") or 0) or None
            written = 0
            with progress(total=total, unit="B", desc=destination.name) as bar:
                try:
                    while chunk := response.read(1 << 20):
                        out.write(chunk)
                        digest.update(chunk)
                        written += len(chunk)
                        bar.update(len(chunk))
                except http.client.HTTPException as error:  # e.g. IncompleteRead
                    raise OSError(f"the download of {url} broke off: {error!r}") from error
            if total is not None and written != total:
                raise OSError(
                    f"the download of {url} stopped after {written} of {total} bytes; run again"
                )
            if expected is not None and digest.hexdigest() != expected:
                raise OSError(
                    f"{url} has SHA-256 {digest.hexdigest()}, not the published {expected}: the "
                    "download is corrupt (or the file changed at the source); run again, or "
                    "get the file by hand and check it"
                )


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
