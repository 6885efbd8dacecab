"""W&B mode selection (online only with credentials and a server that answers), one W&B run
per training, clear errors for misspelt logger keys, summaries."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest
from helpers.training import run_train

from linarena.errors import ConfigError
from linarena.training.wandb_run import (
    RUN_ID_FILE,
    choose_mode,
    location_message,
    run_id,
    server_unreachable,
    wandb_logger,
)

# A loopback port nothing listens on (the discard port): connections are refused at once.
CLOSED_PORT_URL = "http://127.0.0.1:9"


@pytest.fixture
def no_credentials(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Path:
    """No WANDB_* settings and an empty netrc; returns the netrc path."""
    for name in ("WANDB_MODE", "WANDB_API_KEY", "WANDB_IDENTITY_TOKEN_FILE"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("WANDB_BASE_URL", "https://api.wandb.ai")
    netrc = tmp_path / "netrc"
    netrc.write_text("")
    monkeypatch.setenv("NETRC", str(netrc))
    return netrc


def test_offline_without_credentials(no_credentials: Path) -> None:
    assert choose_mode() == "offline"


def test_online_with_an_api_key_in_the_environment(
    no_credentials: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("WANDB_API_KEY", "x" * 40)
    assert choose_mode() == "online"


def test_online_with_a_netrc_entry_for_the_wandb_host(no_credentials: Path) -> None:
    no_credentials.write_text(f"machine api.wandb.ai\n  login user\n  password {'x' * 40}\n")
    assert choose_mode() == "online"
    no_credentials.write_text(f"machine example.org\n  login user\n  password {'x' * 40}\n")
    assert choose_mode() == "offline"


def test_wandb_mode_in_the_environment_wins(
    no_credentials: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("WANDB_MODE", "online")
    assert choose_mode() == "online"
    monkeypatch.setenv("WANDB_MODE", "dryrun")
    assert choose_mode() == "offline"
    monkeypatch.setenv("WANDB_API_KEY", "x" * 40)
    monkeypatch.setenv("WANDB_MODE", "disabled")
    assert choose_mode() == "disabled"


def test_a_resumed_run_keeps_its_wandb_id_and_a_new_training_gets_a_new_one(
    tmp_path: Path,
) -> None:
    first = run_id(tmp_path, resuming=False, write=True)
    assert (tmp_path / RUN_ID_FILE).read_text().strip() == first
    assert run_id(tmp_path, resuming=True, write=True) == first
    # A new training started in a folder that already holds a run: never the old W&B run.
    second = run_id(tmp_path, resuming=False, write=True)
    assert second != first and (tmp_path / RUN_ID_FILE).read_text().strip() == second
    other = tmp_path / "other"
    assert run_id(other, resuming=True, write=False) != first  # nothing stored there: new id
    assert not (other / RUN_ID_FILE).exists()


def test_an_unreachable_server_is_detected_within_seconds() -> None:
    started = time.monotonic()
    assert server_unreachable(CLOSED_PORT_URL, timeout=2.0) is not None
    assert time.monotonic() - started < 5.0


def test_a_misspelt_logger_key_is_a_clear_error(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"logger\.wandb\.projct \(did you mean project\?\)"):
        wandb_logger(save_dir=str(tmp_path), projct="linarena")


def test_with_an_api_key_and_no_network_the_run_goes_offline_with_one_line(
    tmp_path: Path,
) -> None:
    data_dir = tmp_path / "data"
    env = {"WANDB_MODE": "", "WANDB_API_KEY": "x" * 40, "WANDB_BASE_URL": CLOSED_PORT_URL,
           "WANDB_SILENT": ""}
    started = time.monotonic()
    result = run_train(["debug=smoke", f"hydra.run.dir={tmp_path / 'run'}"], tmp_path, data_dir,
                       env=env, timeout=240)
    assert result.returncode == 0, result.stderr[-3000:]
    output = result.stdout + result.stderr
    assert output.count("unreachable") == 1, output[-3000:]
    assert "logging offline" in output
    summary = json.loads((tmp_path / "run" / "summary.json").read_text())
    assert summary["wandb"]["mode"] == "offline"
    assert time.monotonic() - started < 120  # wandb.init alone would wait 90 s, then fail
    # What the user reads, with the output going to a pipe: a plain progress line in steps,
    # the headline numbers, and none of the libraries' noise.
    assert "step 4/4 (100%), loss " in output and "tok/s " in output
    assert "Results: test/acc=" in output and "tokens/s, peak memory" in output
    for noise in ("litlogger", "LeafSpec", "anonymous setting", "Run history", "Run summary"):
        assert noise not in output, noise


def test_offline_message_gives_the_sync_command() -> None:
    info = {"id": "abc", "dir": "/runs/x/wandb/offline-run-1-abc", "url": None, "mode": "offline"}
    assert location_message(info).endswith("wandb sync /runs/x/wandb/offline-run-1-abc")


def test_after_a_resume_the_sync_command_names_every_part_of_the_run(tmp_path: Path) -> None:
    wandb_dir = tmp_path / "wandb"
    for start in ("20260101_100000", "20260101_110000"):
        (wandb_dir / f"offline-run-{start}-abc").mkdir(parents=True)
    (wandb_dir / "offline-run-20260101_090000-other").mkdir()
    info = {"id": "abc", "dir": str(wandb_dir / "offline-run-20260101_110000-abc"), "url": None,
            "mode": "offline"}
    assert location_message(info).endswith(f"wandb sync {wandb_dir}/offline-run-*-abc")
    assert "2 folders" in location_message(info)


def test_a_string_tag_is_one_tag(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("WANDB_MODE", "offline")
    monkeypatch.setenv("WANDB_SILENT", "true")
    logger = wandb_logger(save_dir=str(tmp_path), tags="readme", extra_tags=["listops"])
    try:
        assert sorted(logger.experiment.tags) == ["listops", "readme"]
    finally:
        logger.experiment.finish()


def test_a_resumed_run_logs_at_the_training_step_and_skips_the_steps_it_already_has(
    tmp_path: Path,
) -> None:
    """Killed at step 68 with its checkpoint at step 50, the resumed run trains 51-68 again: W&B
    already holds those (its next row is 69), so they are not logged a second time."""
    from linarena.training.wandb_run import StepWandbLogger

    class ResumedRun:
        step = 69  # wandb: the step of the next log() call

        def __init__(self) -> None:
            self.rows: list[tuple[int, dict]] = []

        def log(self, row: dict, step: int | None = None) -> None:
            self.rows.append((step, row))

    run = ResumedRun()
    logger = StepWandbLogger(save_dir=str(tmp_path), experiment=run)
    for step in range(51, 72):
        logger.log_metrics({"train/loss": 1.0}, step=step)
    assert [step for step, _ in run.rows] == [69, 70, 71]
    assert all(row["trainer/global_step"] == step for step, row in run.rows)


def test_w_and_b_files_that_cannot_be_written_after_training_are_one_warning(
    tmp_path: Path,
) -> None:
    """Training finished and summary.json is written: a W&B data folder that cannot be written
    (read-only, or here under a regular file, which stops root too) is one warning, exit 0."""
    (tmp_path / "a_file").write_text("")
    env = {"WANDB_DATA_DIR": str(tmp_path / "a_file" / "wandb_data")}
    result = run_train(["debug=smoke", f"hydra.run.dir={tmp_path / 'run'}"], tmp_path,
                       tmp_path / "data", env=env)
    assert result.returncode == 0, result.stderr[-3000:]
    output = result.stdout + result.stderr
    assert "Traceback" not in output
    warnings = [line for line in output.splitlines() if "WANDB_DATA_DIR" in line]
    assert len(warnings) == 1 and "WANDB_DIR" in warnings[0], output[-3000:]
    assert json.loads((tmp_path / "run" / "summary.json").read_text())["metrics"]["test/acc"] \
        is not None
