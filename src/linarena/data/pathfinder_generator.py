"""Pathfinder generator in the spirit of Linsley et al. 2018 (the LRA Pathfinder / Path-X task).

Each image holds two long target curves A and B and a few shorter distractor curves, all drawn
white on black, plus two marker dots. One dot sits at an end of A; the other sits at the far end
of A (label 1, "connected") or at an end of B (label 0). Both classes contain the same kinds of
curves; only the placement of the second dot differs.

Curves are chains of straight segments of equal length. Each next direction is the previous one
turned by an angle drawn from 9 candidates evenly spaced in [-40, 40] degrees, all shifted by one
random jitter of up to +-5 degrees, with weight exp(-turn^2 / (2 * (20 deg)^2)), among the
candidates that stay inside the image and keep clear of everything placed before (other curves,
dots, and the curve's own earlier part). A curve that gets stuck grows on from its other end, and
is restarted elsewhere if that end is stuck too. Targets are placed first (a scene whose targets
do not fit is redrawn), then distractors; a distractor that finds no room in 8 attempts is left
out, so crowded images (mostly 128 px, contour length 14) can hold a few fewer.

Sizes, with s = resolution / 32, in pixels of the final image. The layout scales with the
image (a 128 px image is a finer drawing of the same kind of scene), lines and dots grow more
slowly so that 32 px images keep lines 1 px wide and dots that stand out, and the distractor
count grows with the free area:

=====================================  =========================  ====  =====  =====
quantity                               rule                       32    64     128
=====================================  =========================  ====  =====  =====
segment length                         2 s                        2     4      8
target curve length (14 segments)      14 x segment length        28    56     112
line width                             sqrt(s), to 1/4 px         1     1.5    2
dot radius                             1.5 sqrt(s)                1.5   2.12   3
background gap between any two marks   2.25                       2.25  2.25   2.25
distractor curves (at most)            table                      4     12     30
=====================================  =========================  ====  =====  =====

The contour length (segments per target curve) is 6, 9 or 14 for ``curv_baseline``,
``curv_contour_length_9`` and ``curv_contour_length_14``; distractors have a third as many
segments (at least 2). Curve centre lines keep line width + gap apart, a dot centre keeps
dot radius + half a line width + gap from other curves, and 2 dot radii + gap from the other
dot (minima: the occupancy grid adds up to 0.4 px at 32 px, 0.8 px at 128 px). The gap is
enough for at least one clean background pixel between any two marks after anti-aliasing, so
thresholding an image at any level from 1 to about 100 (of 255) and taking 8-connected
components recovers the curves: the label can be read off the pixels.

Drawing: Pillow at 4x the resolution (round joints and caps), then a box-filter downsample, which
anti-aliases; saved as 8-bit grey PNG.

Labels are exactly balanced: images 2j and 2j+1 get labels {0, 1} in a random order, so any
range of images starting at an even index with an even count is exactly 50/50. Image i's content
depends only on (seed, resolution, difficulty, i).
"""

from __future__ import annotations

import io
import json
import os
import shutil
from collections.abc import Iterator
from concurrent.futures import ProcessPoolExecutor, as_completed
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from PIL import Image, ImageDraw
from tqdm.auto import tqdm

from linarena.data.pathfinder_curves import SceneGeometry, layout_scene
from linarena.system import available_cpus

DIFFICULTIES: dict[str, int] = {
    "curv_baseline": 6,
    "curv_contour_length_9": 9,
    "curv_contour_length_14": 14,
}
RESOLUTIONS: tuple[int, ...] = (32, 64, 128)
_NUM_DISTRACTORS = {32: 4, 64: 12, 128: 30}
_SUPERSAMPLE = 4
_MAX_SCENE_TRIES = 200
# Stored in the marker files; bump the version whenever the images a seed produces change.
_GENERATOR = {"generator": "linarena.data.pathfinder_generator", "version": 1}
_COMPLETE, _IN_PROGRESS = ".complete", ".in_progress"
# Separate random streams so labels and content never share draws.
_CONTENT_STREAM, _LABEL_STREAM = 0, 1


@dataclass(frozen=True)
class PathfinderSample:
    """One image and the geometry that determines its label.

    image: (resolution, resolution) uint8. curves: target A, target B, then distractors, each an
    array (num_vertices, 2) of (x, y) pixel coordinates (pixel (row, col) covers
    [col, col + 1] x [row, row + 1]). dots: (2, 2), the (x, y) centres of the two markers; the
    first is an end of curve A. label: 1 when the second dot is on A, 0 when it is on B.
    """

    image: np.ndarray
    label: int
    curves: tuple[np.ndarray, ...]
    dots: np.ndarray
    geometry: SceneGeometry


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


