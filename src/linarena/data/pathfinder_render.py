"""One Pathfinder image: contours from ``pathfinder_curves``, drawn and marked.

See ``pathfinder_generator`` for the settings per resolution and the data set layout.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from linarena.data.pathfinder_curves import Contour, layout_scene
from linarena.data.pathfinder_stencils import (
    STYLES,
    PathfinderStyle,
    marker_stencil,
    paddle_stencil,
)

DIFFICULTIES: dict[str, int] = {
    "curv_baseline": 6,
    "curv_contour_length_9": 9,
    "curv_contour_length_14": 14,
}
RESOLUTIONS: tuple[int, ...] = tuple(STYLES)
# Separate random streams so labels and content never share draws.
_CONTENT_STREAM, _LABEL_STREAM = 0, 1


@dataclass(frozen=True)
class PathfinderSample:
    """One image and the geometry that determines its label.

    image: (resolution, resolution) uint8. contours: target A, target B, then the distractors,
    each (num_paddles, 2, 2): per paddle its two ends as (x, y) pixel centres (pixel (row, col)
    covers [col, col + 1] x [row, row + 1]), in drawing order along the contour. dots: (2, 2),
    the (x, y) centres of the markers: the start of A, then the end of A (label 1) or of B
    (label 0). margin: the paddle margin drawn for this image.
    """

    image: np.ndarray
    label: int
    contours: tuple[np.ndarray, ...]
    dots: np.ndarray
    style: PathfinderStyle
    margin: int


def check_resolution_and_difficulty(resolution: int, difficulty: str) -> None:
    """Raise ValueError, listing the valid values, for an unsupported resolution or difficulty."""
    if resolution not in RESOLUTIONS:
        raise ValueError(
            f"Pathfinder resolution {resolution!r} is not supported; use one of {RESOLUTIONS}."
        )
    if difficulty not in DIFFICULTIES:
        raise ValueError(
            f"Unknown Pathfinder difficulty {difficulty!r}; valid ones: {', '.join(DIFFICULTIES)}."
        )


def contour_counts(resolution: int, difficulty: str) -> tuple[int, int, int]:
    """(target paddles, paddles per distractor, number of distractors) of a data set."""
    check_resolution_and_difficulty(resolution, difficulty)
    length = DIFFICULTIES[difficulty]
    distractor_length = length // 3
    return length, distractor_length, STYLES[resolution].distractor_budget // distractor_length


def sample_label(index: int, resolution: int, difficulty: str, seed: int = 0) -> int:
    """Label of image ``index``: each aligned pair of images holds one of each class."""
    pair_rng = np.random.default_rng(
        [seed, resolution, DIFFICULTIES[difficulty], _LABEL_STREAM, index // 2]
    )
    first_label = int(pair_rng.integers(2))
    return first_label if index % 2 == 0 else 1 - first_label


def _stamp(canvas: np.ndarray, stencil: np.ndarray, pixel: tuple[int, int], pad: int) -> None:
    """canvas = max(canvas, stencil) with the stencil's centre on ``pixel`` (row, col)."""
    n = stencil.shape[0] // 2
    row, col = pixel[0] + pad, pixel[1] + pad
    window = canvas[row - n : row + n + 1, col - n : col + n + 1]
    np.maximum(window, stencil, out=window)


def _draw(
    style: PathfinderStyle, margin: int, groups: list[tuple[list[Contour], float]], dots: list
) -> np.ndarray:
    """Grey image (resolution, resolution) uint8 of the contours (with contrasts) and markers."""
    marker = marker_stencil(style)
    pad = max(style.stencil_radius(margin), marker.shape[0] // 2) + 1
    size = style.resolution + 2 * pad
    canvas = np.zeros((size, size), dtype=np.float32)
    for contours, contrast in groups:
        for contour in contours:
            for anchor, angle in contour.strokes:
                line = paddle_stencil(style, margin, angle).line
                _stamp(canvas, line * np.float32(contrast), anchor, pad)
    for dot in dots:
        _stamp(canvas, marker, dot, pad)
    image = canvas[pad:-pad, pad:-pad]
    return (image * (255.0 / max(float(image.max()), 1e-6)) + 0.5).astype(np.uint8)


def _xy_centres(pixels: np.ndarray) -> np.ndarray:
    """(row, col) integer pixels (..., 2) -> (x, y) pixel centres (..., 2) float."""
    return pixels[..., ::-1] + 0.5


def render_sample(index: int, resolution: int, difficulty: str, seed: int = 0) -> PathfinderSample:
    """Generate image ``index`` of the (seed, resolution, difficulty) data set."""
    check_resolution_and_difficulty(resolution, difficulty)
    if index < 0 or seed < 0:
        raise ValueError(f"index and seed must be >= 0, got index={index}, seed={seed}.")
    style = STYLES[resolution]
    label = sample_label(index, resolution, difficulty, seed)
    rng = np.random.default_rng(
        [seed, resolution, DIFFICULTIES[difficulty], _CONTENT_STREAM, index]
    )
    scene = layout_scene(rng, style, *contour_counts(resolution, difficulty))
    # Which target carries the first marker (target A), as the original draws it.
    swap = bool(rng.integers(2))
    target_a, target_b = scene.targets[::-1] if swap else scene.targets
    dots = [target_a.origin, (target_a if label == 1 else target_b).terminal]
    groups = [
        (list(scene.targets), style.target_contrast),
        (list(scene.distractors), style.distractor_contrast),
    ]
    groups.sort(key=lambda group: group[1])  # drawn dimmest first: stamping keeps the maximum
    image = _draw(style, scene.margin, groups, dots)
    contours = tuple(
        _xy_centres(np.array([[start, end] for start, end in contour.paddles]))
        for contour in (target_a, target_b, *scene.distractors)
    )
    return PathfinderSample(
        image=image,
        label=label,
        contours=contours,
        dots=_xy_centres(np.array(dots)),
        style=style,
        margin=scene.margin,
    )
