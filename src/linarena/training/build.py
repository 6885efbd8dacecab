"""Builds datamodule, model, LightningModule, loggers, callbacks and trainer from the config."""

from __future__ import annotations

import importlib.util
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from hydra.errors import InstantiationException
from hydra.utils import instantiate
from lightning.pytorch import LightningDataModule, Trainer, seed_everything
from lightning.pytorch.callbacks import ModelSummary, ProgressBar
from lightning.pytorch.loggers import Logger
from omegaconf import DictConfig, OmegaConf, open_dict
from torch import nn

from linarena.attention.patterns import pattern_entry, pattern_name
from linarena.errors import ConfigError
from linarena.models.transformer import repeat_pattern
from linarena.training import pretrain_config
from linarena.training.checkpoint_guard import FiniteCheckpointGuard
from linarena.training.checkpoint_identity import StoreRunIdentity, run_identity
from linarena.training.checkpoint_io import AtomicCheckpointIO
from linarena.training.module import ClassificationModule
from linarena.training.pattern_config import pattern_attentions
from linarena.training.perf import PerfMonitor
from linarena.training.pretrain import PretrainModule, TokenCount
from linarena.training.signals import SaveOnSignal
from linarena.training.summary import logged_config

# Arguments the code passes to each group's _target_, never set in the config. this module builds
# its keyword arguments from these names and config_checks accepts them, so they cannot drift
# apart.
DATAMODULE_ARGS = ("vocab_size", "num_classes", "head_kind")  # model sizes from the datamodule
ATTENTION_ARGS = ("head_dim", "causal")  # per layer, from the model (TransformerClassifier)
TRAINER_ARGS = ("callbacks", "logger", "precision", "plugins")
INJECTED = {
    "model": {*DATAMODULE_ARGS, "attention"},
    # rotary, score_bias: the positions object, passed by the model under model.positions=rope
    # and alibi.
    "attention": {*ATTENTION_ARGS, "rotary", "score_bias"},
    "trainer": set(TRAINER_ARGS),
}
# Keys of a group's config that this module reads itself and does not pass to its _target_
# (config_checks accepts them): model.pattern, the attention of each block of a hybrid stack.
BUILD_KEYS = {"model": {"pattern", "compile"}}


@dataclass
class Components:
    """Everything a run needs, built (build_components)."""

    datamodule: LightningDataModule
    module: ClassificationModule
    trainer: Trainer
    perf: PerfMonitor
    precision: str
    signals: SaveOnSignal
    identity: dict[str, Any]


def instantiate_group(node: DictConfig, group: str, **kwargs: Any) -> Any:
    """hydra.utils.instantiate, with constructor errors turned into a ConfigError naming the
    config group (the constructors' own messages say which key to change)."""
    try:
        return instantiate(node, **kwargs)
    except InstantiationException as err:
        cause = err.__cause__ or err
        raise ConfigError(f"Could not build `{group}` ({node.get('_target_')}): {cause}") from err


def attention_factories(cfg: DictConfig) -> Any:
    """What the model gets as `attention`: the factory of cfg.attention (every block), or a
    list of one factory per model.pattern entry (a hybrid stack; the model repeats it)."""
    entries = pattern_attentions(cfg)
    if entries is None:
        return instantiate_group(cfg.attention, "attention")
    return [instantiate_group(node, f"model.pattern.{name}") for name, node in entries]


def build_model(cfg: DictConfig, datamodule: Any) -> nn.Module:
    """The model of `cfg.model` with one `cfg.attention` core per layer, or the attentions of
    model.pattern, sized by the datamodule (its constructor is enough: no data is read; any
    object with DATAMODULE_ARGS and `causal` will do). Written in `cfg` itself, so that what was
    built is what the run records: model.causal null becomes the task's own (TaskSpec.causal);
    a hybrid stack's attention_name becomes its pattern's name (attention.patterns.pattern_name,
    e.g. "gated_deltanet*2+softmax"), which runs, loggers and checkpoints are filed under."""
    if cfg.model.get("causal") is None:
        with open_dict(cfg.model):
            cfg.model.causal = bool(datamodule.causal)
    sizes = {name: getattr(datamodule, name) for name in DATAMODULE_ARGS}
    if pretrain_config.adds_mask_token(cfg):
        # The mask token of masked-token pretraining: one more row, id vocab_size, in both stages.
        sizes["vocab_size"] += 1
    attention = attention_factories(cfg)
    if isinstance(attention, list):
        layers = repeat_pattern([pattern_entry(e)[0] for e in cfg.model.pattern],
                                cfg.model.num_layers)
        with open_dict(cfg):
            cfg.attention_name = pattern_name(layers)
    node = cfg.model.copy()  # keeps its parent: ${data.max_length} resolves
    with open_dict(node):
        for key in BUILD_KEYS["model"]:
            node.pop(key, None)
    return instantiate_group(node, "model", **sizes, attention=attention)


# Keys a logger's YAML may add for the code around it, removed before it is built:
# `_requires_`, the optional package it needs (a missing one is a one-line error, and the tests
# of every logger skip it with that reason); `_files_`, what it writes in the run folder when it
# is built (a run that fails before training removes its folder when nothing else is there).
LOGGER_REQUIRES, LOGGER_FILES = "_requires_", "_files_"


def logger_nodes(cfg: DictConfig) -> dict[str, DictConfig]:
    """The `logger` group's loggers by name (a null entry is no logger)."""
    return {key: node for key, node in (cfg.get("logger") or {}).items() if node is not None}


