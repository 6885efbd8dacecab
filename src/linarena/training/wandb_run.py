"""Weights & Biases: the logger factory that conf/logger/wandb.yaml names. Online when credentials
exist and the server answers, offline otherwise; one W&B run per training, continued on resume.
At the end of the run the logger's summary hook (linarena.training.run_report) writes the run
summary and the one-row "comparison" table, then finishes the W&B run.
"""

from __future__ import annotations

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
from lightning.pytorch.loggers import WandbLogger
from lightning.pytorch.utilities.rank_zero import rank_zero_only

from linarena.commands import sync_command
from linarena.files import write_text_atomic
from linarena.metrics import METRICS, STEP_KEY
from linarena.training.known_keys import check_known_keys

log = logging.getLogger(__name__)

RUN_ID_FILE = "wandb_run_id.txt"
# Seconds to wait for the W&B server before logging offline (wandb.init would wait 90 s, then fail).
PROBE_TIMEOUT_S = 5.0
COMPARISON_KEY = "comparison"
# WandbLogger's own arguments; the factory passes every other key to wandb.init.
LOGGER_ONLY_KEYS = frozenset({"log_model", "prefix", "checkpoint_name", "add_file_policy"})


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
    """Every key must be a wandb.init argument or one of WandbLogger's own (LOGGER_ONLY_KEYS);
    an unknown one would fail later in wandb.init with a TypeError."""
    valid = set(inspect.signature(wandb.init).parameters) | LOGGER_ONLY_KEYS | {"save_dir"}
    valid -= {"self", "kwargs", "dir"}
    check_known_keys(set(keys) - {"_target_"}, sorted(valid), "logger.wandb",
                     "The W&B logger accepts the arguments of wandb.init and WandbLogger's own")


class StepWandbLogger(WandbLogger):
    """WandbLogger that logs at W&B step = trainer.global_step, so that W&B's own step axis is
    the training step and a resumed run continues it: the steps a resumed process trains again
    (those after its checkpoint that the interrupted process had already logged) are skipped
    instead of being logged twice. Its summary hook (linarena.training.run_report) writes the
    run summary and the "comparison" table and finishes the run; a failed run is finished with
    exit code 1, so each job of a multirun is its own W&B run.

    Args:
        prefix: put before every metric key (joined with "-", as WandbLogger does).
        other arguments: WandbLogger's (`experiment`: the live run from wandb.init).
    """

    def __init__(self, *args: Any, prefix: str = "", **kwargs: Any) -> None:
        super().__init__(*args, prefix=prefix, **kwargs)
        self.metric_prefix = prefix
        self._first_new_step: int | None = None

    @rank_zero_only
    def log_metrics(self, metrics: Any, step: int | None = None) -> None:
        if self.metric_prefix:
            metrics = {f"{self.metric_prefix}{self.LOGGER_JOIN_CHAR}{key}": value
                       for key, value in metrics.items()}
        if step is None:
            self.experiment.log(dict(metrics))
            return
        if self._first_new_step is None:
            # The step of the run's next row: 0 for a new run, past the last logged step for a
            # resumed one (asked once: it is a round trip to the wandb service).
            self._first_new_step = int(self.experiment.step)
        if step < self._first_new_step:
            return
        self.experiment.log({**metrics, STEP_KEY: step}, step=step)

    def summary_fields(self) -> dict[str, Any]:
        """summary.json's "wandb": id, folder, url and mode of the W&B run."""
        return {"wandb": run_info(self.experiment)}

    @rank_zero_only
    def log_run_summary(self, summary: dict[str, Any], row: dict[str, Any]) -> None:
        """The final metrics into the run summary, the one-row table "comparison" (a table
        panel on that key merges the rows of every run shown), then wandb.finish."""
        run = self.experiment
        run.summary.update({k: v for k, v in summary["metrics"].items() if v is not None})
        try:
            run.log({COMPARISON_KEY: wandb.Table(columns=list(row), data=[list(row.values())])})
        except OSError as err:
            # The run has trained and summary.json is written: not a failure of the run. A table
            # is staged under W&B's data folder (~/.local/share/wandb unless WANDB_DATA_DIR).
            log.warning(
                "W&B could not write its offline files (%s: %s): the run finished and its "
                "summary.json is written, but its W&B run lacks the comparison table. Point "
                "WANDB_DATA_DIR (and WANDB_DIR, WANDB_CACHE_DIR) at writable folders.",
                type(err).__name__, str(err).splitlines()[0][:300])
        wandb.finish(exit_code=0)

    @rank_zero_only
    def finalize(self, status: str) -> None:
        super().finalize(status)
        if status == "failed" and wandb.run is not None:
            wandb.finish(exit_code=1)


