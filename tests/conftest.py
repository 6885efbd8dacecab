"""Shared by every test: under pytest-xdist (the default, pyproject.toml), each worker's torch
takes its share of the cores, so that the workers do not each start a thread per core."""

from __future__ import annotations

import os

import torch


def pytest_configure(config) -> None:
    workers = os.environ.get("PYTEST_XDIST_WORKER_COUNT")
    # A thread count the caller set (CI's one-thread rerun of the exactness tests) stands.
    if workers and "OMP_NUM_THREADS" not in os.environ:
        torch.set_num_threads(max(1, (os.cpu_count() or 1) // int(workers)))
