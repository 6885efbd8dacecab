"""Pathfinder generator: labels readable from the pixels, balance, determinism, official layout."""

from __future__ import annotations

import json
from collections import deque
from itertools import pairwise
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

import linarena.data.pathfinder_generator as generator
from linarena.data.pathfinder_generator import (
    DIFFICULTIES,
    PathfinderSample,
    generate_pathfinder,
    render_sample,
)

# Any level from 1 to about 100 separates the curves (module docstring); test in the middle.
THRESHOLD = 64
CASES = [(32, "curv_baseline"), (32, "curv_contour_length_14"), (64, "curv_contour_length_14")]


def connected_components(mask: np.ndarray) -> np.ndarray:
    """8-connected component ids of a boolean image (0 = background): (H, W) int."""
    labels = np.zeros(mask.shape, dtype=int)
    height, width = mask.shape
    next_label = 0
    for row, col in zip(*np.nonzero(mask), strict=True):
        if labels[row, col]:
            continue
        next_label += 1
        labels[row, col] = next_label
        queue = deque([(row, col)])
        while queue:
            r, c = queue.popleft()
            for rr in range(max(r - 1, 0), min(r + 2, height)):
                for cc in range(max(c - 1, 0), min(c + 2, width)):
                    if mask[rr, cc] and not labels[rr, cc]:
                        labels[rr, cc] = next_label
                        queue.append((rr, cc))
    return labels


def dot_components(sample: PathfinderSample) -> tuple[int, int]:
    labels = connected_components(sample.image >= THRESHOLD)
    first, second = (labels[int(y), int(x)] for x, y in sample.dots)
    return first, second


def dense_points(curve: np.ndarray, step: float = 0.1) -> np.ndarray:
    """Points along a polyline at most ``step`` apart: (P, 2)."""
    pieces = []
    for start, end in pairwise(curve):
        count = int(np.ceil(np.linalg.norm(end - start) / step)) + 1
        pieces.append(start + np.linspace(0, 1, count)[:, None] * (end - start))
    return np.concatenate(pieces)


def distance_to_curve(points: np.ndarray, curve: np.ndarray) -> float:
    """Smallest distance from any of the points (P, 2) to the polyline (V, 2)."""
    starts, ends = curve[None, :-1], curve[None, 1:]
    direction = ends - starts
    t = np.sum((points[:, None] - starts) * direction, axis=-1) / np.sum(direction**2, axis=-1)
    nearest = starts + np.clip(t, 0, 1)[..., None] * direction
    return float(np.min(np.linalg.norm(points[:, None] - nearest, axis=-1)))


@pytest.mark.parametrize(("resolution", "difficulty"), CASES)
def test_label_matches_connectivity_on_the_pixels(resolution: int, difficulty: str) -> None:
    for index in range(24):
        sample = render_sample(index, resolution, difficulty, seed=3)
        first, second = dot_components(sample)
        assert first and second, f"image {index}: a dot centre is not on a bright pixel"
        assert (first == second) == bool(sample.label), f"image {index}: label {sample.label}"


@pytest.mark.parametrize(("resolution", "difficulty"), CASES)
def test_dots_sit_on_the_right_curve_ends(resolution: int, difficulty: str) -> None:
    for index in range(24):
        sample = render_sample(index, resolution, difficulty, seed=3)
        ends_a, ends_b = sample.curves[0][[0, -1]], sample.curves[1][[0, -1]]
        first, second = sample.dots
        assert np.any(np.all(ends_a == first, axis=1))
        if sample.label == 1:
            assert np.all(np.sort(ends_a, axis=0) == np.sort(sample.dots, axis=0))
        else:
            assert np.any(np.all(ends_b == second, axis=1))


