"""Curve geometry for the Pathfinder generator: smooth polylines that keep clear of each other.

Coordinates are continuous pixel coordinates ``(x, y)``: pixel ``(row, col)`` covers
``[col, col + 1] x [row, row + 1]`` of an image ``resolution`` pixels wide. A curve is an array of
shape ``(num_segments + 1, 2)``: its vertices, consecutive ones ``segment_length`` apart.

Collisions are tested against occupancy masks on a grid finer than the pixels: a cell is blocked
when its centre lies within a clearance (plus a slack that covers the cell size and the spacing
of the points tested along a segment) of something already placed. A curve therefore keeps at
least the nominal clearance from everything else; the slack only makes it a little larger.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

# Candidate turns for each next segment, as fractions of the largest turn.
_TURNS = np.linspace(-1.0, 1.0, 9)
# Candidate directions for a curve's first segment (plus a random offset).
_START_HEADINGS = np.arange(12) * (2 * np.pi / 12)
_START_WEIGHTS = np.ones(12)
_START_POINT_DRAWS = 64
_CURVE_TRIES = 8


@dataclass(frozen=True)
class SceneGeometry:
    """Sizes (in pixels of the final image) and counts that define a Pathfinder scene."""

    resolution: int
    num_segments: int  # segments per target curve (the contour length)
    segment_length: float
    line_width: float
    dot_radius: float
    gap: float  # minimum background between any two strokes or dots
    num_distractors: int
    distractor_segments: int
    max_turn: float  # radians, largest turn between consecutive segments
    turn_sigma: float  # radians: turn weights fall off as exp(-turn^2 / (2 sigma^2))
    cell_size: float  # side of an occupancy-mask cell

    @property
    def stroke_clearance(self) -> float:
        """Centre line to centre line of two different curves."""
        return self.line_width + self.gap

    @property
    def dot_clearance(self) -> float:
        """Dot centre to any other curve's centre line."""
        return self.dot_radius + self.line_width / 2 + self.gap

    @property
    def dot_dot_clearance(self) -> float:
        return 2 * self.dot_radius + self.gap

    @property
    def turn_weights(self) -> np.ndarray:
        """Sampling weights of the candidate turns ``_TURNS * max_turn``: (len(_TURNS),)."""
        return np.exp(-0.5 * (_TURNS * self.max_turn / self.turn_sigma) ** 2)

    @property
    def border(self) -> float:
        """Vertices keep this far from the image edge so strokes and dots stay inside."""
        return max(self.dot_radius, self.line_width / 2) + 0.5


@dataclass(frozen=True)
class Scene:
    """Target curves A and B (``targets[0]``, ``targets[1]``) and the distractor curves."""

    targets: tuple[np.ndarray, np.ndarray]
    distractors: tuple[np.ndarray, ...]


def _segments_of(curve: np.ndarray) -> np.ndarray:
    return np.stack([curve[:-1], curve[1:]], axis=1)


