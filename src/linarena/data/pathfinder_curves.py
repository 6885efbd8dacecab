"""Contour growth for the Pathfinder generator, after the original ``snakes2`` algorithm.

Pixels are integer (row, col). A paddle of a contour starts ``margin`` px past a pivot point and
ends ``paddle_length + margin`` px from it, so consecutive paddles leave a gap of about
2 * margin. Growing a contour: the next pivot lies ``paddle_length + 2 * margin`` ahead of the
last one along the last direction; the next paddle's far end is drawn among the pixels on the
circle of radius ``paddle_length + margin`` around that pivot, each with weight
cos^2(min(continuity * |turn|, 90 deg)) times (1 - the dilated occupancy there); a drawn paddle
whose occupancy mask overlaps what is placed (mask sum >= 1.8) is redrawn, at most 3 times, after
which the contour fails. A contour's own newest paddle joins the occupancy only when the next one
is placed, so consecutive paddles may touch.

The two targets start ``seed_distance`` apart near the middle of the image (the first one keeps
2 * seed_distance from the edges) and grow one paddle each in turn; if either gets stuck, both are
drawn again. Then each distractor contour gets up to 5 attempts and is left out if all fail.

A contour's first paddle must also be one the original can start with (``seedable``): its seed
test gives up on most directions at 32 px (OpenCV pads its dilation with -inf), so there target
A's first paddle and every distractor's point up and to the left, and most distractors fail:
about 1.2 of 5 are drawn at ``curv_contour_length_14``, which makes the images sparser.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from functools import cache

import numpy as np

from linarena.data.pathfinder_stencils import (
    PaddleStencil,
    PathfinderStyle,
    circle_offsets,
    dilate,
    paddle_stencil,
)

_PADDLE_TRIES = 3
_SEED_TRIES = 3
_DISTRACTOR_TRIES = 5
_PAIR_TRIES = 10_000
_REJECTION_DRAWS = 64
_FREE = 0.3  # occupancy at or below this counts as free for a contour's first paddle
_MIN_FREE_FRACTION = 0.01  # no new distractor once less of the image is free


Pixel = tuple[int, int]  # (row, col)


@dataclass
class Contour:
    """A chain of paddles.

    paddles: per paddle its (start, end) (row, col) along the contour, where the line is drawn;
    the contour's first and last points are integer pixels (marker positions). strokes:
    per paddle how it is drawn, (anchor pixel, angle): the stencil ``paddle_stencil(.., angle)``
    centred on the anchor.
    """

    paddle_length: int
    angle: float  # direction of the newest paddle, radians
    pivot: Pixel
    pending: tuple[Pixel, float] | None  # newest paddle (anchor, angle), not yet in the mask
    paddles: list[tuple[tuple[float, float], tuple[float, float]]] = field(default_factory=list)
    strokes: list[tuple[Pixel, float]] = field(default_factory=list)

    @property
    def origin(self) -> Pixel:
        return self.paddles[0][0]

    @property
    def terminal(self) -> Pixel:
        """The far end of the last paddle (its anchor, unless it is the first paddle)."""
        anchor, angle = self.strokes[-1]
        return anchor if len(self.strokes) > 1 else _step(anchor, angle, self.paddle_length)


@dataclass(frozen=True)
class Scene:
    """Targets (the two contours that may carry markers), distractors, and the margin used."""

    targets: tuple[Contour, Contour]
    distractors: tuple[Contour, ...]
    margin: int


def _step(point: Pixel, angle: float, distance: float) -> Pixel:
    """The pixel ``distance`` px from ``point`` in direction ``angle``, coordinates rounded up."""
    return (
        math.ceil(point[0] + distance * math.sin(angle) - 1e-9),
        math.ceil(point[1] + distance * math.cos(angle) - 1e-9),
    )


def _towards(point: Pixel, angle: float, distance: float) -> tuple[float, float]:
    return point[0] + distance * math.sin(angle), point[1] + distance * math.cos(angle)


class _Kit:
    """What every board of one (style, margin) shares, computed once: the empty occupancy,
    the candidate far ends of a next paddle and the paddle stencils, by angle."""

    def __init__(self, style: PathfinderStyle, margin: int) -> None:
        self.style, self.margin = style, margin
        self.n = style.stencil_radius(margin)
        self.pad = self.n + 1
        size = style.resolution + 2 * self.pad
        inner = slice(self.pad + style.padding, self.pad + style.resolution - style.padding)
        self.mask = np.ones((size, size), dtype=np.float32)
        self.mask[inner, inner] = 0.0
        self.near = dilate(self.mask, margin)
        # Far ends of a next paddle, as (row, col) offsets from the pivot, angles and flat offsets.
        self.offsets, self.angles = circle_offsets(style.paddle_length + margin)
        self.flat = self.offsets[:, 0] * size + self.offsets[:, 1]
        self._weights: dict[float, np.ndarray] = {}
        self._stencils: dict[float, PaddleStencil] = {}

    def turn_weights(self, angle: float) -> np.ndarray:
        """cos^2(min(continuity * |turn|, 90 deg)) of each candidate after direction ``angle``."""
        weights = self._weights.get(angle)
        if weights is None:
            turn = np.abs(self.angles - angle)
            turn = np.minimum(turn, 2 * math.pi - turn)
            weights = np.cos(np.minimum(turn * self.style.continuity, math.pi / 2)) ** 2
            self._weights[angle] = weights
        return weights

    def stencil(self, angle: float) -> PaddleStencil:
        stencil = self._stencils.get(angle)
        if stencil is None:
            stencil = self._stencils[angle] = paddle_stencil(self.style, self.margin, angle)
        return stencil


@cache
def _kit(style: PathfinderStyle, margin: int) -> _Kit:
    return _Kit(style, margin)


class Board:
    """Occupancy ``mask`` and its dilation ``near``, padded by ``pad`` px of occupied border."""

    def __init__(self, style: PathfinderStyle, margin: int) -> None:
        self.kit = kit = _kit(style, margin)
        self.style, self.margin, self.n, self.pad = style, margin, kit.n, kit.pad
        self.mask, self.near = kit.mask.copy(), kit.near.copy()
        self.near_flat = self.near.reshape(-1)

    def copy(self) -> Board:
        other = object.__new__(Board)
        other.__dict__.update(self.__dict__)
        other.mask, other.near = self.mask.copy(), self.near.copy()
        other.near_flat = other.near.reshape(-1)
        return other

    def window(self, anchor: Pixel) -> tuple[slice, slice]:
        row, col = anchor[0] + self.pad, anchor[1] + self.pad
        return slice(row - self.n, row + self.n + 1), slice(col - self.n, col + self.n + 1)

    def commit(self, contour: Contour) -> None:
        """Add the contour's pending paddle to the occupancy."""
        if contour.pending is None:
            return
        anchor, angle = contour.pending
        stencil = self.kit.stencil(angle)
        rows, cols = self.window(anchor)
        np.maximum(self.mask[rows, cols], stencil.mask, out=self.mask[rows, cols])
        np.maximum(self.near[rows, cols], stencil.near, out=self.near[rows, cols])
        contour.pending = None

    def inside(self, point: Pixel) -> bool:
        res = self.style.resolution
        return 0 <= point[0] < res and 0 <= point[1] < res


