"""Was the MQAR study's step budget enough? Rerun its points with more steps and compare.

Reads a finished study's runs CSV (mqar_study.py's <name>_runs.csv), takes the points at
--widths and --short-conv with the lr the study chose for each (on validation, on the grid's
lr seeds), and trains every seed the study ran there with trainer.max_steps=--max-steps, one run
each in <root>/<run id>/ (finished runs are skipped, so the command resumes; --resume-from the
runs CSV it wrote counts those runs as finished too). Then writes into --out <name>_runs.csv
(the longer runs), <name>.csv (per point, both budgets: median test accuracy, seeds at 90%
with the success rate's 95% Wilson interval, median best step, median gain) and <name>.md (that
table), with their provenance records.

    python scripts/mqar_step_budget.py --preset mqar_study_cpu --widths 16 --short-conv 3 \\
        --max-steps 4000 --jobs 2 --out docs/results --study docs/results/mqar_state_size_runs.csv

With --tail N instead of --max-steps, each of the study's runs is continued from its last
checkpoint (in --study-root, the study's run folders) for N more steps at a constant lr,
--tail-lr times the study's (studies.step_budget.TailPoint): the study's run continued, not a
new schedule. Where a study run's checkpoint is gone (a study resumed from its
runs CSV in another session) or its run did not finish (stopped mid-training: a last.ckpt from
its middle, no summary.json), --retrain-study trains that run again first, from scratch, and
throws away a tail that continued the run before; a run repeats bit for bit only on the CPU
kernels that trained it, so on another machine's the retrain differs from its row of --study,
and its tail continues the retrain. Each tail is compared with the run
it continued: its row in <name>_runs.csv names that run's result (start_* columns), and the
caption counts the tails that continued a retrain differing from its published row.

`python scripts/study.py step_budget` takes the same arguments; the study is declared in
linarena.studies.step_budget_study.
"""

from __future__ import annotations

import sys

from linarena.studies.main import run_study_cli


def main(argv: list[str] | None = None) -> int:
    return run_study_cli("step_budget", argv, __file__)


if __name__ == "__main__":
    sys.exit(main())