@pytest.mark.parametrize(("resolution", "difficulty"), CASES)
def test_curves_are_smooth_and_keep_their_clearances(resolution: int, difficulty: str) -> None:
    for index in range(6):
        sample = render_sample(index, resolution, difficulty, seed=5)
        geometry = sample.geometry
        assert len(sample.curves[0]) == len(sample.curves[1]) == DIFFICULTIES[difficulty] + 1
        assert len(sample.curves) > 2, "no distractors"
        for curve in sample.curves:
            steps = np.diff(curve, axis=0)
            np.testing.assert_allclose(np.linalg.norm(steps, axis=1), geometry.segment_length)
            headings = np.arctan2(steps[:, 1], steps[:, 0])
            turns = np.angle(np.exp(1j * np.diff(headings)))
            assert np.all(np.abs(turns) <= np.deg2rad(45) + 1e-9)
            assert curve.min() >= geometry.border - 0.5
            assert curve.max() <= resolution - geometry.border + 0.5
        # Sampling one curve every 0.1 px overestimates distances by at most 0.05 px.
        for i, curve in enumerate(sample.curves):
            points = dense_points(curve)
            for other in sample.curves[:i]:
                assert distance_to_curve(points, other) >= geometry.stroke_clearance - 0.05
        # Each dot keeps clear of every curve but the one it sits on.
        for dot, carrier in zip(sample.dots, (0, 1 - sample.label), strict=True):
            for k, curve in enumerate(sample.curves):
                if k != carrier:
                    assert distance_to_curve(dot[None], curve) >= geometry.dot_clearance
        dot_gap = np.linalg.norm(sample.dots[0] - sample.dots[1])
        assert dot_gap >= geometry.dot_dot_clearance - 0.01


def test_labels_are_exactly_balanced_in_random_order() -> None:
    labels = np.array([render_sample(i, 32, "curv_baseline").label for i in range(200)])
    assert labels.sum() == 100
    assert np.all(labels[0::2] + labels[1::2] == 1)
    first_of_pair = labels[0::2].sum()
    assert 30 <= first_of_pair <= 70, "the order within pairs should look random"


def test_images_are_uint8_antialiased_with_visible_dots() -> None:
    for resolution in (32, 64, 128):
        sample = render_sample(0, resolution, "curv_contour_length_9")
        image = sample.image
        assert image.dtype == np.uint8 and image.shape == (resolution, resolution)
        ink = np.mean(image >= THRESHOLD)
        assert 0.05 < ink < 0.6, f"{resolution}px: {ink:.0%} of pixels are bright"
        assert np.any((image > 20) & (image < 235)), "no anti-aliased grey levels"
        for x, y in sample.dots:
            assert image[int(y), int(x)] >= 200


def test_same_index_gives_the_same_image() -> None:
    first = render_sample(7, 64, "curv_baseline", seed=1)
    again = render_sample(7, 64, "curv_baseline", seed=1)
    assert np.array_equal(first.image, again.image) and first.label == again.label
    assert not np.array_equal(first.image, render_sample(8, 64, "curv_baseline", seed=1).image)
    assert not np.array_equal(first.image, render_sample(7, 64, "curv_baseline", seed=2).image)


def test_invalid_arguments_are_explained() -> None:
    with pytest.raises(ValueError, match="curv_contour_length_14"):
        render_sample(0, 32, "hard")
    with pytest.raises(ValueError, match="32, 64, 128"):
        render_sample(0, 48, "curv_baseline")


def generate(root: Path, **overrides) -> Path:
    arguments = dict(
        resolution=32,
        difficulty="curv_baseline",
        num_images=12,
        seed=4,
        workers=1,
        images_per_folder=5,
        progress=False,
    )
    generate_pathfinder(root, **{**arguments, **overrides})
    return root / "pathfinder32" / "curv_baseline"


def all_files(base: Path) -> dict[str, bytes]:
    return {
        str(path.relative_to(base)): path.read_bytes() for path in base.rglob("*") if path.is_file()
    }


