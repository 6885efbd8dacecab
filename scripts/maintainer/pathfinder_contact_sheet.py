"""Draw contact sheets of generated Pathfinder images: per difficulty, both labels.

    PYTHONPATH=src python scripts/maintainer/pathfinder_contact_sheet.py --resolution 32 \\
        --out docs/pathfinder
    PYTHONPATH=src python scripts/maintainer/pathfinder_contact_sheet.py --resolution 128 \\
        --out docs/pathfinder

Writes ``<out>/pathfinder<resolution>.png``: one row per difficulty and label, ``--per-row``
images each, shown pixel for pixel (scaled up by ``--zoom`` with nearest neighbours).
"""

from __future__ import annotations

import argparse
from pathlib import Path

import numpy as np
from PIL import Image, ImageDraw

from linarena.data.pathfinder_generator import DIFFICULTIES, render_sample
from linarena.files import atomic_path

LABEL_NAMES = {1: "connected (1)", 0: "not connected (0)"}


def sheet(resolution: int, per_row: int, zoom: int, seed: int) -> Image.Image:
    """Rows: (difficulty, label) pairs; each row ``per_row`` images of that label."""
    tile, gap, text_width = resolution * zoom, 4, 230
    rows = [(difficulty, label) for difficulty in DIFFICULTIES for label in (1, 0)]
    width = text_width + per_row * (tile + gap)
    canvas = Image.new("L", (width, len(rows) * (tile + gap)), 96)
    pen = ImageDraw.Draw(canvas)
    for r, (difficulty, label) in enumerate(rows):
        top = r * (tile + gap)
        pen.text((6, top + tile // 2 - 12), f"{difficulty}\n{LABEL_NAMES[label]}", fill=255)
        images, index = [], 0
        while len(images) < per_row:
            sample = render_sample(index, resolution, difficulty, seed=seed)
            if sample.label == label:
                images.append(sample.image)
            index += 1
        for c, image in enumerate(images):
            big = Image.fromarray(np.asarray(image)).resize((tile, tile), Image.Resampling.NEAREST)
            canvas.paste(big, (text_width + c * (tile + gap), top))
    return canvas


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--resolution", type=int, default=32)
    parser.add_argument("--per-row", type=int, default=6)
    parser.add_argument("--zoom", type=int, default=0, help="default: 4 at 32 px, 1 at 128 px")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", type=Path, default=Path("docs/pathfinder"))
    args = parser.parse_args()
    zoom = args.zoom or max(1, 128 // args.resolution)
    image = sheet(args.resolution, args.per_row, zoom, args.seed)
    path = args.out / f"pathfinder{args.resolution}.png"
    with atomic_path(path) as temporary:
        image.save(temporary, format="PNG")
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
