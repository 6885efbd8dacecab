"""Launch policy, each rule once: the accelerator, the precision, the DDP ranks under Hydra's
launchers, and whether this job is part of a multirun."""

from __future__ import annotations

from typing import Any

import torch
from hydra.core.hydra_config import HydraConfig
from hydra.types import RunMode
from omegaconf import DictConfig

from linarena.errors import ConfigError

# Strategies whose processes are started by the strategy itself inside the current process tree
# (spawn/fork) rather than by re-running the script.
SPAWNING_STRATEGIES = ("spawn", "fork", "notebook")
# Lightning's names of float16 mixed precision, which it replaces by bf16-mixed on the CPU.
FP16_MIXED = ("16-mixed", "16")
# The launcher that runs the jobs of one `train.py -m` one after the other in its own process
# (Hydra's default; submitit's start a process per job).
BASIC_LAUNCHER = "hydra._internal.core_plugins.basic_launcher.BasicLauncher"
# Launchers whose jobs do not get their DDP ranks started for them: the basic one, and
# submitit's local executor (it starts tasks_per_node processes but sets no SLURM_* variables,
# so Lightning cannot see them as ranks and re-runs submitit's own entry script instead).
NON_RANK_LAUNCHERS = (BASIC_LAUNCHER,
                      "hydra_plugins.hydra_submitit_launcher.submitit_launcher.LocalLauncher")


def hydra_context() -> tuple[bool, str | None]:
    """(is this job part of a multirun, the launcher's _target_) or (False, None) outside
    Hydra (e.g. the compose API in tests)."""
    if not HydraConfig.initialized():
        return False, None
    hydra_cfg = HydraConfig.get()
    return hydra_cfg.mode == RunMode.MULTIRUN, hydra_cfg.launcher.get("_target_")


def resolve_precision(precision: Any, accelerator: str) -> str:
    """'auto' becomes bf16-mixed on a GPU that supports it, else 32-true; other values pass,
    but float16 mixed precision on the CPU is refused: Lightning would run bf16-mixed instead,
    and the run would record a precision it did not train with."""
    # An accelerator named gpu without a GPU is check_accelerator's to refuse.
    on_cpu = accelerator == "cpu" or (accelerator == "auto" and not torch.cuda.is_available())
    if str(precision) in FP16_MIXED and on_cpu:
        raise ConfigError(
            f"trainer.precision={precision} needs a GPU (float16 autocast); on the CPU "
            f"(trainer.accelerator={accelerator}) use trainer.precision=bf16-mixed, or "
            "trainer.precision=auto (32-true on the CPU).")
    if str(precision) != "auto":
        return str(precision)
    on_gpu = accelerator in ("auto", "gpu", "cuda") and torch.cuda.is_available()
    return "bf16-mixed" if on_gpu and torch.cuda.is_bf16_supported() else "32-true"


def count_devices(devices: Any, accelerator: str) -> int:
    """How many processes Lightning would start for trainer.devices on this machine."""
    gpus = torch.cuda.device_count() if accelerator in ("auto", "gpu", "cuda") else 0
    if isinstance(devices, int):
        return (gpus or 1) if devices == -1 else devices
    if isinstance(devices, str):
        if devices.strip().lstrip("-").isdigit():
            return count_devices(int(devices), accelerator)
        if devices == "auto":
            return gpus or 1
        return len([d for d in devices.split(",") if d.strip()])
    return len(list(devices))


def check_accelerator(trainer: DictConfig) -> None:
    """A GPU accelerator asked for on a machine without one: the way out, instead of
    Lightning's "No supported gpu backend found!"."""
    accelerator = str(trainer.get("accelerator", "auto"))
    if accelerator in ("gpu", "cuda") and not torch.cuda.is_available():
        devices = trainer.get("devices", 1)
        raise ConfigError(
            f"trainer.accelerator={accelerator} (trainer.devices={devices}), but this machine "
            "has no GPU that PyTorch can use. Add trainer.accelerator=cpu to run on the CPU "
            f"(with trainer=ddp, trainer.devices={devices} starts {devices} CPU processes), or "
            "run on a machine with a GPU."
        )


def check_launch(trainer: DictConfig) -> str:
    """Every launch check for this job (accelerator, DDP under the launcher); returns the
    precision it trains with (resolve_precision)."""
    multirun, launcher = hydra_context()
    check_accelerator(trainer)
    check_ddp_launch(trainer, multirun, launcher)
    return resolve_precision(trainer.precision, str(trainer.accelerator))


def check_ddp_launch(trainer: DictConfig, multirun: bool, launcher_target: str | None) -> None:
    """Under Hydra multirun with the basic launcher, DDP's subprocess launcher re-runs the script
    with the sweep arguments (hangs or repeated sweeps): refuse it with the ways out."""
    if not multirun or launcher_target not in NON_RANK_LAUNCHERS:
        return
    accelerator = str(trainer.get("accelerator", "auto"))
    processes = count_devices(trainer.get("devices", 1), accelerator) * int(
        trainer.get("num_nodes", 1)
    )
    strategy = str(trainer.get("strategy", "auto"))
    if processes > 1 and not any(word in strategy for word in SPAWNING_STRATEGIES):
        raise ConfigError(
            f"trainer.strategy={strategy} with {processes} processes cannot run under a Hydra "
            f"multirun (-m) with the launcher {launcher_target.rsplit('.', 1)[-1]}: it does not "
            "start DDP ranks, and Lightning would re-run the script with the sweep's arguments. "
            "Use hydra/launcher=slurm (SLURM starts the ranks), or "
            "trainer.strategy=ddp_spawn, or run the jobs one at a time without -m."
        )
