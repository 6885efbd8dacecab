"""MQAR study results: one row per run from its folder, state sizes, the best learning rate.

Each run folder holds summary.json (metrics, hparams) and .hydra/config.yaml (the full config,
written by Hydra), from which the state size is computed.

State size, in numbers kept per sequence while decoding, summed over layers:
- a linear attention (a LinearAttention of conf/attention/): its recurrent state, per head the
  matrix S = sum_j phi(k_j) v_j^T (num_features x head_dim) and the normaliser z = sum_j phi(k_j)
  (num_features), so num_features(head_dim) * (head_dim + 1) * heads * layers;
- a recurrence with decay, gates or the delta rule (a RecurrentAttention: RetNet, GLA, Mamba-2,
  DeltaNet, Gated DeltaNet): per head the state S (k_dim x v_dim = head_dim x head_dim; plus
  k_dim for output_norm=denominator), so its state_size() * heads * layers. The gates, beta and
  the output norm keep nothing from one token to the next;
- softmax: its KV cache at the test length, 2 * length * d_model * layers. It grows with the
  length, unlike a recurrent state; the plot draws softmax dashed to say so.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from pathlib import Path

import pandas as pd
from hydra.utils import instantiate
from omegaconf import OmegaConf

from linarena.attention.linear import LinearAttention
from linarena.attention.recurrent import RecurrentAttention
from linarena.attention.variants import label, variant_names
from linarena.training.summary import SUMMARY_FILE

RUN_COLUMNS = ("attention", "label", "short_conv", "d_model", "num_heads", "num_layers", "lr",
               "state_size", "state_kind", "test_acc", "val_acc_best", "max_steps", "vocab_size",
               "seq_len", "num_pairs", "run")
GROUP = ["attention", "short_conv", "d_model"]


def state_size(config: dict) -> tuple[int, str]:
    """(numbers, "recurrent" or "kv_cache") for the model a composed run config builds."""
    model = dict(config["model"], max_length=config["data"]["max_length"])
    head_dim = model["d_model"] // model["num_heads"]
    factory = instantiate(OmegaConf.create({"model": model, "attention": config["attention"]}).attention)
    core = factory(head_dim=head_dim, causal=True)
    if isinstance(core, LinearAttention):
        per_head = core.feature_map.num_features(head_dim) * (head_dim + 1)
        return per_head * model["num_heads"] * model["num_layers"], "recurrent"
    if isinstance(core, RecurrentAttention):
        return core.state_size() * model["num_heads"] * model["num_layers"], "recurrent"
    return 2 * config["data"]["max_length"] * model["d_model"] * model["num_layers"], "kv_cache"


def attention_choice(folder: Path, summary: dict) -> str:
    """The conf/attention/ name the run was started with (`attention=<name>`), from Hydra's
    .hydra/hydra.yaml: summary.json names the class ("linear" for every LinearAttention)."""
    hydra_file = folder / ".hydra" / "hydra.yaml"
    if hydra_file.is_file():
        choice = OmegaConf.load(hydra_file).hydra.runtime.choices.get("attention")
        if choice:
            return str(choice)
    return str(summary["attention"])


def run_row(folder: Path) -> dict:
    """The row of one finished run folder (summary.json and .hydra/config.yaml)."""
    summary = json.loads((folder / SUMMARY_FILE).read_text())
    config_path = folder / ".hydra" / "config.yaml"
    if not config_path.is_file():
        raise FileNotFoundError(f"{config_path}: missing; the study reads each run's config "
                                "from the folder Hydra wrote (train.py with hydra.run.dir=...)")
    config = OmegaConf.to_container(OmegaConf.load(config_path), resolve=False)
    attention = attention_choice(folder, summary)
    size, kind = state_size(config)
    model, data, metrics = config["model"], config["data"], summary["metrics"]
    return {
        "attention": attention, "label": label(attention),
        "short_conv": int(model.get("short_conv", 0)), "d_model": model["d_model"],
        "num_heads": model["num_heads"], "num_layers": model["num_layers"],
        "lr": config["optim"]["lr"], "state_size": size, "state_kind": kind,
        "test_acc": metrics["test/acc"], "val_acc_best": metrics["val/acc_best"],
        "max_steps": config["trainer"]["max_steps"], "vocab_size": data["vocab_size"],
        "seq_len": data["max_length"], "num_pairs": data["num_pairs"],
        "run": f"{folder.parent.name}/{folder.name}",
    }


def load_study(roots: Iterable[str | Path]) -> pd.DataFrame:
    """One row per finished run (a folder with summary.json) under `roots`, in RUN_COLUMNS."""
    folders = sorted(path.parent for root in map(Path, roots) for path in root.rglob(SUMMARY_FILE))
    if not folders:
        raise FileNotFoundError(f"no {SUMMARY_FILE} under {[str(r) for r in roots]}: run "
                                "scripts/mqar_study.py first, or point --runs at its folder")
    return pd.DataFrame([run_row(folder) for folder in folders], columns=list(RUN_COLUMNS))


def best_per_setting(runs: pd.DataFrame) -> pd.DataFrame:
    """Per (attention, short_conv, d_model): the run with the best val/acc_best (its lr chosen
    on validation), with its test accuracy, and how many learning rates were tried."""
    ranked = runs.sort_values(["val_acc_best", "test_acc"], ascending=False)
    best = ranked.groupby(GROUP, sort=False).head(1).copy()
    tried = runs.groupby(GROUP).size().rename("lrs_tried")
    best = best.join(tried, on=GROUP).rename(columns={"lr": "best_lr"})
    return best.sort_values(GROUP).reset_index(drop=True)


def accuracy_table(best: pd.DataFrame) -> str:
    """Markdown: a row per attention and short_conv, a column per width, best test accuracy %."""
    table = best.pivot_table(index=["attention", "short_conv"], columns="d_model",
                             values="test_acc")
    order = {name: index for index, name in enumerate(variant_names())}
    table = table.sort_index(key=lambda index: index.map(
        lambda value: order.get(value, len(order)) if isinstance(value, str) else -value))
    lines = ["| attention | short conv | " + " | ".join(f"d={w}" for w in table.columns) + " |",
             "|---|---|" + "---|" * len(table.columns)]
    for (name, conv), row in table.iterrows():
        cells = " | ".join("–" if pd.isna(v) else f"{100 * v:.1f}" for v in row)
        lines.append(f"| {label(name)} | {conv or 'off'} | {cells} |")
    return "\n".join(lines) + "\n"
