"""MQAR recall against state size: run the study of a preset, then write its CSV and figure.

Every attention of conf/attention/ and every hybrid entry of the preset's `study:` block at
every width and short-conv setting, by the protocol of linarena.studies.state_size: every lr at
the lr seeds, the other seeds at the lr chosen on their validation accuracy, more seeds where
the outcomes split; one train.py run each in <root>/<point>/<attention>/. Finished runs are
skipped, so the same command resumes an interrupted study; with --resume-from <the runs CSV it
wrote> the runs listed there count as finished too, so a study spans sessions or machines
through its committed CSV (each row names the commit that trained it). One console line per
finished run (result, ETA); each point's train.py output goes to <root>/<point>/console.log.
Then, from the runs' summary.json files: <out>/<name>_runs.csv (every run), <name>.csv (per
attention, short conv and width: the lr chosen on validation, the median test accuracy over
seeds, the seeds that reached 90% and that success rate with its 95% Wilson interval),
<name>.md (that table) and <name>.png (the figure, every seed drawn), each with its provenance
record in <out>/provenance.json.

    python scripts/mqar_study.py --preset mqar_study_cpu --jobs 2
    python scripts/mqar_study.py --preset mqar_study_cpu --plan
    python scripts/mqar_study.py --preset mqar_study_cpu --report-only --out docs/results
    python scripts/mqar_study.py --preset mqar_study_gpu --jobs 8 --threads 2
    python scripts/mqar_study.py --jobs 2 study.short_conv=[3] trainer.max_steps=3000
    python scripts/mqar_study.py --preset mqar_study_cpu --jobs 2 --out docs/results \\
        --resume-from docs/results/mqar_state_size_runs.csv

Overrides of the study: block (study.widths=..., study.seeds=..., study.lr_seeds=null) change
the grid; the others go to every train.py run.

`python scripts/study.py state_size` takes the same arguments; the study is declared in
linarena.studies.state_size_study.
"""

from __future__ import annotations

import sys

from linarena.studies.main import run_study_cli


def main(argv: list[str] | None = None) -> int:
    return run_study_cli("state_size", argv, __file__)


if __name__ == "__main__":
    sys.exit(main())
