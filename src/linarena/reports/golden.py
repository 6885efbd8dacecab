"""Golden runs: a few optimizer steps of every preset behind a published result, on tiny data.

A golden run composes the preset's config as train.py would (conf/, with the preset's
overrides), generates a few batches with the preset's own datamodule (smaller splits and batch,
same generator and seed), builds the model with `build_model` and trains `STEPS` AdamW steps with
the preset's optimizer and schedule, in float32 on the CPU. Its losses and parameter norms
(before each step and after the last) are pinned in tests/golden/golden_losses.json;
tests/training/test_golden_runs.py recomputes them. A change that moves them changes the preset's
numbers, so the results listed with the case (files of docs/results/) no longer come from the code:
rerun them or mark them stale (scripts/maintainer/provenance.py --stale).
"""

from __future__ import annotations

import dataclasses
import functools
import tempfile
from collections.abc import Sequence
from itertools import islice
from pathlib import Path

import torch
from hydra import compose, initialize_config_dir
from hydra.utils import instantiate
from lightning.pytorch import seed_everything
from omegaconf import DictConfig
from torch.nn import functional as F

from linarena.analysis.bench_cases import TEXT_MODEL, CaseSpec, build_classifier
from linarena.analysis.provenance import PUBLISHED_DIR
from linarena.analysis.result_files import read_csv_checked
from linarena.attention.variants import CONF_DIR, variant_names
from linarena.data.batching import IGNORE_INDEX
from linarena.studies.mixture_study import load_mixture_grid, own_conv_entries
from linarena.studies.preset import load_grid
from linarena.studies.state_size import trains_at
from linarena.training.build import build_model
from linarena.training.optim import build_optimizer, build_scheduler

GOLDEN_FILE = CONF_DIR.parent / "tests" / "golden" / "golden_losses.json"
STEPS = 4         # optimizer steps; STEPS + 1 losses and parameter norms are pinned
BATCH = 4         # examples per step
SEED = 1          # the training seed of the published runs' first seed
BENCH_LENGTH = 32  # tokens per sequence in the benchmark model's golden run
STUDY_PRESET = "mqar_study_cpu"      # the presets of the published studies
MIXTURE_PRESET = "mqar_mixture_cpu"

SWEEPS_RERUN = ("bash scripts/maintainer/reproduce_results.sh sweeps (scripts/seed_sweep.py "
                "over every attention: ListOps at seeds 1-10, mqar_cpu at 1-5 and 6-10 where "
                "they split; then scripts/compare.py --published --out docs/results)")
STUDY_RERUN = ("python scripts/mqar_study.py --preset mqar_study_cpu --jobs 2 "
               "--out docs/results, then scripts/mqar_step_budget.py (bash "
               "scripts/maintainer/reproduce_results.sh study runs both)")
BENCH_RERUN = "python scripts/benchmark_model.py --out docs/results"
MIXTURE_RERUN = ("python scripts/mqar_mixture.py --preset mqar_mixture_cpu --jobs 2 --out "
                 "docs/results (bash scripts/maintainer/reproduce_results.sh mixture)")


@dataclasses.dataclass(frozen=True)
class GoldenCase:
    """One preset and attention; `results`: the docs/results/ files its numbers feed."""

    preset: str          # conf/experiment/ name, "" for the default config, "benchmark_model"
    attention: str       # a variant of conf/attention/, or a study entry's name (a hybrid)
    overrides: tuple[str, ...]
    results: tuple[str, ...]
    rerun: str

    @property
    def name(self) -> str:
        return f"{self.preset or 'default'}/{self.attention}"

    @property
    def train_overrides(self) -> list[str]:
        """What train.py is given: attention=<variant> (a hybrid's blocks come from its
        model.pattern in `overrides` instead, as the study runs it), then `overrides`."""
        variant = [f"attention={self.attention}"] if self.attention in variant_names() else []
        return [*variant, *self.overrides]


