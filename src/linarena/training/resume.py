"""Resuming a run from its own saved config: `python train.py ckpt_path=last hydra.run.dir=<run>`.

The run folder's `.hydra/config.yaml` and `.hydra/overrides.yaml` (written when the run started)
are the run's config; a resumed job writes its own Hydra files to `.hydra/resume/`
(conf/hydra/default.yaml: hydra.output_subdir), so they stay untouched. Overrides given on resume
may change only what can change mid-run (MUTABLE); each resume is appended to
`resume_history.yaml` and copied into summary.json. A checkpoint is checked when read: one with
non-finite weights or optimizer state is refused.
"""

from __future__ import annotations

import datetime
import logging
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
import yaml
from hydra import compose
from hydra.core.hydra_config import HydraConfig
from omegaconf import DictConfig, OmegaConf

from linarena.errors import CheckpointError, ConfigError, ResumeError
from linarena.files import write_text_atomic
from linarena.training.checkpoint_guard import non_finite_names
from linarena.training.checkpoint_identity import (
    IDENTITY_KEY,
    check_identity,
    check_same_model,
    flatten,
)

HISTORY_FILE = "resume_history.yaml"
# Settings a resumed run may change (a key or a whole node): training length, learning rate and
# schedule (e.g. lower after a divergence), how often to validate (no weight depends on it),
# logging and data-loading processes.
MUTABLE = (
    "ckpt_path",
    "trainer.max_steps",
    "trainer.val_check_interval",
    "optim.lr",
    "optim.schedule",
    "optim.warmup_steps",
    "logger",
    "tags",
    "trainer.log_every_n_steps",
    "trainer.enable_progress_bar",
    "data.num_workers",
)
_ABSENT = "<absent>"
log = logging.getLogger(__name__)
_CHOICE = re.compile(r"\$\{hydra:runtime\.choices\.([\w/]+)\}")


@dataclass
class Resume:
    """What a resumed run continues from and what it changes."""

    checkpoint: Path
    step: int
    overrides: list[str] = field(default_factory=list)
    changes: dict[str, dict[str, Any]] = field(default_factory=dict)
    # The checkpoint already reached trainer.max_steps: nothing left to train.
    finished: bool = False

    def record(self) -> dict[str, Any]:
        return {
            "time": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
            "checkpoint": str(self.checkpoint),
            "from_step": self.step,
            "overrides": self.overrides,
            "changes": self.changes,
        }


def checkpoint_path(ckpt_path: str, output_dir: Path) -> Path:
    """ckpt_path=last means <output_dir>/checkpoints/last.ckpt; any other path must exist."""
    path = output_dir / "checkpoints" / "last.ckpt" if ckpt_path == "last" else Path(ckpt_path)
    if not path.is_file():
        how = (
            "To resume a run, point hydra.run.dir at that run's output folder (the one holding "
            "checkpoints/last.ckpt): `python train.py ckpt_path=last "
            "hydra.run.dir=outputs/runs/<run folder>`."
            if ckpt_path == "last"
            else "Pass an existing .ckpt file, ckpt_path=last, or ckpt_path=null."
        )
        raise ConfigError(f"ckpt_path={ckpt_path}: no checkpoint at {path}. {how}")
    return path


def read_checkpoint(path: Path, setting: str = "ckpt_path") -> dict[str, Any]:
    """A Lightning checkpoint of this project, memory-mapped; CheckpointError for a truncated,
    corrupt or foreign file, naming the `setting` that gave its path (ckpt_path, init_weights)."""
    try:
        checkpoint = torch.load(path, map_location="cpu", mmap=True, weights_only=True)
    except Exception as err:
        raise CheckpointError(
            f"{setting}: {path} cannot be read as a checkpoint ({type(err).__name__}: "
            f"{str(err).splitlines()[0][:200]}); it may be truncated or not a torch file. Use "
            f"another checkpoint of the run (checkpoints/best-*.ckpt) or {setting}=null."
        ) from None
    if not isinstance(checkpoint, dict) or not {"state_dict", "global_step", "loops"} <= set(
        checkpoint
    ):
        raise CheckpointError(
            f"{setting}: {path} is not a Lightning training checkpoint of this project (it "
            "lacks state_dict, global_step or loops). Pass a .ckpt written by train.py."
        )
    return checkpoint


def check_finite(path: Path, checkpoint: dict[str, Any], setting: str = "ckpt_path") -> None:
    """CheckpointError (naming `setting`, as read_checkpoint) when the checkpoint's weights or
    optimizer state hold NaN or inf: training from it would diverge at once, whatever the
    learning rate."""
    bad = non_finite_names(checkpoint)
    if bad:
        shown = ", ".join(bad[:3]) + (f" and {len(bad) - 3} more" if len(bad) > 3 else "")
        raise CheckpointError(
            f"{setting}: {path} holds non-finite values ({shown}) at step "
            f"{checkpoint['global_step']}; training from it cannot recover. Start from an "
            f"earlier checkpoint of the run ({setting}={path.parent}/best-*.ckpt) or start "
            "again with a lower optim.lr."
        )