def missing_requirement(node: DictConfig) -> str | None:
    """The optional package a logger's YAML names under `_requires_` when it is not
    installed, else None."""
    package = node.get(LOGGER_REQUIRES)
    return package if package and importlib.util.find_spec(package) is None else None


def build_loggers(cfg: DictConfig) -> list[Logger]:
    """The loggers of the `logger` group, each built from its YAML file (conf/logger/)."""
    loggers = []
    for key, node in logger_nodes(cfg).items():
        package = missing_requirement(node)
        if package is not None:
            raise ConfigError(f"logger={key} needs the package {package}: pip install {package}, "
                              "or pick another logger (conf/logger/).")
        settings = OmegaConf.to_container(node, resolve=True)
        for own_key in (LOGGER_REQUIRES, LOGGER_FILES):
            settings.pop(own_key, None)
        loggers.append(instantiate_group(OmegaConf.create(settings), f"logger.{key}"))
    return loggers


def build_module(cfg: DictConfig) -> tuple[LightningDataModule, ClassificationModule]:
    """The datamodule (its constructor: no data is read) and the LightningModule of a config:
    what a checkpoint of its run holds, built without loggers or a trainer; the pretraining
    stage of self-pretraining (pretrain.stage=pretrain) gets a PretrainModule. Building writes the
    settings it resolves into `cfg` (build_model; pretrain.mask_fraction), so the run's identity
    (checkpoint_identity.run_identity) is taken from `cfg` after this."""
    datamodule = instantiate_group(cfg.data, "data")
    model = build_model(cfg, datamodule)
    optim = instantiate_group(cfg.optim, "optim", _convert_="all")
    if pretrain_config.stage(cfg) == pretrain_config.PRETRAIN:
        fraction = None
        if pretrain_config.adds_mask_token(cfg):
            fraction = pretrain_config.mask_fraction(cfg)
            with open_dict(cfg.pretrain):  # the run records the fraction it used
                cfg.pretrain.mask_fraction = fraction
        module = PretrainModule(model, optim, datamodule.vocab_size, str(cfg.pretrain.objective),
                                fraction, int(cfg.seed))
        return datamodule, module
    module = ClassificationModule(model, optim, datamodule.num_classes, datamodule.head_kind)
    return datamodule, module


@dataclass
class TrainerParts:
    """The trainer of a run and the callbacks the run reads after fitting."""

    trainer: Trainer
    perf: PerfMonitor
    signals: SaveOnSignal


def build_trainer(
    cfg: DictConfig, module: ClassificationModule, output_dir: Path, precision: str,
    identity: dict[str, Any],
) -> TrainerParts:
    """The loggers, callbacks and trainer of a checked config's run around its built `module`
    (compiled here when model.compile is set); `precision` is the one the launch checks resolved
    (launch.check_launch), `identity` the run's (checkpoint_identity.run_identity), written into
    every checkpoint."""
    if cfg.model.get("compile"):
        # In place: the state_dict keeps its keys.
        module.model.compile(backend=str(cfg.model.compile))
    loggers = build_loggers(cfg)
    perf = PerfMonitor()
    # Always on: no checkpoint with NaN/inf state is written; SIGTERM/SIGINT save one.
    # The Hydra choices (config.yaml): two presets of one attention class stay apart.
    guard = FiniteCheckpointGuard(str(cfg.attention_name), module.optim_settings.lr)
    signals = SaveOnSignal(output_dir / "checkpoints")
    callbacks = [
        instantiate_group(node, f"callbacks.{key}")
        for key, node in (cfg.get("callbacks") or {}).items()
        if node is not None
    ]
    # The trainer refuses a progress bar or model summary callback it was told to turn off.
    if not cfg.trainer.get("enable_progress_bar", True):
        callbacks = [c for c in callbacks if not isinstance(c, ProgressBar)]
    if not cfg.trainer.get("enable_model_summary", True):
        callbacks = [c for c in callbacks if not isinstance(c, ModelSummary)]
    strategy = str(cfg.trainer.get("strategy", "auto"))
    # Sharded strategies (fsdp, deepspeed) bring their own checkpoint writers.
    plugins = [] if any(s in strategy for s in ("fsdp", "deepspeed")) else [AtomicCheckpointIO()]
    if pretrain_config.objective(cfg) != pretrain_config.NONE:
        callbacks.append(TokenCount())  # the tokens of each stage, for the run's summary
    injected = (
        [*callbacks, perf, guard, signals, StoreRunIdentity(identity)],  # callbacks
        loggers or False,  # logger
        precision,
        plugins,
    )
    trainer = instantiate_group(
        cfg.trainer, "trainer", **dict(zip(TRAINER_ARGS, injected, strict=True))
    )
    return TrainerParts(trainer, perf, signals)


def build_components(
    cfg: DictConfig, output_dir: Path, commit: str | None, precision: str
) -> Components:
    """Every object of a checked config's run, for code that builds a run without training it
    (studies.step_profile, tests): seed, build_module, the identity, build_trainer, the loggers
    told the config, as run.train does step by step. No data is loaded or checked."""
    seed_everything(cfg.seed, workers=True)
    datamodule, module = build_module(cfg)
    identity = run_identity(cfg, commit)
    parts = build_trainer(cfg, module, output_dir, precision, identity)
    for logger in parts.trainer.loggers:
        logger.log_hyperparams(logged_config(cfg, precision))
    return Components(datamodule, module, parts.trainer, parts.perf, precision, parts.signals,
                      identity)