def test_generate_writes_the_official_layout(tmp_path: Path) -> None:
    base = generate(tmp_path)
    folders = {0: range(0, 5), 1: range(5, 10), 2: range(10, 12)}
    assert sorted(p.name for p in (base / "metadata").iterdir()) == ["0.npy", "1.npy", "2.npy"]
    for folder, indices in folders.items():
        names = sorted(p.name for p in (base / "imgs" / str(folder)).iterdir())
        assert names == sorted(f"sample_{i}.png" for i in indices)
        lines = (base / "metadata" / f"{folder}.npy").read_text().splitlines()
        assert len(lines) == len(indices)
        for line, index in zip(lines, indices, strict=True):
            fields = line.split(" ")
            assert fields[:3] == [f"imgs/{folder}", f"sample_{index}.png", str(index)]
            expected = render_sample(index, 32, "curv_baseline", seed=4)
            assert int(fields[3]) == expected.label
            with Image.open(base / fields[0] / fields[1]) as png:
                assert png.mode == "L"
                assert np.array_equal(np.asarray(png), expected.image)
    marker = json.loads((base / ".complete").read_text())
    assert marker["num_images"] == 12 and marker["seed"] == 4 and marker["images_per_folder"] == 5
    assert not (base / ".in_progress").exists()
    assert not [p for p in base.rglob("*.tmp")]


def test_generate_is_idempotent(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    base = generate(tmp_path)
    before = all_files(base)

    def fail(*args, **kwargs):
        raise AssertionError("a completed data set was generated again")

    monkeypatch.setattr(generator, "render_sample", fail)
    generate(tmp_path)
    assert all_files(base) == before


def test_worker_count_does_not_change_the_files(tmp_path: Path) -> None:
    serial = all_files(generate(tmp_path / "serial", workers=1))
    parallel = all_files(generate(tmp_path / "parallel", workers=2))
    assert serial == parallel


def test_interrupted_run_is_resumed(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    rendered: list[int] = []
    real_render = generator.render_sample

    def render_until_image_7(index: int, *args, **kwargs):
        if index == 7:
            raise KeyboardInterrupt
        rendered.append(index)
        return real_render(index, *args, **kwargs)

    monkeypatch.setattr(generator, "render_sample", render_until_image_7)
    with pytest.raises(KeyboardInterrupt):
        generate(tmp_path / "resumed")
    base = tmp_path / "resumed" / "pathfinder32" / "curv_baseline"
    assert not (base / ".complete").exists()

    def counting_render(index: int, *args, **kwargs):
        rendered.append(index)
        return real_render(index, *args, **kwargs)

    monkeypatch.setattr(generator, "render_sample", counting_render)
    rendered.clear()
    generate(tmp_path / "resumed")
    assert rendered == list(range(5, 12)), "finished folder 0 should not be redone"
    assert all_files(base) == all_files(generate(tmp_path / "clean"))


def test_other_parameters_replace_the_old_files(tmp_path: Path) -> None:
    generate(tmp_path, num_images=12)
    base = generate(tmp_path, num_images=6, seed=9)
    assert sorted(p.name for p in (base / "metadata").iterdir()) == ["0.npy", "1.npy"]
    assert sorted(p.name for p in (base / "imgs").iterdir()) == ["0", "1"]
    assert json.loads((base / ".complete").read_text())["seed"] == 9
    assert all_files(base) == all_files(generate(tmp_path / "fresh", num_images=6, seed=9))


def test_foreign_files_are_not_overwritten(tmp_path: Path) -> None:
    base = tmp_path / "pathfinder32" / "curv_baseline"
    (base / "metadata").mkdir(parents=True)
    (base / "metadata" / "0.npy").write_text("imgs/0 sample_0.png 0 1\n")
    with pytest.raises(FileExistsError, match="did not write"):
        generate(tmp_path)
    assert (base / "metadata" / "0.npy").read_text() == "imgs/0 sample_0.png 0 1\n"
