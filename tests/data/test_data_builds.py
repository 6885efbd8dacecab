"""Data builds that several jobs start at once, and downloads that must never keep a bad file."""

from __future__ import annotations

import http.server
import subprocess
import sys
import threading
from pathlib import Path

import pytest
from helpers.training import REPO, compose_config, train_env
from hydra.utils import instantiate

from linarena.data import sources


def prepare(tmp_path: Path, data_dir: Path) -> subprocess.Popen:
    """`python scripts/prepare_data.py` for the smoke ListOps data, started in the background."""
    return subprocess.Popen(
        [sys.executable, str(REPO / "scripts" / "prepare_data.py"), "debug=smoke",
         f"paths.data_dir={data_dir}"],
        cwd=tmp_path, env=train_env(tmp_path, data_dir),
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
    )


def test_two_jobs_building_the_same_data_at_once_build_it_once(tmp_path: Path) -> None:
    data_dir = tmp_path / "data"
    cache = instantiate(compose_config(["debug=smoke", f"paths.data_dir={data_dir}"]).data)
    # Left by a build killed earlier: removed by the next build of the same file.
    stale = cache.cache_path.with_name(f".{cache.cache_path.name}.4242.deadbeef.tmp")
    stale.parent.mkdir(parents=True)
    stale.write_bytes(b"half a cache")
    jobs = [prepare(tmp_path, data_dir) for _ in range(2)]
    outputs = [job.communicate(timeout=300)[0] for job in jobs]
    assert [job.returncode for job in jobs] == [0, 0], outputs
    building = sum(out.count("Building listops data") for out in outputs)
    assert building == 1, outputs  # the second job waited and read the first one's cache
    assert len(list((data_dir / "cache").glob("listops-*.pt"))) == 1
    assert not list(data_dir.rglob("*.tmp"))


@pytest.fixture
def server(tmp_path: Path):
    """A local HTTP server: /whole sends 1000 bytes, /cut announces 1000 and sends 500."""
    body = bytes(range(250)) * 4

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            self.send_response(200)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body if self.path == "/whole" else body[:500])

        def log_message(self, *args) -> None:
            pass

    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{httpd.server_port}", body
    httpd.shutdown()


def test_a_truncated_download_is_never_kept(server, tmp_path: Path) -> None:
    url, _ = server
    destination = tmp_path / "archive.tar.gz"
    with pytest.raises(OSError, match=r"broke off|stopped after 500 of 1000 bytes"):
        sources.download(f"{url}/cut", destination)
    assert not destination.exists() and not list(tmp_path.glob("*.tmp"))


def test_a_download_with_the_wrong_sha256_is_refused(server, tmp_path: Path) -> None:
    url, body = server
    destination = tmp_path / "archive.tar.gz"
    with pytest.raises(OSError, match="not the published"):
        sources.download(f"{url}/whole", destination, sha256="0" * 64)
    assert not destination.exists()
    sources.download(f"{url}/whole", destination)  # no known checksum: length checked only
    assert destination.read_bytes() == body


def test_the_lra_archives_with_published_checksums_are_checked() -> None:
    assert set(sources.KNOWN_SHA256) == {sources.IMDB_URL, sources.CIFAR10_URL}
