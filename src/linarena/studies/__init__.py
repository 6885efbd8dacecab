"""Studies: a grid of training runs, the protocol its runs must share, a resumable runner and a
report with success rates and intervals.

study.py runs and reports any study (to-do list, resume-from CSV, provenance); preset.py reads a
study preset's grid and protocol; runs.py reads the runs back (their summary.json through
linarena.analysis.runs); the per-point statistics are linarena.analysis.statistics.
state_size.py, step_budget.py and mixture.py hold the three MQAR studies. Each study is declared
once (declaration.Study, in its own module: state_size_study.py, mixture_study.py,
step_budget_study.py, seed_sweep.py, cross_kernel_study.py); main.py collects the declarations
(STUDIES) and runs any of them (scripts/study.py <name>). studies imports linarena.analysis,
never linarena.reports (tests/analysis/test_layering.py).
"""