class _Occupancy:
    """Masks of where a centre line (``stroke``) or a target end (``dot``) may no longer go."""

    def __init__(self, geometry: SceneGeometry) -> None:
        self.geometry = geometry
        self.cell = cell = geometry.cell_size
        samples_per_segment = int(np.ceil(geometry.segment_length / cell)) + 1
        self.sample_positions = np.linspace(0.0, 1.0, samples_per_segment)[None, :, None]
        # Points are tested at most one cell apart, and anywhere in a cell.
        self.slack = cell * (1 + np.sqrt(2)) / 2
        # The masks extend past the image by one segment (blocked, like the border) so that any
        # candidate segment from a vertex inside the image indexes them without clipping.
        self.offset = (int(np.ceil(geometry.segment_length / cell)) + 1) * cell
        size = int(np.ceil((geometry.resolution + 2 * self.offset) / cell))
        centres = (np.arange(size) + 0.5) * cell - self.offset
        inside = (centres >= geometry.border) & (centres <= geometry.resolution - geometry.border)
        self.stroke = ~(inside[:, None] & inside[None, :])
        self.dot = self.stroke.copy()

    def paint(self, segments: np.ndarray, masks_and_radii: list[tuple[np.ndarray, float]]) -> None:
        """Block, in each mask, the cells within its radius (+ slack) of each segment (N, 2, 2)."""
        reach = max(radius for _, radius in masks_and_radii) + self.slack
        thresholds = [(mask, (radius + self.slack) ** 2) for mask, radius in masks_and_radii]
        size, cell = self.stroke.shape[0], self.cell
        for (ax, ay), (bx, by) in (segments + self.offset).tolist():
            x0 = max(0, int((min(ax, bx) - reach) / cell))
            x1 = min(size, int((max(ax, bx) + reach) / cell) + 1)
            y0 = max(0, int((min(ay, by) - reach) / cell))
            y1 = min(size, int((max(ay, by) + reach) / cell) + 1)
            px = (np.arange(x0, x1) + 0.5) * cell - ax
            py = (np.arange(y0, y1)[:, None] + 0.5) * cell - ay
            dx, dy = bx - ax, by - ay
            t = (px * dx + py * dy) * (1.0 / max(dx * dx + dy * dy, 1e-12))
            np.minimum(np.maximum(t, 0.0, out=t), 1.0, out=t)
            squared = (px - t * dx) ** 2 + (py - t * dy) ** 2
            for mask, threshold in thresholds:
                mask[y0:y1, x0:x1] |= squared < threshold

    def add_curve(self, curve: np.ndarray, is_target: bool) -> None:
        geometry = self.geometry
        self.paint(
            _segments_of(curve),
            [(self.stroke, geometry.stroke_clearance), (self.dot, geometry.dot_clearance)],
        )
        if is_target:
            ends = np.stack([curve[[0, -1]], curve[[0, -1]]], axis=1)  # dots as 0-length segments
            self.paint(
                ends,
                [(self.stroke, geometry.dot_clearance), (self.dot, geometry.dot_dot_clearance)],
            )

    def blocked_points(self, mask: np.ndarray, points: np.ndarray) -> np.ndarray:
        """Whether each point (..., 2) falls in a blocked cell: (...,) bool."""
        cells = ((points + self.offset) * (1.0 / self.cell)).astype(np.intp)
        return mask[cells[..., 1], cells[..., 0]]

    def blocked_segments(self, mask: np.ndarray, segments: np.ndarray) -> np.ndarray:
        """Whether each segment (K, 2, 2) passes through a blocked cell: (K,) bool."""
        t = self.sample_positions
        points = segments[:, None, 0] + t * (segments[:, None, 1] - segments[:, None, 0])
        return self.blocked_points(mask, points).any(axis=1)


class _CurveGrowth:
    """One attempt at a smooth curve that avoids what is placed and its own earlier part."""

    def __init__(self, occupancy: _Occupancy, start: np.ndarray) -> None:
        self.occupancy = occupancy
        self.vertices = [start]
        geometry = occupancy.geometry
        # The last few segments of the curve itself are near its tip by construction.
        self.stroke_clearance = geometry.stroke_clearance
        self.exempt = int(np.ceil(geometry.stroke_clearance / geometry.segment_length)) + 1
        self._reset_own_mask()

    def _reset_own_mask(self) -> None:
        """Own mask: the placed obstacles plus the own segments outside the exempt window."""
        self.own_mask = self.occupancy.stroke.copy()
        self.painted = max(0, len(self.vertices) - 1 - self.exempt)
        if self.painted:
            segments = _segments_of(np.asarray(self.vertices[: self.painted + 1]))
            self.occupancy.paint(segments, [(self.own_mask, self.stroke_clearance)])

    def reverse(self) -> None:
        """Continue growing from the other end."""
        self.vertices.reverse()
        self._reset_own_mask()

    def valid(self, candidates: np.ndarray, is_last_target_segment: bool) -> np.ndarray:
        """Which candidate next segments (K, 2, 2) may extend the curve: (K,) bool."""
        occupancy, geometry = self.occupancy, self.occupancy.geometry
        valid = ~occupancy.blocked_segments(self.own_mask, candidates)
        if is_last_target_segment:
            # The final vertex may carry a dot: clear of other curves, dots and its own start.
            ends = candidates[:, 1]
            valid &= ~occupancy.blocked_points(occupancy.dot, ends)
            valid &= np.linalg.norm(ends - self.vertices[0], axis=1) >= geometry.dot_dot_clearance
        return valid

    def append(self, vertex: np.ndarray) -> None:
        self.vertices.append(vertex)
        leaving = len(self.vertices) - 1 - self.exempt
        if leaving > self.painted:
            segment = np.stack(self.vertices[self.painted : leaving + 1])
            self.occupancy.paint(_segments_of(segment), [(self.own_mask, self.stroke_clearance)])
            self.painted = leaving