def clean_checkpoint_step(path: Path) -> int | None:
    """The step of the checkpoint at `path` if it exists, can be read and holds only finite
    weights and optimizer state; else None."""
    if not path.is_file():
        return None
    try:
        checkpoint = read_checkpoint(path)
        check_finite(path, checkpoint)
    except CheckpointError:
        return None
    return int(checkpoint["global_step"])


def _mutable_prefix(key: str) -> str | None:
    return next((m for m in MUTABLE if key == m or key.startswith(m + ".")), None)


def config_changes(
    original: list[str], given: list[str], config_name: str
) -> tuple[dict[str, tuple[Any, Any]], DictConfig]:
    """({key: (before, after)} for every config value that the `given` overrides change on top
    of the run's `original` overrides, the config composed with both)."""
    extra = [o for o in given if o not in original]
    before = compose(config_name=config_name, overrides=original)
    after = compose(config_name=config_name, overrides=[*original, *extra])
    flat_before = flatten(OmegaConf.to_container(before, resolve=False))
    flat_after = flatten(OmegaConf.to_container(after, resolve=False))
    return {
        key: (flat_before.get(key, _ABSENT), flat_after.get(key, _ABSENT))
        for key in sorted(flat_before.keys() | flat_after.keys())
        if flat_before.get(key, _ABSENT) != flat_after.get(key, _ABSENT)
    }, after


def _pin_choices(restored: DictConfig, output_dir: Path) -> DictConfig:
    """The saved config with `${hydra:runtime.choices.<group>}` replaced by the run's own
    choices (from its `.hydra/hydra.yaml`): resolved in the resumed job, they would read that
    job's choices, the defaults, and file the run under another task or attention name."""
    choices = OmegaConf.load(output_dir / ".hydra" / "hydra.yaml").hydra.runtime.choices

    def pin(node: Any) -> Any:
        if isinstance(node, dict):
            return {key: pin(value) for key, value in node.items()}
        if isinstance(node, list):
            return [pin(value) for value in node]
        if isinstance(node, str):
            return _CHOICE.sub(lambda match: str(choices[match.group(1)]), node)
        return node

    return OmegaConf.create(pin(OmegaConf.to_container(restored, resolve=False)))


def check_resume_changes(changes: dict[str, tuple[Any, Any]], output_dir: Path) -> None:
    """ResumeError listing the changes (key: (before, after)) that a resume may not make."""
    refused = [key for key in changes if _mutable_prefix(key) is None]
    if refused:
        listed = "; ".join(f"{key}: {changes[key][0]!r} -> {changes[key][1]!r}" for key in refused)
        raise ResumeError(
            f"Resuming {output_dir} with overrides that change the run itself: {listed}. A "
            f"resumed run keeps its model, data and attention; only {', '.join(MUTABLE)} may "
            "change. Drop those overrides, or start a new run in a new folder."
        )


def restore_run_config(cfg: DictConfig, output_dir: Path) -> tuple[DictConfig, Resume | None]:
    """The config to resume with (the run's saved config plus the allowed changes), or `cfg`
    itself for a fresh run or a checkpoint from elsewhere with no saved config here."""
    if cfg.get("ckpt_path") is None:
        return cfg, None
    path = checkpoint_path(str(cfg.ckpt_path), output_dir)
    checkpoint = read_checkpoint(path)
    check_finite(path, checkpoint)
    step = int(checkpoint["global_step"])
    del checkpoint
    # Outside a Hydra job (the compose API) or with no saved run here: the config as given.
    if not has_saved_config(output_dir):
        return cfg, Resume(path, step, finished=finished(cfg, Resume(path, step)))
    restored, overrides, changes = restore_saved_config(output_dir)
    resume = Resume(
        path,
        step,
        overrides=overrides,
        changes={k: {"before": b, "after": a} for k, (b, a) in changes.items() if k != "ckpt_path"},
    )
    resume.finished = finished(restored, resume)
    return restored, resume


def has_saved_config(output_dir: Path) -> bool:
    """Whether this Hydra job resumes a run of `output_dir` that saved its config there."""
    return HydraConfig.initialized() and (output_dir / ".hydra" / "config.yaml").is_file()


def restore_saved_config(
    output_dir: Path,
) -> tuple[DictConfig, list[str], dict[str, tuple[Any, Any]]]:
    """The config of the run in `output_dir` (its .hydra/config.yaml) with the changes this job's
    overrides make to it applied, the overrides given beyond the run's own, and the changes
    {key: (before, after)}; ResumeError for a change a resume may not make (MUTABLE)."""
    hydra_cfg = HydraConfig.get()
    original = list(OmegaConf.load(output_dir / ".hydra" / "overrides.yaml"))
    given = list(hydra_cfg.overrides.task)
    changes, after = config_changes(original, given, hydra_cfg.job.config_name)
    check_resume_changes(changes, output_dir)
    restored = _pin_choices(OmegaConf.load(output_dir / ".hydra" / "config.yaml"), output_dir)
    # Runs started before W&B's end-of-run summary became the logger's own name its callback,
    # which the logger a resume may switch to (or away from) no longer needs.
    restored.get("callbacks", {}).pop("wandb_summary", None)
    for prefix in dict.fromkeys(_mutable_prefix(key) for key in changes):
        OmegaConf.update(restored, prefix, OmegaConf.select(after, prefix), merge=False)
    return restored, [o for o in given if o not in original], changes