def scene_geometry(resolution: int, difficulty: str) -> SceneGeometry:
    """The sizes and counts used for images of this resolution and difficulty (see module doc)."""
    check_resolution_and_difficulty(resolution, difficulty)
    scale = resolution / 32
    num_segments = DIFFICULTIES[difficulty]
    return SceneGeometry(
        resolution=resolution,
        num_segments=num_segments,
        segment_length=2.0 * scale,
        line_width=round(np.sqrt(scale) * _SUPERSAMPLE) / _SUPERSAMPLE,
        dot_radius=1.5 * np.sqrt(scale),
        gap=2.25,
        num_distractors=_NUM_DISTRACTORS[resolution],
        distractor_segments=max(2, num_segments // 3),
        max_turn=np.deg2rad(40.0),
        turn_sigma=np.deg2rad(20.0),
        cell_size=np.sqrt(scale) / 3,
    )


def _sample_label(index: int, resolution: int, difficulty: str, seed: int = 0) -> int:
    """Label of image ``index``: each aligned pair of images holds one of each class."""
    pair_rng = np.random.default_rng(
        [seed, resolution, DIFFICULTIES[difficulty], _LABEL_STREAM, index // 2]
    )
    first_label = int(pair_rng.integers(2))
    return first_label if index % 2 == 0 else 1 - first_label


def _draw(geometry: SceneGeometry, curves: tuple[np.ndarray, ...], dots: np.ndarray) -> np.ndarray:
    """Render white curves and dots on black, anti-aliased: (resolution, resolution) uint8."""
    size = geometry.resolution * _SUPERSAMPLE
    canvas = Image.new("L", (size, size), 0)
    pen = ImageDraw.Draw(canvas)
    width = round(geometry.line_width * _SUPERSAMPLE)

    def disc(centre: np.ndarray, radius: float) -> None:
        x, y = centre * _SUPERSAMPLE - 0.5  # continuous coordinates -> canvas pixel centres
        pen.ellipse([x - radius, y - radius, x + radius, y + radius], fill=255)

    for curve in curves:
        points = curve * _SUPERSAMPLE - 0.5
        pen.line([tuple(point) for point in points], fill=255, width=width, joint="curve")
        for end in curve[[0, -1]]:
            disc(end, width / 2)
    for dot in dots:
        disc(dot, geometry.dot_radius * _SUPERSAMPLE)
    small = canvas.resize((geometry.resolution, geometry.resolution), Image.Resampling.BOX)
    return np.asarray(small, dtype=np.uint8)


def render_sample(index: int, resolution: int, difficulty: str, seed: int = 0) -> PathfinderSample:
    """Generate image ``index`` of the (seed, resolution, difficulty) data set."""
    check_resolution_and_difficulty(resolution, difficulty)
    if index < 0 or seed < 0:
        raise ValueError(f"index and seed must be >= 0, got index={index}, seed={seed}.")
    geometry = scene_geometry(resolution, difficulty)
    label = _sample_label(index, resolution, difficulty, seed)
    rng = np.random.default_rng(
        [seed, resolution, DIFFICULTIES[difficulty], _CONTENT_STREAM, index]
    )
    for _ in range(_MAX_SCENE_TRIES):
        scene = layout_scene(rng, geometry)
        if scene is not None:
            break
    else:
        raise RuntimeError(
            f"Could not lay out Pathfinder image {index} ({resolution}px, {difficulty}, seed {seed}) "
            f"in {_MAX_SCENE_TRIES} tries; the scene parameters are too crowded."
        )
    # Which target is A (so placement order is no cue), which end of A carries the first dot, and
    # which end of B the second when the label is 0.
    swap, end_a, end_b = rng.integers(2, size=3)
    curve_a, curve_b = scene.targets[::-1] if swap else scene.targets
    first_dot = curve_a[-1] if end_a else curve_a[0]
    if label == 1:
        second_dot = curve_a[0] if end_a else curve_a[-1]
    else:
        second_dot = curve_b[-1] if end_b else curve_b[0]
    curves = (curve_a, curve_b, *scene.distractors)
    dots = np.stack([first_dot, second_dot])
    image = _draw(geometry, curves, dots)
    return PathfinderSample(image=image, label=label, curves=curves, dots=dots, geometry=geometry)


@dataclass(frozen=True)
class _FolderJob:
    """Images ``start`` ... ``stop - 1`` of one data set, written to folder ``folder``."""

    base: Path
    folder: int
    start: int
    stop: int
    resolution: int
    difficulty: str
    seed: int


def _write_atomic(path: Path, data: bytes) -> None:
    temporary = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    temporary.write_bytes(data)
    os.replace(temporary, path)


def _png_bytes(image: np.ndarray) -> bytes:
    buffer = io.BytesIO()
    Image.fromarray(image).save(buffer, format="PNG")
    return buffer.getvalue()


def _write_folder(job: _FolderJob) -> int:
    """Write the folder's images, then its metadata file (which marks the folder as done)."""
    folder_dir = job.base / "imgs" / str(job.folder)
    folder_dir.mkdir(parents=True, exist_ok=True)
    lines = []
    for index in range(job.start, job.stop):
        sample = render_sample(index, job.resolution, job.difficulty, job.seed)
        name = f"sample_{index}.png"
        _write_atomic(folder_dir / name, _png_bytes(sample.image))
        geometry = sample.geometry
        lines.append(
            f"imgs/{job.folder} {name} {index} {sample.label} {geometry.num_segments} "
            f"{geometry.distractor_segments} {len(sample.curves) - 2}\n"
        )
    _write_atomic(job.base / "metadata" / f"{job.folder}.npy", "".join(lines).encode())
    return job.stop - job.start


def _read_json(path: Path) -> dict | None:
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return None


def _prepare_directory(base: Path, params: dict) -> None:
    """Make ``base`` ready for a run with ``params``: resume a matching run, else start afresh.

    The order of steps keeps the directory consistent if interrupted: a metadata file exists only
    for a folder whose images are all written, and an ownership file (the marker or the
    in-progress file) always names the parameters of the files present.
    """
    marker, in_progress = base / _COMPLETE, base / _IN_PROGRESS
    if marker.exists():
        _write_atomic(in_progress, marker.read_bytes())
        marker.unlink()
    if _read_json(in_progress) == params:
        return
    subdirectories = [base / "metadata", base / "imgs"]  # metadata first: see above
    foreign = not in_progress.exists() and any(
        path.is_dir() and any(path.iterdir()) for path in subdirectories
    )
    if foreign:
        raise FileExistsError(
            f"{base} holds Pathfinder files that this generator did not write (no "
            f"{_COMPLETE} or {_IN_PROGRESS} file). Move or delete {base} to generate there."
        )
    for path in subdirectories:
        shutil.rmtree(path, ignore_errors=True)
    base.mkdir(parents=True, exist_ok=True)
    _write_atomic(in_progress, json.dumps(params).encode())


def _run_jobs(jobs: list[_FolderJob], workers: int) -> Iterator[int]:
    """Run the folder jobs in this process or a process pool; yields images done per job."""
    if workers == 1 or len(jobs) <= 1:
        yield from map(_write_folder, jobs)
        return
    with ProcessPoolExecutor(max_workers=min(workers, len(jobs))) as pool:
        for future in as_completed([pool.submit(_write_folder, job) for job in jobs]):
            yield future.result()


def generate_pathfinder(
    root: Path,
    resolution: int,
    difficulty: str,
    num_images: int,
    seed: int = 0,
    workers: int | None = None,
    images_per_folder: int = 1000,
    progress: bool = True,
) -> None:
    """Write a Pathfinder data set in the layout of the official LRA release.

    Files: ``root/pathfinder{resolution}/{difficulty}/imgs/<k>/sample_<i>.png`` and
    ``.../metadata/<k>.npy`` (plain text despite the extension), folder k holding images
    ``k * images_per_folder`` up to the next folder's first. Each metadata line reads
    ``imgs/<k> sample_<i>.png <i> <label> <contour_length> <distractor_segments>
    <num_distractors>``. A ``.complete`` marker (JSON of the parameters) is written last; when it
    matches, nothing is done. An interrupted run with the same parameters is resumed; files from a
    run with other parameters are replaced. ``workers`` processes (default: all CPUs; 1 = this
    process) each write whole folders.
    """
    check_resolution_and_difficulty(resolution, difficulty)
    if num_images < 1 or images_per_folder < 1 or seed < 0:
        raise ValueError(
            f"Need num_images >= 1, images_per_folder >= 1 and seed >= 0; got {num_images}, "
            f"{images_per_folder} and {seed}."
        )
    if workers is None:
        workers = available_cpus()
    if workers < 1:
        raise ValueError(f"workers must be >= 1 (or None for all CPUs), got {workers}.")
    base = Path(root) / f"pathfinder{resolution}" / difficulty
    params = {
        **_GENERATOR,
        "resolution": resolution,
        "difficulty": difficulty,
        "num_images": num_images,
        "seed": seed,
        "images_per_folder": images_per_folder,
    }
    starts = range(0, num_images, images_per_folder)
    metadata_files = [base / "metadata" / f"{k}.npy" for k in range(len(starts))]
    if _read_json(base / _COMPLETE) == params and all(path.exists() for path in metadata_files):
        return
    _prepare_directory(base, params)
    (base / "metadata").mkdir(exist_ok=True)
    jobs = [
        _FolderJob(
            base, k, start, min(start + images_per_folder, num_images), resolution, difficulty, seed
        )
        for k, start in enumerate(starts)
        if not metadata_files[k].exists()
    ]
    done = num_images - sum(job.stop - job.start for job in jobs)
    with tqdm(
        total=num_images,
        initial=done,
        unit="img",
        disable=not progress,
        desc=f"pathfinder{resolution}/{difficulty}",
    ) as bar:
        for count in _run_jobs(jobs, workers):
            bar.update(count)
    _write_atomic(base / _COMPLETE, json.dumps(params).encode())
    (base / _IN_PROGRESS).unlink()
