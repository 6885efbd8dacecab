"""What the README and the documentation site publish: nothing of what the README published
before it became a front door is lost (tests/docs/published_before.json: its figures, tables,
generated blocks, captions and one-run lines, taken from the README of the commit before the
move), every link of the README resolves, the README stays short, and the configuration page
lists every file of conf/."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from helpers.paths import REPO_ROOT

from linarena.reports.config_reference import options, reference_markdown

BEFORE = Path(__file__).with_name("published_before.json")
README = REPO_ROOT / "README.md"
DOCS = REPO_ROOT / "docs"
IMAGE = re.compile(r"!\[[^\]]*\]\(([^)\s]+)\)")
LINK = re.compile(r"(?<!!)\[[^\]]*\]\(([^)\s]+)\)")
MARKER = re.compile(r"<!-- results:(\w+) -->")
CAPTION = re.compile(r"^<sub>((?:docs/results/[\w.]+(?:, )?)+):", re.MULTILINE)
HEADING = re.compile(r"^#{1,6} (.+?)\s*$", re.MULTILINE)


def site_pages() -> list[Path]:
    """The README and the site's pages (docs/results/ holds published files, not pages)."""
    return [README, *sorted(p for p in DOCS.rglob("*.md")
                            if p.relative_to(DOCS).parts[0] not in ("results", "cards"))]


def tables(text: str) -> list[tuple[str, list[str]]]:
    """Every Markdown table of `text`: (its header row, the cells of its first column)."""
    found, rows = [], []
    for line in [*text.splitlines(), ""]:
        stripped = line.strip()
        if stripped.startswith("|"):
            rows.append([cell.strip() for cell in stripped.strip("|").split("|")])
            continue
        if len(rows) >= 2:
            found.append((" | ".join(rows[0]), [row[0] for row in rows[2:]]))
        rows = []
    return found


def inventory(text: str, page: Path) -> dict:
    """The published things of one page: figures (as repository paths), tables, generated
    blocks, the sources each caption cites, the one-run lines and the headings."""
    text = re.sub(r"^( *)```.*?^\1```", "", text, flags=re.MULTILINE | re.DOTALL)
    base = page.parent.relative_to(REPO_ROOT)
    figures = [(base / target).as_posix() for target in IMAGE.findall(text)]
    return {"figures": sorted({re.sub(r"^\./", "", f) for f in figures}),
            "tables": tables(text),
            "markers": sorted(set(MARKER.findall(text))),
            "captions": sorted(set(CAPTION.findall(text))),
            "one_run_lines": len(re.findall(r"^One run: ", text, re.MULTILINE)),
            "headings": [h.strip("* ") for h in HEADING.findall(text)]}


def published_now() -> dict:
    pages = [inventory(page.read_text(), page) for page in site_pages()]
    return {"figures": {f for p in pages for f in p["figures"]},
            "tables": [t for p in pages for t in p["tables"]],
            "markers": {m for p in pages for m in p["markers"]},
            "captions": {c for p in pages for c in p["captions"]},
            "one_run_lines": sum(p["one_run_lines"] for p in pages),
            "headings": {h for p in pages for h in p["headings"]}}


def test_nothing_the_readme_published_is_lost() -> None:
    before, now = json.loads(BEFORE.read_text()), published_now()
    assert set(before["figures"]) <= now["figures"]
    assert set(before["markers"]) <= now["markers"]
    assert set(before["captions"]) <= now["captions"]
    assert now["one_run_lines"] >= before["one_run_lines"]
    lost = [(header, first) for header, first in before["tables"]
            if not any(h == header and set(first) <= set(f) for h, f in now["tables"])]
    assert lost == [], "tables of the README before the move found on no page"
    # the Results sections and the studies' named readings, as headings somewhere
    assert set(before["result_headings"]) <= now["headings"]


def test_every_figure_is_a_file() -> None:
    assert [f for f in published_now()["figures"] if not (REPO_ROOT / f).is_file()] == []


def _slug(heading: str) -> str:
    """The anchor MkDocs (toc) and GitHub give a heading, for the headings used here."""
    text = re.sub(r"[`*]", "", heading).strip().lower()
    return re.sub(r"[\s]+", "-", re.sub(r"[^\w\s-]", "", text))


@pytest.mark.parametrize("page", site_pages(), ids=lambda p: p.relative_to(REPO_ROOT).as_posix())
def test_every_relative_link_resolves(page: Path) -> None:
    """Each link of the page to a file of the repository names a file that exists, and an
    anchor into a Markdown file names one of its headings."""
    text = re.sub(r"^( *)```.*?^\1```", "", page.read_text(), flags=re.MULTILINE | re.DOTALL)
    broken = []
    for target in LINK.findall(text) + IMAGE.findall(text):
        if re.match(r"^[a-z]+:", target):
            continue  # a web address
        path, _, anchor = target.partition("#")
        file = (page.parent / path).resolve() if path else page
        if not file.exists():
            broken.append(target)
        elif anchor and file.suffix == ".md":
            headings = HEADING.findall(file.read_text())
            if anchor not in {_slug(h) for h in headings} and anchor not in (
                    "attention",):  # generated at build time: the configuration groups
                broken.append(target)
    assert broken == []


# The only raw HTML the pages use on purpose: the small print under a published table.
DELIBERATE_TAGS = {"sub"}


@pytest.mark.parametrize("page", site_pages(), ids=lambda p: p.relative_to(REPO_ROOT).as_posix())
def test_a_placeholder_in_prose_is_never_taken_for_html(page: Path) -> None:
    """Markdown passes `<name>` through as an HTML tag: a path placeholder written outside
    backticks vanishes from the page (`<attention>`), or strikes through everything after it
    (`seed<s>`). Outside code, only the deliberate tags may appear."""
    text = re.sub(r"^( *)```.*?^\1```", "", page.read_text(), flags=re.MULTILINE | re.DOTALL)
    prose = re.sub(r"`[^`]*`", "", text)  # a code span may wrap across lines
    tags = set(re.findall(r"</?([A-Za-z][\w-]*)[^>]*>", prose))
    assert tags - DELIBERATE_TAGS == set(), "wrap the placeholder in backticks"


def test_the_readme_is_a_front_door() -> None:
    """Under 250 lines, with the sections a newcomer looks for, each leading to its page."""
    text = README.read_text()
    assert len(text.splitlines()) <= 250
    for section in ("Install", "The default run and the tests", "Compare attentions properly",
                    "The commands you will use most", "What ships", "Results",
                    "Adding a variant", "Citing and license"):
        assert f"\n## {section}\n" in text, section
    commands = text.split("## The commands you will use most")[1].split("```")[1]
    lines = [line for line in commands.splitlines() if line.strip() and line != "bash"]
    assert len(lines) == 10 and all(" # " in line for line in lines), lines
    # the comparison it teaches is the seed sweep, not one seed per attention
    compare = text.split("## Compare attentions properly")[1].split("\n## ")[0]
    assert "scripts/seed_sweep.py" in compare and "pairwise_tests.py" in compare


def test_the_configuration_page_lists_every_config_file() -> None:
    conf = REPO_ROOT / "conf"
    page = reference_markdown(conf)
    listed = {option.path for group in options(conf).values() for option in group}
    assert listed == set(conf.rglob("*.yaml"))
    for path in sorted(conf.rglob("*.yaml")):
        assert f"File: `conf/{path.relative_to(conf).as_posix()}`" in page, path
    for name in (p.stem for p in (conf / "attention").glob("*.yaml")):
        assert f"`attention={name}`" in page, name
    assert "<!-- generated:configuration -->" in (DOCS / "configuration.md").read_text()
