"""A study preset: its grid (the `study:` block) and its protocol (what every run shares).

A study preset (conf/experiment/mqar_study_*.yaml) holds the training settings and a `study:`
block with the grid: model widths, short-conv settings, learning rates, seeds, the seeds the
lr is chosen on, the seeds added where outcomes split, and entries beyond the variants.
Its protocol, the values of runs.PROTOCOL, is what an archived run must match to count as a run
of the study (runs.load_archive).
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from hydra import compose, initialize_config_dir
from hydra.errors import HydraException
from omegaconf import DictConfig, OmegaConf

from linarena.attention.patterns import is_pattern_name
from linarena.attention.variants import CONF_DIR
from linarena.errors import ConfigError


def study_presets(conf_dir: Path = CONF_DIR) -> list[str]:
    """The study presets: conf/experiment/mqar_study_*.yaml."""
    return sorted(path.stem for path in (conf_dir / "experiment").glob("mqar_study_*.yaml"))


def compose_preset(preset: str | None, overrides: Sequence[str] = (),
                   conf_dir: Path = CONF_DIR, hydra_config: bool = False) -> DictConfig:
    """The config of `experiment=<preset>` (None: the default config) with `overrides`, with
    its `hydra` node if `hydra_config`; an unknown preset, or an override Hydra cannot apply,
    is a ConfigError of one line (the study presets, Hydra's reason)."""
    if preset is not None and not (conf_dir / "experiment" / f"{preset}.yaml").is_file():
        raise ConfigError(f"--preset {preset}: no such preset (no {conf_dir}/experiment/"
                          f"{preset}.yaml); the study presets: "
                          f"{', '.join(study_presets(conf_dir))}")
    chosen = [] if preset is None else [f"experiment={preset}"]
    try:
        with initialize_config_dir(config_dir=str(conf_dir), version_base="1.3"):
            return compose(config_name="config", overrides=[*chosen, *overrides],
                           return_hydra_config=hydra_config)
    except HydraException as error:
        reason = " ".join(str(error).split())
        raise ConfigError(f"{' '.join([*chosen, *overrides])}: {reason}") from error


def sweep_protocol(preset: str | None, overrides: Sequence[str] = (),
                   conf_dir: Path = CONF_DIR) -> tuple[str, int]:
    """The task (the data choice, summary.json's "task") and trainer.max_steps of a run under
    experiment=<preset> (None: the default config) with `overrides`: what an archived run of a
    seed sweep must match (seed_sweep.archived_runs)."""
    cfg = compose_preset(preset, overrides, conf_dir, hydra_config=True)
    return str(cfg.hydra.runtime.choices.data), int(cfg.trainer.max_steps)


def load_grid(preset: str, overrides: Sequence[str] = (),
              conf_dir: Path = CONF_DIR) -> dict[str, Any]:
    """The `study:` block of conf/experiment/<preset>.yaml, with `overrides` of it
    (e.g. "study.widths=[16,32]"): the lists widths, short_conv, lrs and seeds; lr_seeds (the
    seeds that try every lr, the lr being chosen on them; None: every seed tries every lr);
    more_seeds (added at a point whose `seeds` split, state_size.split_points; default none);
    entries ({name: [train.py overrides]}: a variant's settings in this study, or a hybrid stack,
    named as patterns.pattern_name names it, with its model.pattern; default none)."""
    cfg = compose_preset(preset, overrides, conf_dir)
    if "study" not in cfg:
        raise ValueError(f"experiment={preset} has no `study:` block (widths, short_conv, lrs, "
                         "seeds); use a study preset such as mqar_study_cpu")
    keys = ("widths", "short_conv", "lrs", "seeds")
    grid: dict[str, Any] = {key: list(cfg.study.get(key) or []) for key in keys}
    empty = [key for key in keys if not grid[key]]
    if empty:
        raise ValueError(f"experiment={preset}: study.{empty[0]} is empty; list at least one value")
    lr_seeds = cfg.study.get("lr_seeds")
    grid["lr_seeds"] = None if lr_seeds is None else list(lr_seeds)
    if grid["lr_seeds"] is not None and (not grid["lr_seeds"]
                                         or not set(grid["lr_seeds"]) <= set(grid["seeds"])):
        raise ValueError(f"experiment={preset}: study.lr_seeds={grid['lr_seeds']} must be some "
                         f"of study.seeds {grid['seeds']}, or null (every seed tries every lr)")
    grid["more_seeds"] = list(cfg.study.get("more_seeds") or [])
    if set(grid["more_seeds"]) & set(grid["seeds"]):
        raise ValueError(f"experiment={preset}: study.more_seeds={grid['more_seeds']} repeats "
                         f"seeds of study.seeds {grid['seeds']}; list new seeds only")
    node = cfg.study.get("entries")
    entries = {} if node is None else OmegaConf.to_container(node, resolve=True)
    grid["entries"] = {str(name): [str(o) for o in (extra or [])]
                       for name, extra in entries.items()}
    unknown = [name for name in grid["entries"] if not is_pattern_name(name)]
    if unknown:
        raise ValueError(f"experiment={preset}: study.entries.{unknown[0]} is neither a "
                         "conf/attention/ variant nor a hybrid of them (e.g. gated_deltanet+swa "
                         "with its model.pattern)")
    return grid


def preset_protocol(preset: str, overrides: Sequence[str] = (),
                    conf_dir: Path = CONF_DIR) -> dict[str, int]:
    """The preset's value (with `overrides`) of each runs.PROTOCOL column: what an archived run
    must match to count as a run of this study."""
    cfg = compose_preset(preset, overrides, conf_dir)
    return {"num_layers": cfg.model.num_layers, "max_steps": cfg.trainer.max_steps,
            "vocab_size": cfg.data.vocab_size, "seq_len": cfg.data.max_length,
            "num_pairs": cfg.data.num_pairs}
