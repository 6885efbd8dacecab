"""Cross-kernel reproduction check: rerun a sample of a study's published runs under other CPU
kernel paths (or the GPU) and say per point whether the outcomes agree with the published rate.

The sample (linarena.studies.cross_kernel, whose docstring states the rules): every split point
of the runs CSV at its chosen lr with all its seeds, then the points nearest the 90% threshold,
until at least --min-runs runs. Each rerun is the study's own train.py command under the kernel
path's environment (--kernel-paths: default, avx2, avx512 set ATEN_CPU_CAPABILITY, each with
MKL_CBWR=COMPATIBLE; native pins nothing; cuda trains on the GPU in float32), one folder per run
in <root>/<kernel path>/<point>/<attention>/; finished runs are skipped, so the same command
resumes. Then <out>/cross_kernel.csv (one row per rerun) and <out>/cross_kernel_points.csv (per
point and kernel path: published and rerun k/n with Wilson intervals, Fisher's p, consistent,
flipped seeds, a verdict), each with its provenance record naming the training commands.

    python scripts/maintainer/cross_kernel_check.py --dry-run
    python scripts/maintainer/cross_kernel_check.py --jobs 2 --out docs/results
    python scripts/maintainer/cross_kernel_check.py --report-only --out docs/results
    python scripts/maintainer/cross_kernel_check.py --report-only \\
        --resume-from docs/results/cross_kernel.csv

`python scripts/study.py cross_kernel` takes the same arguments; the study is declared in
linarena.studies.cross_kernel_study.
"""

from __future__ import annotations

import sys

from linarena.studies.main import run_study_cli


def main(argv: list[str] | None = None) -> int:
    return run_study_cli("cross_kernel", argv, __file__)


if __name__ == "__main__":
    sys.exit(main())
