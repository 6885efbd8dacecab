"""Pathfinder drawing parameters and the small images ("stencils") of one paddle or marker.

Facts from the original generator (Linsley et al. 2018, ``snakes2`` in drewlinsley/pathfinder)
and the LRA settings (google-research/long-range-arena, ``lra_benchmarks/data/pathfinder.py``).
A contour is a chain of straight dashes, "paddles". Each paddle is drawn as a line of width
``thickness * aa_scale`` on a canvas ``aa_scale`` times finer than the image, then shrunk with a
Lanczos filter in 8-bit grey (which anti-aliases it and leaves faint ringing around it). Its
occupancy mask is the same line thickened by a disc of radius ``margin`` (in image pixels) and
shrunk the same way: values in [0, 1].

A stencil is a (2n + 1, 2n + 1) float32 array whose centre pixel is the paddle's anchor (the end
the line is drawn from), n = ``stencil_radius``. Stencils depend only on the style, the margin
and the drawing direction, so each is computed once per process.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from functools import cache

import numpy as np
from PIL import Image, ImageDraw


@dataclass(frozen=True)
class PathfinderStyle:
    """Sizes in image pixels and counts of one resolution (LRA settings of ``snakes2``)."""

    resolution: int
    paddle_length: int
    margins: tuple[int, ...]  # one is drawn per image; paddles are 2 * margin apart
    thickness: float
    aa_scale: int
    marker_radius: float
    padding: int  # border where no paddle may go
    seed_distance: int  # the two target contours start this far apart
    continuity: float  # turn weight cos^2(min(continuity * |turn|, 90 deg))
    distractor_budget: int  # distractors: budget // distractor_length contours
    target_contrast: float  # snake contrast x paddle contrast
    distractor_contrast: float  # snake contrast only: the original draws distractors this way

    def stencil_radius(self, margin: int) -> int:
        return self.paddle_length + 2 * margin + math.ceil(self.thickness) + 2


STYLES: dict[int, PathfinderStyle] = {
    32: PathfinderStyle(32, 2, (1,), 0.5, 2, 1.5, 1, 7, 1.0, 20, 2 * 0.75, 2.0),
    64: PathfinderStyle(64, 5, (1,), 1.0, 2, 2.5, 1, 12, 1.8, 22, 0.8, 0.8),
    128: PathfinderStyle(128, 5, (2, 3), 1.5, 2, 3.0, 1, 20, 1.8, 35, 0.9, 0.9),
    256: PathfinderStyle(256, 5, (3,), 2.0, 2, 5.0, 22, 27, 1.8, 30, 1.0, 1.0),
}


@dataclass(frozen=True)
class PaddleStencil:
    """One paddle drawn from the centre pixel: line and masks, each (2n + 1, 2n + 1) float32.

    line: grey level (1 = full white before contrast). mask: occupancy. near: the mask dilated
    by a disc of radius margin (where a next paddle's far end may not go). seed_offsets: (K, 2)
    (row, col) offsets from a contour's first pixel of the cells that must be free for the
    contour to start with this paddle. seedable: whether a contour can start with it at all.
    """

    line: np.ndarray
    mask: np.ndarray
    near: np.ndarray
    seed_offsets: np.ndarray
    seedable: bool


def _disc_offsets(radius: float) -> np.ndarray:
    """(row, col) offsets of the integer points within ``radius``: (K, 2) int."""
    r = math.floor(radius)
    rows, cols = np.mgrid[-r : r + 1, -r : r + 1]
    inside = rows**2 + cols**2 <= radius**2
    return np.stack([rows[inside], cols[inside]], axis=1)


def dilate(array: np.ndarray, radius: float) -> np.ndarray:
    """Grey dilation (maximum) of a 2-D array by a disc of ``radius`` pixels; same shape."""
    r = math.floor(radius)
    padded = np.pad(array, r)
    out = np.zeros_like(array)
    height, width = array.shape
    for dy, dx in _disc_offsets(radius):
        np.maximum(out, padded[r + dy : r + dy + height, r + dx : r + dx + width], out=out)
    return out


def _shrink(fine: np.ndarray, size: int) -> np.ndarray:
    """8-bit Lanczos downsample of a 0/255 uint8 canvas to (size, size), as floats in [0, 1]."""
    small = Image.fromarray(fine).resize((size, size), Image.Resampling.LANCZOS)
    return np.asarray(small, dtype=np.float32) / 255.0


def _seed_offsets(style: PathfinderStyle, margin: int, small_mask: np.ndarray) -> np.ndarray:
    """Cells tested before a contour starts with a paddle whose mask is ``small_mask``.

    The original marks a first pixel as taken by dilating the occupancy with the paddle's
    full-mask pixels, taken from a window of 2 (length + margin) + 1 px whose centre is one
    pixel up and left of the paddle's start (so the cells tested sit one pixel down and right
    of the paddle), and cut to that window.
    """
    k = small_mask.shape[0] // 2
    reach = style.paddle_length + margin
    offsets = np.argwhere(small_mask >= 254.5 / 255) - k
    inside = np.all((offsets >= -reach - 1) & (offsets <= reach - 1), axis=1)
    return offsets[inside] + 1


def _seedable(seed_offsets: np.ndarray) -> bool:
    """Whether the original's seed dilation leaves the image without a -inf pixel.

    OpenCV's dilation pads the image with -inf; a pixel near a corner whose tested cells all
    fall outside the image gets -inf, and the original then finds no free pixel at all (its
    check for negative occupancy) and gives the contour up. At 32 px this keeps only first
    paddles pointing up and to the left (-150 to -121 degrees); at 128 px nearly all.
    """
    rows, cols = seed_offsets[:, 0], seed_offsets[:, 1]
    return all(
        np.any((sign_row * rows >= 0) & (sign_col * cols >= 0))
        for sign_row in (-1, 1)
        for sign_col in (-1, 1)
    )


@cache
def paddle_stencil(style: PathfinderStyle, margin: int, angle: float) -> PaddleStencil:
    """The paddle drawn ``paddle_length`` px from the centre pixel in direction ``angle``.

    ``angle`` in radians, measured with rows as y: the far end is at
    (row, col) + paddle_length * (sin angle, cos angle).
    """
    n, aa = style.stencil_radius(margin), style.aa_scale
    # As in the original: a fine canvas of 2 k aa + 1 pixels reaching paddle_length +
    # thickness + margin px around the anchor, which sits on its centre pixel, with the far end
    # rounded up to whole fine pixels; shrunk to 2 k + 1 pixels (a factor a little under aa).
    k = style.paddle_length + math.ceil(style.thickness) + margin
    fine_size, centre = 2 * k * aa + 1, k * aa
    length = style.paddle_length * aa
    end = (
        math.ceil(centre + length * math.cos(angle)),
        math.ceil(centre + length * math.sin(angle)),
    )
    canvas = Image.new("L", (fine_size, fine_size), 0)
    ImageDraw.Draw(canvas).line(
        [(centre, centre), end], fill=255, width=max(1, round(style.thickness * aa))
    )
    fine = np.asarray(canvas)
    thick = dilate((fine > 0).astype(np.uint8), margin * aa) * np.uint8(255)
    small_line, small_mask = _shrink(fine, 2 * k + 1), _shrink(thick, 2 * k + 1)
    line = np.zeros((2 * n + 1, 2 * n + 1), dtype=np.float32)
    mask = np.zeros_like(line)
    line[n - k : n + k + 1, n - k : n + k + 1] = small_line
    mask[n - k : n + k + 1, n - k : n + k + 1] = small_mask
    seed_offsets = _seed_offsets(style, margin, small_mask)
    return PaddleStencil(
        line=line,
        mask=mask,
        near=dilate(mask, margin),
        seed_offsets=seed_offsets,
        seedable=_seedable(seed_offsets),
    )


@cache
def marker_stencil(style: PathfinderStyle) -> np.ndarray:
    """A marker disc on the centre pixel: (2n + 1, 2n + 1) float32 in [0, 1].

    As in the original, the disc is centred on the first fine pixel of the centre pixel, a
    quarter pixel up and left of its middle at aa_scale 2.
    """
    aa = style.aa_scale
    n = math.ceil(style.marker_radius) + 3
    size = 2 * n + 1
    centre = n * aa
    rows, cols = np.mgrid[: size * aa, : size * aa]
    disc = (rows - centre) ** 2 + (cols - centre) ** 2 <= (style.marker_radius * aa) ** 2
    return _shrink(disc.astype(np.uint8) * np.uint8(255), size)


@cache
def circle_offsets(radius: int) -> tuple[np.ndarray, np.ndarray]:
    """Pixels on a circle of ``radius`` around a pixel, one per pixel of arc, and their angles.

    Returns offsets (K, 2) int as (row, col), unique, and angles (K,) radians of each offset.
    """
    step = 2 * math.pi / (2 * math.pi * radius)  # one pixel of arc
    angles = np.arange(0.0, 2 * math.pi, step)
    offsets = np.floor(radius * np.stack([np.sin(angles), np.cos(angles)], axis=1)).astype(int)
    offsets = np.unique(offsets, axis=0)
    return offsets, np.arctan2(offsets[:, 0], offsets[:, 1])