def cases(sweep: Sequence[str], bench: Sequence[str], study: Sequence[str],
          mixture: Sequence[str] = ()) -> list[GoldenCase]:
    """The golden cases of the published results: the small-budget sweeps over the attentions
    `sweep`, the model benchmark over `bench`, the MQAR state-size study over `study` (its
    variants and hybrid entries, at each short-conv setting of its grid the study trains them
    at, with their entry's overrides), the MQAR mixture over `mixture` (at each kind of
    positions of its study block; a layer with its own convolutions without model.short_conv),
    each as its study's commands train it."""
    sweep_files = ("results.csv", "results.md")
    found = []
    for name in sweep:
        found.append(GoldenCase("", name, ("trainer.max_steps=300",),
                                (*sweep_files, "scatter_listops_small.png"), SWEEPS_RERUN))
        found.append(GoldenCase("mqar_cpu", name, (), (*sweep_files, "scatter_mqar.png"),
                                SWEEPS_RERUN))
    for name in bench:
        found.append(GoldenCase("benchmark_model", name, (),
                                ("benchmark_model.csv", "benchmark_model.png"), BENCH_RERUN))
    # The step-budget check reruns the study's points with more steps: same preset.
    study_files = (*(f"mqar_state_size{suffix}" for suffix in (".csv", "_runs.csv", ".md", ".png")),
                   *(f"mqar_step_budget{suffix}" for suffix in (".csv", "_runs.csv", ".md")))
    grid = load_grid(STUDY_PRESET)
    for name in study:
        for conv in grid["short_conv"]:
            if trains_at(name, conv):
                overrides = (*grid["entries"].get(name, ()), f"model.short_conv={conv}")
                found.append(GoldenCase(STUDY_PRESET, name, overrides, study_files, STUDY_RERUN))
    mixture_files = tuple(f"mqar_mixture{suffix}" for suffix in (".csv", "_runs.csv", ".md"))
    own_conv = own_conv_entries(mixture)
    for positions in load_mixture_grid(MIXTURE_PRESET)["positions"]:
        found += [GoldenCase(MIXTURE_PRESET, name,
                             (f"model.positions={positions}", *own_conv.get(name, ())),
                             mixture_files, MIXTURE_RERUN) for name in mixture]
    return found


def published(csv: str, folder: Path = PUBLISHED_DIR) -> list[str]:
    """The attentions of a published result (its CSV in `folder`); none for one not run yet."""
    path = folder / csv
    if not path.is_file():
        return []
    table = read_csv_checked(path, ["attention"], filled_columns=["attention"])
    return sorted(set(table["attention"]))


def published_cases(folder: Path = PUBLISHED_DIR) -> list[GoldenCase]:
    """The golden cases of the results published in `folder`, over the attentions each holds:
    a rerun that adds attentions adds their cases (pinned by scripts/maintainer/golden_runs.py)."""
    return cases(published("results.csv", folder), published("benchmark_model.csv", folder),
                 published("mqar_state_size.csv", folder), published("mqar_mixture.csv", folder))


def case_key(case: GoldenCase) -> str:
    """The key of a case in the golden file: preset/attention[/overrides]."""
    extra = [o for o in case.overrides if not o.startswith("trainer.max_steps")]
    return "/".join([case.name, *extra])


def _loss(model: torch.nn.Module, batch: dict[str, torch.Tensor]) -> torch.Tensor:
    """The training loss of ClassificationModule: cross-entropy over scored labels."""
    logits = model(batch["tokens"], batch["mask"])
    return F.cross_entropy(logits.reshape(-1, logits.shape[-1]).float(),
                           batch["label"].reshape(-1), ignore_index=IGNORE_INDEX)


def _parameter_norm(model: torch.nn.Module) -> float:
    """The L2 norm of all parameters together: moves with any change of initialisation or
    update, where a loss may barely move (its gradient in that direction is small)."""
    return torch.sqrt(sum(p.detach().double().square().sum() for p in model.parameters())).item()