def define_metrics(run: Any) -> None:
    """Every metric on the training-step axis, summarised as linarena.metrics declares."""
    run.define_metric(STEP_KEY)
    for metric in METRICS:
        run.define_metric(metric.key, step_metric=STEP_KEY, summary=metric.wandb_summary)
    run.define_metric("*", step_metric=STEP_KEY, step_sync=True)


def wandb_logger(
    save_dir: str,
    ckpt_path: str | None = None,
    tags: Iterable[str] = (),
    extra_tags: Iterable[str] = (),
    **kwargs: Any,
) -> StepWandbLogger:
    """The logger conf/logger/wandb.yaml builds (its other keys are wandb.init arguments and
    LOGGER_ONLY_KEYS); on rank 0 it starts the W&B run. `ckpt_path` is the run's ckpt_path (a
    resume keeps the W&B run id); `tags` the user's, `extra_tags` the run's names. The mode is
    passed to wandb.init rather than as `offline=`, which would set WANDB_MODE for the whole
    process (and every later job of a multirun)."""
    check_wandb_keys([*kwargs, "save_dir", "tags"])
    # tags=readme on the command line is one string: one tag, not one per letter.
    tags = [tags] if isinstance(tags, str) else tags
    if wandb.run is not None:  # left over by a job of this process that failed before finishing
        wandb.finish(exit_code=1)
    output_dir = Path(save_dir)
    mode = kwargs.pop("mode", None) or choose_mode()
    if mode == "online" and rank_zero_only.rank == 0:
        url = base_url()
        reason = server_unreachable(url)
        if reason is not None:
            log.warning("W&B server %s unreachable (%s): logging offline; upload later with "
                        "`%s`", url, reason, sync_command(output_dir, "/wandb/offline-run-*"))
            mode = "offline"
    kwargs.setdefault("id", run_id(output_dir, ckpt_path is not None,
                                   write=rank_zero_only.rank == 0))
    # The end-of-run history and summary wandb prints are 30-odd lines, and an offline run's
    # header is three lines ending in an advertisement (`wandb leet`); train.py prints where
    # the run is and how to upload it instead.
    kwargs.setdefault("settings", wandb.Settings(quiet=True, silent=mode == "offline"))
    logger_kwargs = {key: kwargs.pop(key) for key in LOGGER_ONLY_KEYS & set(kwargs)}
    experiment = None
    if rank_zero_only.rank == 0:
        # Started here rather than by WandbLogger, which passes wandb.init the deprecated
        # `anonymous` (a warning at every run).
        experiment = wandb.init(dir=str(output_dir), mode=mode, resume="allow",
                                tags=sorted({*tags, *extra_tags}), **kwargs)
        define_metrics(experiment)
    return StepWandbLogger(save_dir=str(output_dir), experiment=experiment, **logger_kwargs)


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
        # A resumed run continues the same W&B run in a second offline folder (offline-run-<time>-
        # <id>): syncing only the newest would upload the part after the resume.
        folder = Path(info["dir"])
        parts = sorted(folder.parent.glob(f"offline-run-*-{info['id']}"))
        if len(parts) > 1:
            pattern = f"/offline-run-*-{info['id']}"
            return (f"W&B run (offline) stored in {len(parts)} folders, one per start or resume, "
                    f"{folder.parent}{pattern}; upload them all with: "
                    f"{sync_command(folder.parent, pattern)}")
        return (f"W&B run (offline) stored in {info['dir']}; upload it with: "
                f"{sync_command(info['dir'])}")
    return f"W&B run: {info['url'] or info['dir']}"