def finished(cfg: DictConfig, resume: Resume | None) -> bool:
    """Whether the checkpoint already reached trainer.max_steps (nothing left to train)."""
    max_steps = OmegaConf.select(cfg, "trainer.max_steps", default=-1)
    return resume is not None and max_steps is not None and 0 < max_steps <= resume.step


def append_history(output_dir: Path, resume: Resume) -> list[dict[str, Any]]:
    """Append this resume to <output_dir>/resume_history.yaml; returns the whole history."""
    path = output_dir / HISTORY_FILE
    history = yaml.safe_load(path.read_text()) if path.is_file() else None
    history = [*(history or []), resume.record()]
    write_text_atomic(path, yaml.safe_dump(history, sort_keys=False))
    return history


def check_checkpoint_fits(
    path: Path, module: torch.nn.Module, identity: dict[str, Any], resume: Resume
) -> None:
    """CheckpointError when the checkpoint was written by another run than this config (a
    setting outside MUTABLE differs: checkpoint_identity.py) or holds another model than
    `module`, instead of training on under the wrong name or Lightning's size-mismatch
    traceback. Allowed differences (a new lr, ...) are added to `resume.changes`."""
    checkpoint = read_checkpoint(path)
    allowed = check_identity(path, checkpoint, identity, MUTABLE)
    if allowed is None:
        log.warning(
            "%s was written before checkpoints recorded their run's settings: only its weight "
            "shapes can be checked against this config.", path
        )
    for key, (before, after) in (allowed or {}).items():
        resume.changes.setdefault(key, {"before": before, "after": after})
    difference = model_difference(checkpoint["state_dict"], module)
    if difference is None:
        return
    raise CheckpointError(
        f"ckpt_path: {path} holds a different model than this config ({difference}). Resume "
        "that run from its own folder (python train.py ckpt_path=last hydra.run.dir=<its "
        "folder>), which uses its saved config."
    )


def model_difference(stored: dict[str, Any], module: torch.nn.Module) -> str | None:
    """How a checkpoint's state_dict differs from `module`'s (weight shapes, weights missing or
    extra, with the first example), or None when it fits. Tensors only: a module's extra state
    (e.g. Performer's redraw counter) may be anything."""
    own = {k: v for k, v in module.state_dict().items() if isinstance(v, torch.Tensor)}
    differ = [k for k in own
              if isinstance(stored.get(k), torch.Tensor) and stored[k].shape != own[k].shape]
    missing = [k for k in own if k not in stored]
    extra = [k for k in stored if k not in module.state_dict()]
    if not differ and not missing and not extra:
        return None
    example = (f"{differ[0]} is {list(stored[differ[0]].shape)} there, "
               f"{list(own[differ[0]].shape)} here" if differ
               else f"{missing[0]} is missing" if missing else f"{extra[0]} is extra")
    return (f"{len(differ)} weight shapes differ, {len(missing)} weights missing, {len(extra)} "
            f"extra; e.g. {example}")


def load_initial_weights(path: Path, module: torch.nn.Module, identity: dict[str, Any]) -> None:
    """init_weights: copy the model weights of the checkpoint at `path` into `module` (the
    optimizer, step and schedule stay fresh); CheckpointError for an unreadable file, non-finite
    weights, or a checkpoint of another task, attention or model than the run of `identity`
    (checkpoint_identity.check_same_model) or of other weight shapes than `module`."""
    if not path.is_file():
        raise ConfigError(f"init_weights={path}: no such file; pass a .ckpt written by train.py "
                          "(e.g. <run folder>/checkpoints/last.ckpt)")
    checkpoint = read_checkpoint(path, "init_weights")
    check_finite(path, checkpoint, "init_weights")
    pretrain = (checkpoint.get(IDENTITY_KEY) or {}).get("pretrain.objective")
    if pretrain is not None and identity.get("pretrain.objective") is None:
        raise ConfigError(
            f"init_weights={path} is a self-pretraining checkpoint (pretrain={pretrain}): "
            f"fine-tune from it with pretrain={pretrain} pretrain.stage=finetune "
            f"init_weights={path}.")
    if not check_same_model(path, checkpoint, identity):
        log.warning("%s was written before checkpoints recorded their run's settings: only its "
                    "weight shapes can be checked against this config.", path)
    difference = model_difference(checkpoint["state_dict"], module)
    if difference is not None:
        raise CheckpointError(
            f"init_weights={path} holds a different model than this config ({difference}): "
            "start from a checkpoint of the same attention, width and depth.")
    module.load_state_dict(checkpoint["state_dict"], strict=False)