def _train(model: torch.nn.Module, optimizer: torch.optim.Optimizer,
           scheduler: torch.optim.lr_scheduler.LRScheduler | None,
           batches: list[dict[str, torch.Tensor]]) -> list[float]:
    """STEPS steps over `batches` (cycled). Returns the loss before each step and after the
    last, then the parameter norm before each step and after the last (2 * (STEPS + 1))."""
    losses, norms = [], []
    model.train()
    for step in range(STEPS + 1):
        optimizer.zero_grad(set_to_none=True)
        norms.append(_parameter_norm(model))
        loss = _loss(model, batches[step % len(batches)])
        losses.append(loss.item())
        if step == STEPS:
            break
        loss.backward()
        optimizer.step()
        if scheduler is not None:
            scheduler.step()
    return losses + norms


def _compose(preset: str, overrides: Sequence[str]) -> DictConfig:
    """The config train.py composes for `experiment=<preset>` (or the default) and overrides,
    at the golden size: BATCH x STEPS training examples, one of each other split. A mixture of
    (length, pairs) settings (data.train and data.test lists) keeps its settings, each with
    BATCH x STEPS training examples and one validation and test example."""
    overrides = [*overrides, f"seed={SEED}", f"data.batch_size={BATCH}", "data.num_workers=0"]
    if preset:
        overrides.insert(0, f"experiment={preset}")
    with initialize_config_dir(config_dir=str(CONF_DIR), version_base="1.3"):
        cfg = compose(config_name="config", overrides=overrides)
    data = cfg.data
    if "num_train" in data:
        data.num_train, data.num_val, data.num_test = BATCH * STEPS, 1, 1
    else:
        for setting in data.train:
            setting.examples = BATCH * STEPS
        for setting in data.test:
            setting.examples = 1
        data.num_val = 1
    return cfg


@functools.lru_cache(maxsize=16)
def _batches(preset: str, overrides: tuple[str, ...]) -> list[dict[str, torch.Tensor]]:
    """The first STEPS training batches of the preset's datamodule, generated in a temporary
    folder (cached per data setting: the attentions of one preset share them)."""
    cfg = _compose(preset, overrides)
    with tempfile.TemporaryDirectory() as data_dir:
        cfg.paths.data_dir = data_dir
        seed_everything(cfg.seed, workers=True, verbose=False)
        datamodule = instantiate(cfg.data)
        datamodule.setup("fit")
        return list(islice(iter(datamodule.train_dataloader()), STEPS))


def run_preset(case: GoldenCase) -> list[float]:
    """The losses of the golden run of a train.py preset (see the module docstring)."""
    cfg = _compose(case.preset, case.train_overrides)
    batches = _batches(case.preset, tuple(o for o in case.overrides if o.startswith("data.")))
    seed_everything(cfg.seed, verbose=False)
    model = build_model(cfg, instantiate(cfg.data))
    settings = instantiate(cfg.optim, _convert_="all")
    optimizer = build_optimizer(model, settings)
    scheduler = build_scheduler(optimizer, settings, int(cfg.trainer.max_steps))
    return _train(model, optimizer, scheduler, batches)


def run_benchmark_model(case: GoldenCase) -> list[float]:
    """The losses of the model benchmark's step (scripts/benchmark_model.py: the LRA text model,
    AdamW lr 1e-4, random bytes) at BENCH_LENGTH tokens, float32 on the CPU."""
    spec = CaseSpec(attention=case.attention, length=BENCH_LENGTH, what="model_step", batch=BATCH,
                    device="cpu", dtype="float32", threads=torch.get_num_threads(), warmup=0,
                    repeats=1, shape=TEXT_MODEL, conf_dir=str(CONF_DIR))
    seed_everything(SEED, verbose=False)
    model = build_classifier(spec)
    generator = torch.Generator().manual_seed(0)
    tokens = torch.randint(1, TEXT_MODEL.vocab_size, (BATCH, BENCH_LENGTH), generator=generator)
    labels = torch.randint(0, TEXT_MODEL.num_classes, (BATCH,), generator=generator)
    batch = {"tokens": tokens, "mask": torch.ones_like(tokens, dtype=torch.bool), "label": labels}
    return _train(model, torch.optim.AdamW(model.parameters(), lr=1e-4), None, [batch])


def run_case(case: GoldenCase) -> list[float]:
    """The golden losses of `case`."""
    if case.preset == "benchmark_model":
        return run_benchmark_model(case)
    return run_preset(case)
