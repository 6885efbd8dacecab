"""A run on a machine busier than its CPUs says so once when it starts: its tokens/s then means
little."""

from __future__ import annotations

import logging
import os

import pytest

from linarena.run_lock import RANK_VARIABLES
from linarena.training.environment import warn_if_busy


@pytest.fixture
def two_cpus(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: {0, 1}, raising=False)
    monkeypatch.setattr(os, "cpu_count", lambda: 2)
    for name in RANK_VARIABLES:
        monkeypatch.delenv(name, raising=False)


def warnings(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [record.getMessage() for record in caplog.records if record.levelno >= logging.WARNING]


def test_a_load_above_the_cpus_is_one_warning_line(
        two_cpus: None, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    monkeypatch.setattr(os, "getloadavg", lambda: (8.0, 7.5, 6.0))
    with caplog.at_level(logging.INFO):
        warn_if_busy()
    message, = warnings(caplog)
    assert "\n" not in message
    assert "load average 8.0" in message and "2 CPUs" in message and "tokens/s" in message


def test_no_warning_on_a_machine_within_its_cpus(
        two_cpus: None, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    monkeypatch.setattr(os, "getloadavg", lambda: (2.0, 3.0, 3.0))  # at most one job per CPU
    warn_if_busy()
    assert warnings(caplog) == []


def test_no_warning_without_a_load_average_or_on_other_ranks(
        two_cpus: None, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    monkeypatch.setattr(os, "getloadavg", lambda: (8.0, 8.0, 8.0))
    monkeypatch.setenv("LOCAL_RANK", "1")  # rank 0 of the run says it, once
    warn_if_busy()
    monkeypatch.delenv("LOCAL_RANK")
    monkeypatch.delattr(os, "getloadavg")  # a system without one (Windows)
    warn_if_busy()
    assert warnings(caplog) == []

