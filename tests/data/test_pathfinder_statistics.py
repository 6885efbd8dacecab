"""The generated images have the original generator's pixel statistics.

``docs/pathfinder/original_statistics.csv`` holds the shares of non-zero and above-128 pixels
of images drawn by the original ``snakes2.py`` with the LRA settings (docs/pathfinder/README.md).
Over 64 images the per-image spread (about 0.038 of non-zero and 0.009 of above-128 pixels)
gives a standard error of about 2% of either share, so 10% leaves about five of them; the
generator before version 3 drew 34% more non-zero pixels than the original at 32 px.
"""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
from helpers.paths import REPO_ROOT

from linarena.data.pathfinder_cues import pixel_shares
from linarena.data.pathfinder_generator import render_sample

ORIGINAL = REPO_ROOT / "docs" / "pathfinder" / "original_statistics.csv"
NUM_IMAGES = 64
RELATIVE_TOLERANCE = 0.10


@pytest.mark.parametrize("difficulty", ["curv_baseline", "curv_contour_length_14"])
def test_pixel_shares_match_the_original_generator(difficulty: str) -> None:
    table = pd.read_csv(ORIGINAL)
    original = table[(table.resolution == 32) & (table.difficulty == difficulty)].iloc[0]
    images = np.stack([render_sample(i, 32, difficulty, seed=5).image for i in range(NUM_IMAGES)])
    ours = pixel_shares(images)
    for name in ("ink_fraction", "above_128_fraction"):
        relative = ours[name] / original[name] - 1
        assert abs(relative) <= RELATIVE_TOLERANCE, (
            f"{difficulty} {name}: ours {ours[name]:.4f}, original {original[name]:.4f} "
            f"({relative:+.0%})"
        )