def _free_tail(rng: np.random.Generator, board: Board, angle: float, edge: int) -> Pixel | None:
    """A uniformly drawn first pixel where a first paddle in direction ``angle`` may start.

    None when there is none, or when the original could not start a paddle in this direction
    (``PaddleStencil.seedable``). Free: the paddle's seed cells avoid occupancy above ``_FREE``
    and the ``edge`` px image border; cells beyond the image edge count as free, as in the
    original's dilation.
    """
    stencil = board.kit.stencil(angle)
    if not stencil.seedable:
        return None
    res, pad = board.style.resolution, board.pad
    blocked = np.zeros_like(board.mask, dtype=bool)
    image = (slice(pad, pad + res), slice(pad, pad + res))
    blocked[image] = board.mask[image] > _FREE
    inner = blocked[image]
    inner[:edge, :] = inner[res - edge :, :] = True
    inner[:, :edge] = inner[:, res - edge :] = True
    offsets = stencil.seed_offsets
    tails = rng.integers(0, res, size=(_REJECTION_DRAWS, 2))
    cells = tails[:, None, :] + offsets[None] + pad
    ok = ~blocked[cells[..., 0], cells[..., 1]].any(axis=1)
    if ok.any():
        row, col = tails[int(np.argmax(ok))]
        return int(row), int(col)
    # Rare: little room left. Test every pixel, then draw among the free ones.
    free = np.ones((res, res), dtype=bool)
    for dy, dx in offsets:
        free &= ~blocked[pad + dy : pad + dy + res, pad + dx : pad + dx + res]
    candidates = np.argwhere(free)
    if len(candidates) == 0:
        return None
    row, col = candidates[rng.integers(len(candidates))]
    return int(row), int(col)


def _seed(board: Board, tail: Pixel, angle: float) -> Contour | None:
    """Start a contour with a first paddle from ``tail`` in direction ``angle``."""
    length, margin = board.style.paddle_length, board.margin
    head = _step(tail, angle, length)
    pivot = _step(head, angle, -(length + margin))
    if not (board.inside(head) and board.inside(pivot)):
        return None
    contour = Contour(paddle_length=length, angle=angle, pivot=pivot, pending=(tail, angle))
    contour.paddles.append((tail, _towards(tail, angle, length)))
    contour.strokes.append((tail, angle))
    return contour


