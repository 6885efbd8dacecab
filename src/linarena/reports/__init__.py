"""Reports over every published result: the result tables of the documentation's results page
and the README's summary of them (results_tables.py), the one-run command below each
(results_points.py), the golden runs of every preset behind a published result (golden.py), and
the documentation site's generated configuration page (config_reference.py, site_hooks.py).

The layers, lowest first: analysis (benchmarks, comparisons, statistics, provenance, result
files, the summary.json reader), then studies (which imports analysis), then reports. Reports
sit above both because they read the outputs of both: the README's tables cover the
benchmarks and compare.py's sweeps (analysis) as well as the studies' runs CSVs (their columns:
studies.runs), and the golden runs compose the study presets (studies.preset,
studies.state_size.trains_at, studies.mixture_study) beside the benchmark and sweep presets.
Inside studies they would make the studies package the home of README tables of benchmarks;
inside analysis they would make analysis import studies. Neither analysis nor studies imports
this package (tests/analysis/test_layering.py).
"""
