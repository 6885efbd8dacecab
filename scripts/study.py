"""Run any declared study: train what is left of its grid (resumable), then write its report with
provenance. `--help` lists the studies (linarena.studies.main.STUDIES); `<study> --help` lists
its arguments.

    python scripts/study.py --help
    python scripts/study.py state_size --preset mqar_study_cpu --plan
    python scripts/study.py state_size --preset mqar_study_cpu --jobs 2 --out docs/results \\
        --resume-from docs/results/mqar_state_size_runs.csv
    python scripts/study.py mixture --report-only --out docs/results
    python scripts/study.py <study> [--preset P] [--jobs N] [--threads T] [--plan] \\
        [--report-only] [--resume-from CSV] [--out DIR] [--root DIR] [overrides...]

Adding a study is one declaration (linarena.studies.declaration.Study, at module level in a
module of linarena.studies) plus its preset of conf/experiment/.
"""

from __future__ import annotations

import sys

from linarena.studies.main import studies_cli


def main(argv: list[str] | None = None) -> int:
    return studies_cli(argv, __file__)


if __name__ == "__main__":
    sys.exit(main())