def _random_angle(rng: np.random.Generator) -> float:
    return int(rng.integers(-180, 180)) * math.pi / 180


def _extend(rng: np.random.Generator, board: Board, contour: Contour) -> bool:
    """Add one paddle to ``contour``; False when it is stuck (the board is then unchanged).

    Far ends outside the image need no test: the padding around it is fully occupied.
    """
    style, margin, kit = board.style, board.margin, board.kit
    pivot = _step(contour.pivot, contour.angle, style.paddle_length + 2 * margin)
    base = (pivot[0] + board.pad) * board.near.shape[1] + pivot[1] + board.pad
    free = 1.0 - board.near_flat[base + kit.flat]
    cumulative = np.cumsum(kit.turn_weights(contour.angle) * free)
    total = float(cumulative[-1])
    if total < 1e-4:
        return False
    for _ in range(_PADDLE_TRIES):
        drawn = int(np.searchsorted(cumulative, rng.random() * total, side="right"))
        index = min(drawn, len(kit.angles) - 1)
        end = (pivot[0] + int(kit.offsets[index, 0]), pivot[1] + int(kit.offsets[index, 1]))
        angle = float(kit.angles[index])
        back = angle + math.pi if angle < 0 else angle - math.pi
        rows, cols = board.window(end)
        if (board.mask[rows, cols] + kit.stencil(back).mask).max() < 1.8:
            board.commit(contour)
            contour.paddles.append((_towards(end, angle, -style.paddle_length), end))
            contour.strokes.append((end, back))
            contour.pivot, contour.angle, contour.pending = pivot, angle, (end, back)
            return True
    return False


def _grow_targets(
    rng: np.random.Generator, board: Board, num_paddles: int
) -> tuple[Contour, Contour] | None:
    """Two target contours starting ``seed_distance`` apart; None when they get stuck."""
    style = board.style
    first = second = None
    for _ in range(_SEED_TRIES):
        angle = _random_angle(rng)
        tail = _free_tail(rng, board, angle, edge=2 * style.seed_distance)
        if tail is None:
            return None
        first = _seed(board, tail, angle)
        if first is not None:
            break
    if first is None:
        return None
    for _ in range(_SEED_TRIES):
        direction = int(rng.integers(0, 360)) * math.pi / 180
        row, col = first.origin
        tail = (
            round(row + style.seed_distance * math.sin(direction)),
            round(col + style.seed_distance * math.cos(direction)),
        )
        second = _seed(board, tail, _random_angle(rng))
        if second is not None:
            break
    if second is None:
        return None
    for _ in range(num_paddles - 1):
        for contour in (first, second):
            if not _extend(rng, board, contour):
                return None
    board.commit(first)
    board.commit(second)
    return first, second


def _grow_distractor(rng: np.random.Generator, board: Board, num_paddles: int) -> Contour | None:
    """One distractor grown on ``board`` (changed only on success); None when it fails."""
    style = board.style
    res, pad = style.resolution, board.pad
    if np.mean(board.mask[pad : pad + res, pad : pad + res] <= _FREE) < _MIN_FREE_FRACTION:
        return None
    trial = board.copy()
    for _ in range(_SEED_TRIES):
        angle = _random_angle(rng)
        tail = _free_tail(rng, trial, angle, edge=1)
        if tail is None:
            return None
        contour = _seed(trial, tail, angle)
        if contour is not None:
            break
    else:
        return None
    for _ in range(num_paddles - 1):
        if not _extend(rng, trial, contour):
            return None
    trial.commit(contour)
    board.mask, board.near = trial.mask, trial.near
    return contour


def layout_scene(
    rng: np.random.Generator,
    style: PathfinderStyle,
    contour_length: int,
    distractor_length: int,
    num_distractors: int,
) -> Scene:
    """Targets of ``contour_length`` paddles and up to ``num_distractors`` distractors."""
    margin = style.margins[int(rng.integers(len(style.margins)))]
    for _ in range(_PAIR_TRIES):
        board = Board(style, margin)
        targets = _grow_targets(rng, board, contour_length)
        if targets is not None:
            break
    else:
        raise RuntimeError(
            f"Could not place the two Pathfinder target contours ({style.resolution}px, "
            f"{contour_length} paddles) in {_PAIR_TRIES} tries."
        )
    distractors = []
    for _ in range(num_distractors):
        for _ in range(_DISTRACTOR_TRIES):
            contour = _grow_distractor(rng, board, distractor_length)
            if contour is not None:
                distractors.append(contour)
                break
    return Scene(targets=targets, distractors=tuple(distractors), margin=margin)
