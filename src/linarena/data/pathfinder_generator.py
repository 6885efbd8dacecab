"""Pathfinder / Path-X generator after the original one (Linsley et al. 2018; LRA settings).

Each image holds two target contours and shorter distractor contours, all dashed (chains of
short "paddles", see ``pathfinder_curves``), plus two marker discs. One marker sits at the start
of target A; the other at the end of A (label 1, "connected") or at the end of target B
(label 0). Both targets start ``seed_distance`` px apart, so the distance between the markers
has the same distribution for both labels, as in the original.

Settings per resolution (``pathfinder_stencils.STYLES``, from the LRA repository's
``lra_benchmarks/data/pathfinder.py`` and the defaults of ``snakes2``):

==========  ======  ======  =========  =========  ======  ====  ==========  ===========
resolution  paddle  margin  thickness  marker r.  seed d  cont  distractor  contrast
                                                              paddles     target/distr.
==========  ======  ======  =========  =========  ======  ====  ==========  ===========
32          2       1       0.5        1.5        7       1.0   20          1.5 / 2.0
64          5       1       1.0        2.5        12      1.8   22          0.8 / 0.8
128         5       2 or 3  1.5        3          20      1.8   35          0.9 / 0.9
256         5       3       2.0        5          27      1.8   30          1.0 / 1.0
==========  ======  ======  =========  =========  ======  ====  ==========  ===========

Contour length (paddles per target) is 6, 9 or 14 for ``curv_baseline``,
``curv_contour_length_9`` and ``curv_contour_length_14``; distractors have
``contour_length // 3`` paddles and there are at most ``budget // distractor_length`` of them
(at 32 px most fail to start, as in the original: ``pathfinder_curves``). Paddles are drawn at
2x and shrunk with an 8-bit Lanczos filter; markers are discs drawn the same way; the image is
the maximum of all of them, scaled so that its brightest pixel is 255, saved as 8-bit grey PNG.

Labels are exactly balanced: images 2j and 2j+1 get labels {0, 1} in a random order, so any range
of images starting at an even index with an even count is exactly 50/50. Image i depends only on
(seed, resolution, difficulty, i).
"""

from __future__ import annotations

import json
import shutil
from collections.abc import Iterator
from concurrent.futures import ProcessPoolExecutor, as_completed
from dataclasses import dataclass
from pathlib import Path

from PIL import Image

from linarena.data.pathfinder_render import (
    DIFFICULTIES,
    RESOLUTIONS,
    PathfinderSample,
    check_resolution_and_difficulty,
    contour_counts,
    render_sample,
)
from linarena.data.progress import progress as progress_bar
from linarena.files import atomic_path, build_lock, remove_stale_temps, write_text_atomic
from linarena.system import available_cpus

__all__ = [
    "DIFFICULTIES",
    "GENERATOR_VERSION",
    "RESOLUTIONS",
    "PathfinderSample",
    "check_resolution_and_difficulty",
    "generate_pathfinder",
    "render_sample",
]

# Stored in the marker files and in the data cache keys: bump it whenever the images a seed
# produces change, so that neither generated folders nor tensor caches of older ones are reused.
GENERATOR_VERSION = 3
_GENERATOR = {"generator": "linarena.data.pathfinder_generator", "version": GENERATOR_VERSION}
_COMPLETE, _IN_PROGRESS = ".complete", ".in_progress"


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


def _write_folder(job: _FolderJob) -> int:
    """Write the folder's images, then its metadata file (which marks the folder as done).

    Images are renamed into place (atomic, not fsynced: one fsync per image would dominate the
    run time); the metadata file is fsynced.
    """
    folder_dir = job.base / "imgs" / str(job.folder)
    folder_dir.mkdir(parents=True, exist_ok=True)
    length, distractor_length, _ = contour_counts(job.resolution, job.difficulty)
    lines = []
    for index in range(job.start, job.stop):
        sample = render_sample(index, job.resolution, job.difficulty, job.seed)
        name = f"sample_{index}.png"
        with atomic_path(folder_dir / name) as temporary:
            Image.fromarray(sample.image).save(temporary, format="PNG")
        style = sample.style
        # The original's fields: continuity, contour and distractor length, paddle length,
        # thickness and margin, number of paddle contrasts.
        lines.append(
            f"imgs/{job.folder} {name} {index} {sample.label} {style.continuity} {length} "
            f"{distractor_length} {style.paddle_length} {style.thickness} {sample.margin} 1\n"
        )
    write_text_atomic(job.base / "metadata" / f"{job.folder}.npy", "".join(lines))
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
        write_text_atomic(in_progress, marker.read_text())
        marker.unlink()
    if _read_json(in_progress) == params:
        # Resume. Under the build lock, temporary files belong to killed runs.
        folders = [base, base / "metadata", *(base / "imgs").glob("*")]
        for folder in folders:
            remove_stale_temps(folder)
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
    remove_stale_temps(base)
    write_text_atomic(in_progress, json.dumps(params))


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
    ``imgs/<k> sample_<i>.png <i> <label> <continuity> <contour_length> <distractor_length>
    <paddle_length> <paddle_thickness> <paddle_margin> 1`` (the original generator's fields). A
    ``.complete`` marker (JSON of the parameters) is written last; when it matches, nothing is
    done. An interrupted run with the same parameters is resumed; files from a run with other
    parameters are replaced. The build runs under a ``build_lock``: a second job building the same
    folder waits for the first, then finds it complete. ``workers`` processes (default: all CPUs;
    1 = this process) each write whole folders.
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

    def complete() -> bool:
        return _read_json(base / _COMPLETE) == params and all(p.exists() for p in metadata_files)

    if complete():
        return
    # A second job building the same data waits here, then finds it complete.
    with build_lock(base):
        if complete():
            return
        _prepare_directory(base, params)
        (base / "metadata").mkdir(exist_ok=True)
        jobs = [
            _FolderJob(
                base,
                k,
                start,
                min(start + images_per_folder, num_images),
                resolution,
                difficulty,
                seed,
            )
            for k, start in enumerate(starts)
            if not metadata_files[k].exists()
        ]
        done = num_images - sum(job.stop - job.start for job in jobs)
        with progress_bar(
            total=num_images,
            unit="img",
            disable=not progress,
            desc=f"pathfinder{resolution}/{difficulty}",
        ) as bar:
            bar.update(done)
            for count in _run_jobs(jobs, workers):
                bar.update(count)
        write_text_atomic(base / _COMPLETE, json.dumps(params))
        (base / _IN_PROGRESS).unlink()
