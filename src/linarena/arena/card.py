"""The card as text: one Markdown file and one self-contained HTML page (its figures embedded as
base64, no script, no stylesheet or font from the network), from the sections' results. Its
first lines say what it shows and how sure it is."""

from __future__ import annotations

import base64
import html
import math
import re
from dataclasses import dataclass, field

from linarena.arena.checks import Row, summary_line


@dataclass
class Card:
    """What the sections found. `headline`: the lines that open the card (what it shows, how
    sure); `sections`: (title, Markdown body) in order; `figures`: {file name: PNG bytes}."""

    title: str
    headline: list[str] = field(default_factory=list)
    sections: list[tuple[str, str]] = field(default_factory=list)
    figures: dict[str, bytes] = field(default_factory=dict)


def number(value: float | None, digits: int = 3) -> str:
    """A table cell: '' for a missing value, else a compact number."""
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return ""
    if isinstance(value, float) and (abs(value) >= 1000 or value.is_integer()):
        return f"{value:,.0f}"
    return f"{value:.{digits}g}"


def table(header: list[str], rows: list[list[str]]) -> str:
    """A Markdown table ('|' in a cell escaped)."""
    def line(cells):
        return "| " + " | ".join(str(c).replace("|", "\\|") for c in cells) + " |"
    return "\n".join([line(header), line(["---"] * len(header)), *map(line, rows)])


def certificate_section(rows: list[Row]) -> str:
    """The certificate's rows: check, PASS / FAIL / SKIP, error, tolerance, detail."""
    body = table(["check", "result", "error", "tolerance", "detail"],
                 [[r.check, f"**{r.status}**" if r.status == "FAIL" else r.status,
                   number(r.error), number(r.tolerance), r.detail] for r in rows])
    return f"{summary_line(rows)}.\n\n{body}"


def markdown(card: Card) -> str:
    """The card as Markdown; figures are linked as files beside it (<stem>_<name>.png)."""
    parts = [f"# {card.title}", "", *card.headline, ""]
    for title, body in card.sections:
        parts += [f"## {title}", "", body, ""]
    return "\n".join(parts)


def html_page(card: Card, markdown_text: str) -> str:
    """The card as one HTML page: its Markdown (the subset markdown() writes: headings,
    paragraphs, bullets, tables, images, **bold** and `code`) rendered, each figure embedded
    as base64, so the page opens from disk without a network."""
    style = ("body{font-family:sans-serif;max-width:1100px;margin:2em auto;line-height:1.4}"
             "table{border-collapse:collapse;font-size:0.85em}td,th{border:1px solid #ccc;"
             "padding:2px 6px}img{max-width:100%}")
    blocks = [_block(block, card.figures) for block in re.split(r"\n\s*\n", markdown_text)
              if block.strip()]
    return (f"<!DOCTYPE html>\n<html><head><meta charset='utf-8'><title>"
            f"{html.escape(card.title)}</title><style>{style}</style></head>\n<body>\n"
            + "\n".join(blocks) + "\n</body></html>\n")


def _inline(text: str) -> str:
    text = html.escape(text)
    text = re.sub(r"\*\*(.+?)\*\*", r"<b>\1</b>", text)
    return re.sub(r"`(.+?)`", r"<code>\1</code>", text)


def _block(block: str, figures: dict[str, bytes]) -> str:
    lines = block.strip().splitlines()
    heading = re.match(r"(#+) (.*)", lines[0])
    if heading and len(lines) == 1:
        level = len(heading.group(1))
        return f"<h{level}>{_inline(heading.group(2))}</h{level}>"
    image = re.fullmatch(r"!\[(.*)\]\((.*)\)", block.strip())
    if image:
        png = figures.get(image.group(2), b"")
        data = base64.b64encode(png).decode("ascii")
        alt = html.escape(image.group(1))
        return f"<p><img alt='{alt}' src='data:image/png;base64,{data}'></p>"
    if all(line.startswith("|") for line in lines):
        cells = [[c.strip().replace("\\|", "|") for c in re.split(r"(?<!\\)\|", line)[1:-1]]
                 for line in lines if not re.fullmatch(r"[|\-\s]+", line)]
        head = "".join(f"<th>{_inline(c)}</th>" for c in cells[0])
        rows = "".join("<tr>" + "".join(f"<td>{_inline(c)}</td>" for c in row) + "</tr>"
                       for row in cells[1:])
        return f"<table><tr>{head}</tr>{rows}</table>"
    if all(line.startswith("- ") or line.startswith("  ") for line in lines):
        items = re.split(r"\n- ", "\n" + block.strip())[1:]
        return "<ul>" + "".join(f"<li>{_inline(' '.join(i.split()))}</li>" for i in items) + "</ul>"
    return f"<p>{_inline(' '.join(block.split()))}</p>"