def _next_segment_candidates(
    rng: np.random.Generator, geometry: SceneGeometry, vertices: list[np.ndarray]
) -> tuple[np.ndarray, np.ndarray]:
    """Candidate next segments (K, 2, 2) from the curve's last vertex and their weights (K,)."""
    if len(vertices) == 1:
        headings = rng.uniform(0, 2 * np.pi) + _START_HEADINGS
        weights = _START_WEIGHTS
    else:
        turns = _TURNS * geometry.max_turn
        spacing = turns[1] - turns[0]
        dx, dy = vertices[-1] - vertices[-2]
        # A shared jitter keeps the turn angles continuous, not restricted to a grid.
        headings = np.arctan2(dy, dx) + turns + rng.uniform(-spacing / 2, spacing / 2)
        weights = geometry.turn_weights
    candidates = np.empty((len(headings), 2, 2))
    candidates[:, 0] = vertices[-1]
    candidates[:, 1, 0] = vertices[-1][0] + geometry.segment_length * np.cos(headings)
    candidates[:, 1, 1] = vertices[-1][1] + geometry.segment_length * np.sin(headings)
    return candidates, weights


def _grow_curve(
    rng: np.random.Generator, occupancy: _Occupancy, num_segments: int, is_target: bool
) -> np.ndarray | None:
    """One attempt at a curve of ``num_segments`` segments; None when it gets stuck.

    The curve grows from one end; when that end is stuck it grows on from the other end.
    """
    geometry = occupancy.geometry
    # A target's start carries a dot, so it needs the dot clearance.
    start_mask = occupancy.dot if is_target else occupancy.stroke
    points = rng.uniform(0, geometry.resolution, size=(_START_POINT_DRAWS, 2))
    free = ~occupancy.blocked_points(start_mask, points)
    if not free.any():
        return None
    growth = _CurveGrowth(occupancy, points[np.argmax(free)])
    reversed_once = False
    while len(growth.vertices) <= num_segments:
        candidates, weights = _next_segment_candidates(rng, geometry, growth.vertices)
        is_last = is_target and len(growth.vertices) == num_segments
        valid = growth.valid(candidates, is_last)
        if valid.any():
            cumulative = np.cumsum(np.where(valid, weights, 0.0))
            choice = int(np.searchsorted(cumulative, rng.random() * cumulative[-1], side="right"))
            growth.append(candidates[choice, 1])
            continue
        stuck_end = growth.vertices[-1]
        if reversed_once or len(growth.vertices) == 1:
            return None
        # The stuck end becomes an end of the finished curve, so for a target it must fit a dot.
        if is_target and occupancy.blocked_points(occupancy.dot, stuck_end):
            return None
        growth.reverse()
        reversed_once = True
    return np.asarray(growth.vertices)


def layout_scene(rng: np.random.Generator, geometry: SceneGeometry) -> Scene | None:
    """Place targets A and B, then the distractors; None when the targets do not fit.

    A distractor that finds no room in ``_CURVE_TRIES`` attempts is left out, so crowded images
    can hold fewer than ``geometry.num_distractors`` distractors.
    """
    occupancy = _Occupancy(geometry)
    targets = []
    for _ in range(2):
        target = _place_curve(rng, occupancy, geometry.num_segments, is_target=True)
        if target is None:
            return None
        targets.append(target)
    distractors = []
    for _ in range(geometry.num_distractors):
        distractor = _place_curve(rng, occupancy, geometry.distractor_segments, is_target=False)
        if distractor is not None:
            distractors.append(distractor)
    return Scene(targets=(targets[0], targets[1]), distractors=tuple(distractors))


def _place_curve(
    rng: np.random.Generator, occupancy: _Occupancy, num_segments: int, is_target: bool
) -> np.ndarray | None:
    """Grow a curve (retrying a few times) and mark it as placed; None when it does not fit."""
    for _ in range(_CURVE_TRIES):
        curve = _grow_curve(rng, occupancy, num_segments, is_target)
        if curve is not None:
            occupancy.add_curve(curve, is_target)
            return curve
    return None
