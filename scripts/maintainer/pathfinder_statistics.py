"""Statistics of generated Pathfinder images, to compare with the original generator's.

    PYTHONPATH=src python scripts/maintainer/pathfinder_statistics.py \\
        --out docs/pathfinder/statistics.csv

One row per (resolution, difficulty): the shares of non-zero, faint (1 to 6) and above-128
pixels (``pathfinder_cues.pixel_shares``), marker distance per label, the held-out accuracy of rules
fitted on the marker distance and on the ink count (``linarena.data.pathfinder_cues``; chance is
0.5), and the CPU time per image.
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

import numpy as np
import pandas as pd

from linarena.data.pathfinder_cues import cue_accuracies, cues, pixel_shares
from linarena.data.pathfinder_generator import render_sample
from linarena.files import write_text_atomic

SETTINGS = [
    (32, "curv_baseline"),
    (32, "curv_contour_length_9"),
    (32, "curv_contour_length_14"),
    (128, "curv_contour_length_14"),
]


def row(resolution: int, difficulty: str, num_images: int, seed: int) -> dict:
    start = time.process_time()
    samples = [render_sample(i, resolution, difficulty, seed=seed) for i in range(num_images)]
    cpu_ms = (time.process_time() - start) / num_images * 1000
    labels = np.array([s.label for s in samples])
    distance = cues(samples)["marker distance"]
    images = np.stack([s.image for s in samples])
    result = {
        "resolution": resolution,
        "difficulty": difficulty,
        "num_images": num_images,
        "seed": seed,
        **pixel_shares(images),
    }
    for label in (0, 1):
        result[f"marker_distance_mean_label{label}"] = distance[labels == label].mean()
        result[f"marker_distance_std_label{label}"] = distance[labels == label].std()
    for name, accuracy in cue_accuracies(samples).items():
        result[name.replace(" ", "_") + "_accuracy"] = accuracy
    result["cpu_ms_per_image"] = cpu_ms
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--num-images", type=int, default=400)
    parser.add_argument("--num-images-128", type=int, default=200)
    parser.add_argument("--seed", type=int, default=11)
    parser.add_argument("--out", type=Path, default=Path("docs/pathfinder/statistics.csv"))
    args = parser.parse_args()
    rows = []
    for resolution, difficulty in SETTINGS:
        count = args.num_images_128 if resolution == 128 else args.num_images
        rows.append(row(resolution, difficulty, count, args.seed))
        print(rows[-1])
    write_text_atomic(args.out, pd.DataFrame(rows).to_csv(index=False, float_format="%.4g"))
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
