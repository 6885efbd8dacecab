"""The documentation site builds in strict mode (a broken link or anchor, a page missing from
the nav, an undocumented public object of a rendered module fails it), and every page of the
built site loads in headless Chromium (Debian's package, driven by Playwright) without a console
error, a page error or a failed request, with its figures loaded and its generated parts there.

Needs `pip install -e ".[docs]"` and Chromium (`apt-get install chromium`); without them these
tests are skipped, except in CI (CI=true), where .ci/run installs both and a skip would hide a
broken site."""

from __future__ import annotations

import functools
import http.server
import os
import shutil
import subprocess
import sys
import threading
from html.parser import HTMLParser
from pathlib import Path

import pytest
from helpers.paths import REPO_ROOT

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
# The probe's flags: no sandbox as root, and no background calls to hosts this machine cannot
# reach (they would show as failed requests).
CHROMIUM_ARGS = ["--no-sandbox", "--disable-gpu", "--disable-background-networking",
                 "--disable-component-update", "--disable-sync", "--no-first-run"]
# page -> what must be on it once built: a figure file, or text the generated parts write
MUST_HAVE = {
    "index.html": ["results/scatter_listops_small.png"],
    "results.html": ["results/mqar_state_size.png", "results/benchmark_model.png",
                     "results/scatter_listops_small.png", "results/scatter_mqar.png",
                     "One run:", "fwd+bwd ms"],
    "configuration.html": ["attention=gla", "conf/trainer/default.yaml", "hydra/launcher=slurm"],
    "attention.html": ["LinearAttention", "RecurrentAttention", "AttentionLayer",
                       "gated_linear_attention"],
    "getting-started.html": ["Compare attentions properly", "seed_sweep.py"],
    "data.html": ["pathfinder/pathfinder32.png"],
}


def _needs(what: str) -> None:
    if os.environ.get("CI"):
        pytest.fail(f"{what} (CI installs it: .ci/run)")
    pytest.skip(what)


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The site, built from this checkout with `mkdocs build --strict`."""
    try:
        import mkdocs  # noqa: F401
        import mkdocstrings  # noqa: F401
    except ImportError:
        _needs('MkDocs is not installed: pip install -e ".[docs]"')
    out = tmp_path_factory.mktemp("site")
    result = subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir",
                             str(out), "--config-file", str(REPO_ROOT / "mkdocs.yml")],
                            cwd=REPO_ROOT, capture_output=True, text=True,
                            env={**os.environ, "NO_MKDOCS_2_WARNING": "1"})
    assert result.returncode == 0, result.stderr[-4000:]
    return out


class _Parts(HTMLParser):
    """The images and local links of one HTML page."""

    def __init__(self) -> None:
        super().__init__()
        self.images: list[str] = []
        self.links: list[str] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        values = dict(attrs)
        if tag == "img" and values.get("src"):
            self.images.append(values["src"])
        if tag == "a" and values.get("href"):
            self.links.append(values["href"])


def _pages(site: Path) -> list[Path]:
    return sorted(p for p in site.rglob("*.html") if p.name != "404.html"
                  and "assets" not in p.relative_to(site).parts)


def test_every_page_is_built_with_its_figures_and_generated_parts(site: Path) -> None:
    """Checked with an HTML parser: every page of the nav exists, every image and local link of
    every page names a file of the site, and each page holds what it must."""
    pages = _pages(site)
    names = {p.relative_to(site).as_posix() for p in pages}
    assert set(MUST_HAVE) <= names
    missing = []
    for page in pages:
        parts = _Parts()
        parts.feed(page.read_text())
        for target in parts.images + [link for link in parts.links
                                      if not link.startswith(("http", "#", "mailto:"))]:
            path = target.split("#")[0].split("?")[0]
            if path and not (page.parent / path).resolve().exists():
                missing.append(f"{page.relative_to(site)}: {target}")
    assert missing == []
    for name, needles in MUST_HAVE.items():
        text = (site / name).read_text()
        assert [n for n in needles if n not in text] == [], name


@pytest.fixture(scope="module")
def served(site: Path):
    """The built site over HTTP on localhost, as a reader's browser gets it."""
    handler = functools.partial(_QuietHandler, directory=str(site))
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    server.server_close()


class _QuietHandler(http.server.SimpleHTTPRequestHandler):
    def log_message(self, format: str, *args: object) -> None:
        pass


def test_every_page_loads_in_a_browser_without_errors(site: Path, served: str) -> None:
    if CHROMIUM is None:
        _needs("no Chromium: apt-get install chromium")
    try:
        from playwright.sync_api import sync_playwright
    except ImportError:
        _needs('Playwright is not installed: pip install -e ".[docs]"')
    problems: list[str] = []
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        page = browser.new_page()
        here: list[str] = [""]
        page.on("console", lambda message: problems.append(
            f"{here[0]}: console {message.type}: {message.text}")
            if message.type in ("error", "warning") else None)
        page.on("pageerror", lambda error: problems.append(f"{here[0]}: page error: {error}"))
        # a request the test's own next navigation cut short (ERR_ABORTED) is not the page's
        page.on("requestfailed", lambda request: problems.append(
            f"{here[0]}: request failed: {request.url} ({request.failure})")
            if "ERR_ABORTED" not in (request.failure or "") else None)
        for built in _pages(site):
            name = built.relative_to(site).as_posix()
            here[0] = name
            response = page.goto(f"{served}/{name}", wait_until="networkidle")
            assert response is not None and response.ok, name
            broken = page.evaluate(
                "() => [...document.images].filter(i => !i.complete || i.naturalWidth === 0)"
                ".map(i => i.getAttribute('src'))")
            problems += [f"{name}: figure not loaded: {src}" for src in broken]
            for needle in MUST_HAVE.get(name, []):
                if needle.endswith(".png") and not page.evaluate(
                        "n => [...document.images].some(i => i.src.endsWith(n) && "
                        "i.naturalWidth > 0)", needle.lstrip(".")):
                    problems.append(f"{name}: figure {needle} missing")
        # the search index loads and finds a page (the site's one script of its own)
        here[0] = "index.html (search)"
        page.goto(f"{served}/index.html", wait_until="networkidle")
        page.keyboard.press("/")
        page.keyboard.type("seed_sweep")
        page.wait_for_selector(".md-search-result__item", timeout=15_000)
        browser.close()
    assert problems == []
