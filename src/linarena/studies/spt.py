"""The protocol of the self-pretraining studies (SPT; Amos, Berant & Gupta, "Never Train from
Scratch", ICLR 2024), declared in spt_study: does pretraining each model on the task's own inputs
change how the attentions compare?

Each attention of the preset's `study:` block is trained at each seed in three arms, a folder
per run, <root>/<arm>/seed<s>/<attention>/:
- scratch: from scratch at the preset's fine-tuning steps F (trainer.max_steps). Where the
  block names a published runs CSV (`published`: the small-budget ListOps sweep,
  docs/results/results_runs.csv), its rows of the same task and F are these runs, read from
  the file and never retrained (spt_runs); an attention or seed without a row there is trained.
- spt: the preset as it is, P steps of masked-token pretraining (pretrain.max_steps), then F of
  fine-tuning: compared with scratch at equal fine-tuning steps.
- scratch_total: from scratch at P + F steps: compared with spt at equal total steps.
A scratch arm runs the preset with pretrain=none and its pretraining keys deleted (~pretrain.*),
so it is the same model, data and optimizer. Where the block sets a success `threshold` and
`more_seeds`, an attention whose seeds split at it in any arm gets the more seeds in every arm.
The finished runs are spt_runs', the time left spt_plan's.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from pathlib import Path

from linarena.analysis.provenance import PUBLISHED_DIR
from linarena.attention.variants import check_variant_names, variant_names
from linarena.studies.preset import compose_preset
from linarena.studies.study import SettingsPoint, train_commands

ARMS = ("scratch", "spt", "scratch_total")
SCRATCH, SPT, SCRATCH_TOTAL = ARMS


@dataclasses.dataclass(frozen=True)
class Protocol:
    """What every run of the study shares, from the preset (with the command line's overrides)
    and its `study:` block: the task, P pretraining and F fine-tuning steps, the masking
    fraction, the seeds, the attentions, the success threshold (None: accuracies are compared
    as means only), chance, the published runs CSV of the scratch arm, and the overrides that
    make a run of the preset start from scratch."""

    preset: str
    task: str
    pretrain_steps: int
    finetune_steps: int
    mask_fraction: float
    seeds: tuple[int, ...]
    more_seeds: tuple[int, ...]
    attentions: tuple[str, ...]
    threshold: float | None
    chance: float | None
    published: Path | None
    scratch_overrides: tuple[str, ...]
    model: str

    def steps(self, arm: str) -> tuple[int, int]:
        """(pretraining steps, classifier steps) of a run in `arm`."""
        p, f = self.pretrain_steps, self.finetune_steps
        return {SCRATCH: (0, f), SPT: (p, f), SCRATCH_TOTAL: (0, p + f)}[arm]

    def total_steps(self, arm: str) -> int:
        return sum(self.steps(arm))

    def arm_words(self, arm: str) -> str:
        """'SPT, 300 + 300 steps' for the tables and the figure."""
        p, f = self.steps(arm)
        return f"SPT, {p} + {f} steps" if arm == SPT else f"from scratch, {f} steps"


def override_key(override: str) -> str:
    """The key a train.py override sets ("pretrain.max_steps" of "+pretrain.max_steps=3")."""
    return override.lstrip("~+").partition("=")[0]


def split_overrides(overrides: Sequence[str]) -> tuple[list[str], list[str]]:
    """(study.* overrides, which change the grid; the others, for train.py)."""
    grid = [o for o in overrides if override_key(o).startswith("study.")]
    return grid, [o for o in overrides if o not in grid]


def load_protocol(preset: str, overrides: Sequence[str] = ()) -> Protocol:
    """The Protocol of experiment=<preset> with `overrides` (study.* ones change the block)."""
    grid, train = split_overrides(overrides)
    cfg = compose_preset(preset, [*train, *grid], hydra_config=True)
    if "study" not in cfg:
        raise ValueError(f"experiment={preset} has no `study:` block (seeds, attentions, "
                         "threshold, published); use spt/listops_small or spt/pathfinder_small")
    if cfg.pretrain.objective != "mlm" or cfg.pretrain.get("stage") != "both":
        raise ValueError(f"experiment={preset}: the SPT arm needs pretrain=mlm with "
                         f"pretrain.stage=both, not {cfg.pretrain.objective}, "
                         f"{cfg.pretrain.get('stage')}")
    task = str(cfg.hydra.runtime.choices.data)
    fraction = cfg.pretrain.get("mask_fraction")
    if fraction is None:
        fraction = (cfg.pretrain.get("mask_fractions") or {}).get(task)
    block = cfg.study
    names = list(block.get("attentions") or variant_names())
    more = tuple(block.get("more_seeds") or ())
    seeds = tuple(block.get("seeds") or ())
    if not seeds or set(more) & set(seeds):
        raise ValueError(f"experiment={preset}: study.seeds {list(seeds)} must list seeds, and "
                         f"study.more_seeds {list(more)} only new ones")
    published = block.get("published")
    if published is not None:
        published = Path(str(published))
        published = published if published.is_absolute() else PUBLISHED_DIR.parents[1] / published
    # The scratch arms: the same run without pretraining; the preset's pretrain keys would be
    # unknown to pretrain=none (train.py refuses them), so they are deleted.
    plain = compose_preset(preset, [*(o for o in train if not _pretraining(o)), "pretrain=none"])
    deleted = [f"~pretrain.{key}" for key in plain.pretrain if key != "objective"]
    model = cfg.model
    return Protocol(
        preset=preset, task=task, pretrain_steps=int(cfg.pretrain.max_steps),
        finetune_steps=int(cfg.trainer.max_steps),
        mask_fraction=float("nan") if fraction is None else float(fraction),
        seeds=seeds, more_seeds=more, attentions=tuple(check_variant_names(names)),
        threshold=None if block.get("threshold") is None else float(block.threshold),
        chance=None if block.get("chance") is None else float(block.chance),
        published=published, scratch_overrides=("pretrain=none", *deleted),
        model=(f"d_model {model.d_model}, {model.num_layers} layer"
               f"{'s' * (model.num_layers != 1)}, {model.num_heads} heads, "
               f"batch {cfg.data.batch_size}"))


def _pretraining(override: str) -> bool:
    key = override_key(override)
    return key == "pretrain" or key.startswith("pretrain.")


def arm_overrides(arm: str, protocol: Protocol, overrides: Sequence[str]) -> tuple[str, ...]:
    """The train.py overrides of a run in `arm`: the command line's (not study.*), and for a
    scratch arm the scratch overrides instead of any pretraining one, at P + F steps for
    scratch_total."""
    train = split_overrides(overrides)[1]
    if arm == SPT:
        return tuple(train)
    kept = [o for o in train if not _pretraining(o)
            and not (arm == SCRATCH_TOTAL and override_key(o) == "trainer.max_steps")]
    steps = [f"trainer.max_steps={protocol.total_steps(arm)}"] if arm == SCRATCH_TOTAL else []
    return (*protocol.scratch_overrides, *kept, *steps)


@dataclasses.dataclass(frozen=True)
class ArmPoint(SettingsPoint):
    """One arm at one seed: its attentions, each in its own train.py process, in
    <root>/<arm>/seed<s>/<attention>/, one sweep per arm for compare.py (<root>/<arm>)."""

    arm: str
    seed: int
    overrides: tuple[str, ...] = ()

    @property
    def folder_name(self) -> str:
        return f"{self.arm}/seed{self.seed}"

    @property
    def settings(self) -> list[str]:
        return [*self.overrides, f"seed={self.seed}"]

    def commands(self, preset: str | None, names: Sequence[str], root: Path,
                 entries: Mapping[str, Sequence[str]] | None = None) -> list[list[str]]:
        return train_commands(preset, self.settings, names, root / self.folder_name, entries,
                              sweep_dir=root / self.arm, process_per_run=True)
