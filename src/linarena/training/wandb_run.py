"""Weights & Biases: the logger factory that conf/logger/wandb.yaml names. Online when credentials
exist and the server answers, offline otherwise; one W&B run per training, continued on resume.

The summaries, the comparison row and wandb.finish are in :mod:`linarena.training.wandb_summary`.
"""

from __future__ import annotations

import difflib
import inspect
import logging
import netrc
import os
import secrets
import string
from collections.abc import Iterable
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import requests
import wandb
from lightning.fabric.utilities.logger import _add_prefix
from lightning.pytorch.loggers import WandbLogger
from lightning.pytorch.utilities.rank_zero import rank_zero_only

from linarena.files import write_text_atomic
from linarena.training.errors import ConfigError

log = logging.getLogger(__name__)

RUN_ID_FILE = "wandb_run_id.txt"
# Seconds to wait for the W&B server before logging offline (wandb.init would wait 90 s, then fail).
PROBE_TIMEOUT_S = 5.0


def has_credentials() -> bool:
    """True when an API key is configured (env WANDB_API_KEY or an identity token file, or the
    .netrc entry for the W&B host, WANDB_BASE_URL or wandb's default); nothing is sent over the
    network."""
    if os.environ.get("WANDB_API_KEY") or os.environ.get("WANDB_IDENTITY_TOKEN_FILE"):
        return True
    host = urlsplit(base_url()).hostname
    path = Path(os.environ.get("NETRC", Path.home() / ".netrc"))
    try:
        return netrc.netrc(str(path)).authenticators(host or "") is not None
    except (OSError, netrc.NetrcParseError):
        return False


def base_url() -> str:
    return os.environ.get("WANDB_BASE_URL") or wandb.Settings().base_url


def choose_mode() -> str:
    """WANDB_MODE when set (dryrun counts as offline), else online with credentials, else
    offline."""
    mode = os.environ.get("WANDB_MODE")
    if mode:
        return "offline" if mode == "dryrun" else mode
    return "online" if has_credentials() else "offline"


def server_unreachable(url: str, timeout: float = PROBE_TIMEOUT_S) -> str | None:
    """None when the W&B server at `url` answers an HTTP request within `timeout` seconds (any
    status: it is up), else the reason it does not (proxies are honoured, as wandb does)."""
    try:
        requests.head(url, timeout=timeout, allow_redirects=False)
    except requests.RequestException as err:
        return type(err).__name__
    return None


def run_id(output_dir: Path, resuming: bool, write: bool) -> str:
    """The W&B run id of this training. A resumed run (ckpt_path set, same folder) continues the
    id stored in the folder; a new training gets a new id, even in a folder that held a run, so
    two trainings never share one W&B run."""
    path = output_dir / RUN_ID_FILE
    if resuming and path.is_file():
        return path.read_text().strip()
    alphabet = string.ascii_lowercase + string.digits
    new_id = "".join(secrets.choice(alphabet) for _ in range(8))
    if write:
        write_text_atomic(path, new_id + "\n")
    return new_id


def check_wandb_keys(keys: Iterable[str]) -> None:
    """Every key must be a WandbLogger or wandb.init argument (the logger passes unknown ones
    on to wandb.init, which would fail later with a TypeError)."""
    valid = set(inspect.signature(WandbLogger.__init__).parameters)
    valid |= set(inspect.signature(wandb.init).parameters)
    valid -= {"self", "kwargs"}
    unknown = sorted(set(keys) - valid - {"_target_"})
    if unknown:
        hints = []
        for key in unknown:
            close = difflib.get_close_matches(key, sorted(valid), n=1)
            hints.append(f"logger.wandb.{key}" + (f" (did you mean {close[0]}?)" if close else ""))
        raise ConfigError(f"Unknown W&B logger key(s): {'; '.join(hints)}. Valid keys are the "
                          f"arguments of WandbLogger and wandb.init: {', '.join(sorted(valid))}.")


class StepWandbLogger(WandbLogger):
    """WandbLogger that logs at W&B step = trainer.global_step, so that W&B's own step axis is
    the training step and a resumed run continues it: the steps a resumed process trains again
    (those after its checkpoint that the interrupted process had already logged) are skipped
    instead of being logged twice."""

    _first_new_step: int | None = None

    @rank_zero_only
    def log_metrics(self, metrics: Any, step: int | None = None) -> None:
        if step is None:
            super().log_metrics(metrics, step)
            return
        if self._first_new_step is None:
            # The step of the run's next row: 0 for a new run, past the last logged step for a
            # resumed one (asked once: it is a round trip to the wandb service).
            self._first_new_step = int(self.experiment.step)
        if step < self._first_new_step:
            return
        metrics = _add_prefix(metrics, self._prefix, self.LOGGER_JOIN_CHAR)
        self.experiment.log({**metrics, STEP_KEY: step}, step=step)


STEP_KEY = "trainer/global_step"


def wandb_logger(
    save_dir: str,
    ckpt_path: str | None = None,
    tags: Iterable[str] = (),
    extra_tags: Iterable[str] = (),
    **kwargs: Any,
) -> WandbLogger:
    """The WandbLogger conf/logger/wandb.yaml builds (its other keys are WandbLogger and
    wandb.init arguments). `ckpt_path` is the run's ckpt_path (a resume keeps the W&B run id);
    `tags` the user's, `extra_tags` the run's names. The mode is passed to wandb.init rather than
    as `offline=`, which would set WANDB_MODE for the whole process (and every later job of a
    multirun)."""
    check_wandb_keys([*kwargs, "save_dir", "tags"])
    if wandb.run is not None:  # left over by a job of this process that failed before finishing
        wandb.finish(exit_code=1)
    output_dir = Path(save_dir)
    mode = kwargs.pop("mode", None) or choose_mode()
    if mode == "online" and rank_zero_only.rank == 0:
        url = base_url()
        reason = server_unreachable(url)
        if reason is not None:
            log.warning("W&B server %s unreachable (%s): logging offline; upload later with "
                        "`wandb sync %s/wandb/offline-run-*`", url, reason, output_dir)
            mode = "offline"
    kwargs.setdefault("id", run_id(output_dir, ckpt_path is not None,
                                   write=rank_zero_only.rank == 0))
    # The end-of-run history and summary wandb prints are 30-odd lines, and an offline run's
    # header is three lines ending in an advertisement (`wandb leet`); train.py prints where
    # the run is and how to upload it instead.
    kwargs.setdefault("settings", wandb.Settings(quiet=True, silent=mode == "offline"))
    logger = StepWandbLogger(save_dir=str(output_dir), mode=mode, resume="allow",
                             tags=sorted({*tags, *extra_tags}), **kwargs)
    # WandbLogger always passes `anonymous`, which wandb deprecated and warns about at each run.
    logger._wandb_init.pop("anonymous", None)
    return logger


def run_info(run: Any) -> dict[str, Any]:
    """id, local folder, url and mode of a live wandb run (for summary.json)."""
    mode = run.settings.mode
    return {
        "id": run.id,
        "dir": str(Path(run.settings.sync_dir).resolve()),
        "url": run.url if mode == "online" else None,  # offline runs have none (and warn)
        "mode": mode,
    }


def location_message(info: dict[str, Any]) -> str:
    """One line telling the user where the W&B run is."""
    if info["mode"] == "disabled":
        return "W&B is disabled (WANDB_MODE=disabled): nothing was logged to W&B."
    if info["mode"] == "offline":
        return f"W&B run (offline) stored in {info['dir']}; upload it with: wandb sync {info['dir']}"
    return f"W&B run: {info['url'] or info['dir']}"
