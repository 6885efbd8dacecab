"""Benchmarks and run comparison: the code behind scripts/benchmark_model.py and scripts/compare.py.

Modules are imported explicitly (``from linarena.analysis import runs``) so that importing the
package stays cheap and does not pull in matplotlib or wandb.
"""
