"""Time writing generated Pathfinder images to disk with worker processes, and extrapolate.

    PYTHONPATH=src python scripts/maintainer/benchmark_pathfinder_generator.py \\
        --out docs/pathfinder/generation_speed.csv

Reports wall time and the CPU time of the workers (PNG encoding and writing included); on a
shared machine the CPU time divided by the worker count is the time on that many free cores.
"""

from __future__ import annotations

import argparse
import os
import tempfile
import time
from pathlib import Path

import pandas as pd

from linarena.data.pathfinder_generator import generate_pathfinder
from linarena.files import write_text_atomic


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--resolution", type=int, default=32)
    parser.add_argument("--difficulty", default="curv_contour_length_14")
    parser.add_argument("--num-images", type=int, default=2000)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--target", type=int, default=200_000, help="images to extrapolate to")
    parser.add_argument("--out", type=Path, default=Path("docs/pathfinder/generation_speed.csv"))
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as folder:
        before, start = os.times(), time.perf_counter()
        generate_pathfinder(
            folder,
            args.resolution,
            args.difficulty,
            args.num_images,
            workers=args.workers,
            images_per_folder=max(1, args.num_images // (4 * args.workers)),
            progress=False,
        )
        wall, after = time.perf_counter() - start, os.times()
    cpu = sum(after[2:4]) - sum(before[2:4]) + sum(after[:2]) - sum(before[:2])
    row = {
        "resolution": args.resolution,
        "difficulty": args.difficulty,
        "num_images": args.num_images,
        "workers": args.workers,
        "wall_s": wall,
        "cpu_s": cpu,
        "load_average_1min": os.getloadavg()[0],
        f"minutes_for_{args.target}_at_this_wall_rate": wall / args.num_images * args.target / 60,
        f"minutes_for_{args.target}_on_{args.workers}_free_cores": (
            cpu / args.num_images * args.target / args.workers / 60
        ),
    }
    print(row)
    write_text_atomic(args.out, pd.DataFrame([row]).to_csv(index=False, float_format="%.4g"))


if __name__ == "__main__":
    main()
