"""Benchmarks and run comparison: the code behind scripts/benchmark_model.py and scripts/compare.py.

Modules are imported explicitly (``from linarena.analysis import runs``) so that importing the
package stays cheap and does not pull in matplotlib or wandb.

analysis is the lowest of the three result layers: it imports neither linarena.studies (which
builds on it) nor linarena.reports (which builds on both); tests/analysis/test_layering.py
checks it. Its runs.py is the one reader of summary.json.
"""
