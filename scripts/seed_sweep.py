"""Train every attention at several seeds, with more seeds where the outcomes split; resumable.

Each attention of conf/attention/ (or --attention) is trained at each of --seeds with
experiment=--preset (default: the default config) and the overrides given, one run each in
<root>/seed<s>/<attention>/; an attention whose seeds split (some reach 90% test accuracy, some
do not) is trained at --more-seeds too (linarena.studies.seed_sweep). Finished runs are skipped,
so the same command resumes; with --resume-from the runs CSV compare.py wrote of the sweep
(results_runs.csv), the runs it lists count as finished too, so a sweep spans sessions or
machines. All the runs are one sweep for scripts/compare.py:

    python scripts/seed_sweep.py --preset mqar_cpu --root outputs/sweeps/mqar --jobs 2
    python scripts/seed_sweep.py --root outputs/sweeps/listops trainer.max_steps=300
    python scripts/compare.py --runs outputs/sweeps

`python scripts/study.py seed_sweep` takes the same arguments; the study is declared in
linarena.studies.seed_sweep.
"""

from __future__ import annotations

import sys

from linarena.studies.main import run_study_cli


def main(argv: list[str] | None = None) -> int:
    return run_study_cli("seed_sweep", argv, __file__)


if __name__ == "__main__":
    sys.exit(main())
