"""MQAR mixture study: train it (resumable), then report accuracy per test setting, per attention
and kind of positions, over seeds.

Trains every attention of conf/attention/ with each kind of positions and seed of the preset's
`study:` block (linarena.studies.mixture_study: more seeds where they split), one run each in
<root>/<positions>_seed<s>/<attention>/ (finished runs are skipped, so the same command resumes);
with --report-only, trains nothing; with --resume-from <the runs CSV it wrote before> (e.g. the
committed docs/results/mqar_mixture_runs.csv), the runs listed there count as finished, on any
machine or checkout. Then reads the summary.json of every run under --runs
(default: the root; debug runs left out) and writes, into --out, <name>_runs.csv (a row per run
and test setting), <name>.csv (per attention, positions and setting: the median accuracy over
seeds, its range, the seeds that reached 90% and that success rate with its 95% Wilson
interval) and <name>.md (caption and table; settings longer than any training length marked
†), each with its provenance record in <out>/provenance.json.

    python scripts/mqar_mixture.py --preset mqar_mixture_cpu --jobs 2 --out docs/results
    python scripts/mqar_mixture.py --report-only --runs outputs/studies/mqar_mixture \\
        --out docs/results
    python scripts/mqar_mixture.py --report-only --resume-from docs/results/mqar_mixture_runs.csv \\
        --out docs/results

`python scripts/study.py mixture` takes the same arguments; the study is declared in
linarena.studies.mixture_study.
"""

from __future__ import annotations

import sys

from linarena.studies.main import run_study_cli


def main(argv: list[str] | None = None) -> int:
    return run_study_cli("mixture", argv, __file__)


if __name__ == "__main__":
    sys.exit(main())
