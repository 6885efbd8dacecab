"""The runs of an MQAR study: one row per run from its folder (with its state size), the runs
CSV a study wrote before (resume-from, checked against the preset's protocol), and both pooled.

Each run folder holds summary.json (metrics, hparams) and .hydra/config.yaml (the full config,
written by Hydra), from which the state size is computed.

State size, in numbers kept per sequence while decoding, summed over the model's layers, each
layer counted by its own attention (attention_state), so a hybrid stack (model.pattern) sums
its layers' states:
- a linear attention (a LinearAttention of conf/attention/): its recurrent state, per head the
  matrix S = sum_j phi(k_j) v_j^T (num_features x head_dim) and the normaliser z = sum_j phi(k_j)
  (num_features), so num_features(head_dim) * (head_dim + 1) * heads;
- a core that declares its state per head (state_size()): a recurrence with decay, gates or
  the delta rule (a RecurrentAttention: RetNet, GLA, Mamba-2, DeltaNet, Gated DeltaNet: S,
  k_dim x v_dim = head_dim x head_dim, plus k_dim for output_norm=denominator; the gates, beta
  and the output norm keep nothing from one token to the next), or sliding-window attention
  (its window's keys and values), so state_size() * heads;
- a whole layer (linarena.attention.layers): its own state_size(length) (recurrent states, its
  convolutions' last inputs, a window's keys and values);
- softmax: its KV cache at the test length, 2 * length * qkv_dim. It grows with the length,
  unlike the others; a model with such a layer is of kind "kv_cache" (the plot draws it dashed),
  else "recurrent".
A window or a convolution as long as the sequence keeps every token of it: at that length it
is a KV cache, not a fixed state, so a model with one (covers_sequence) is of kind "kv_cache"
too, whatever its layers' recurrences.
"""

from __future__ import annotations

import shlex
from collections.abc import Iterable
from pathlib import Path
from types import SimpleNamespace

import pandas as pd
from omegaconf import OmegaConf
from torch import nn

from linarena.analysis.result_files import read_csv_checked
from linarena.analysis.runs import RunRecord, read_run
from linarena.attention.layers import AttentionLayer
from linarena.attention.linear import LinearAttention
from linarena.attention.patterns import pattern_label
from linarena.attention.sliding_window import SlidingWindowAttention
from linarena.metrics import TEST_ACC
from linarena.models import TransformerClassifier
from linarena.training.build import build_model
from linarena.training.summary import SUMMARY_FILE

RUN_COLUMNS = ("attention", "label", "short_conv", "d_model", "num_heads", "num_layers", "lr",
               "seed", "state_size", "state_kind", "test_acc", "val_acc_best", "steps",
               "best_step", "max_steps", "vocab_size", "seq_len", "num_pairs", "run", "commit")
# Columns a runs CSV may lack (written before they existed): how long the run took, the
# machine it ran on (summary.json's machine: CPU model, the CPU kernels PyTorch ran) and the
# train.py command that trained it (its Hydra overrides).
OPTIONAL_COLUMNS = ("duration_s", "cpu", "cpu_kernels", "command")
# What makes two runs' rows comparable: an archived row (load_archive) must match the study's
# preset on these, or it belongs to another study.
PROTOCOL = ("num_layers", "max_steps", "vocab_size", "seq_len", "num_pairs")
# The RUN_COLUMNS that hold numbers (blank where a run has none, e.g. a diverged run's accuracy).
NUMERIC_COLUMNS = ("short_conv", "d_model", "num_heads", "num_layers", "lr", "seed", "state_size",
                   "test_acc", "val_acc_best", "steps", "best_step", "max_steps", "vocab_size",
                   "seq_len", "num_pairs", "duration_s")
# A point of the study, without its lr and seed.
GROUP = ["attention", "short_conv", "d_model"]


# Only the blocks matter to the state: a per-token head of two classes over two token ids.
DECODER_SIZES = SimpleNamespace(vocab_size=2, num_classes=2, head_kind="token", causal=True)


def attention_state(attention: nn.Module, length: int) -> tuple[int, str]:
    """(numbers, "recurrent" or "kv_cache") one block's attention keeps per sequence after
    `length` tokens: `attention` is the block's MultiHeadAttention (a core between the block's
    projections) or its AttentionLayer."""
    if isinstance(attention, AttentionLayer):
        return attention.state_size(length), "recurrent"
    core, heads, width = attention.core, attention.num_heads, attention.qkv_dim
    head_dim = width // heads
    if isinstance(core, LinearAttention):
        return core.feature_map.num_features(head_dim) * (head_dim + 1) * heads, "recurrent"
    if hasattr(core, "state_size"):  # per head: a recurrence's state, a window's keys, values
        return core.state_size() * heads, "recurrent"
    return 2 * length * width, "kv_cache"


def covers_sequence(model: nn.Module, length: int) -> bool:
    """Whether some part of `model` sees all of a `length`-token sequence at once: a sliding
    window or a convolution at least `length` tokens long (then it is exact attention, or a
    filter, over the whole sequence, and what it keeps is the sequence itself)."""
    for part in model.modules():
        if isinstance(part, SlidingWindowAttention) and part.window >= length:
            return True
        if isinstance(part, nn.Conv1d) and part.kernel_size[0] >= length:
            return True
    return False


def model_state(model: TransformerClassifier, length: int) -> tuple[int, str]:
    """(numbers, kind) a model keeps per sequence after `length` tokens: the sum over its blocks
    of attention_state; "kv_cache" when some block's grows with the length or some window or
    convolution covers the sequence (covers_sequence)."""
    states = [attention_state(block.attention, length) for block in model.blocks]
    grows = any(k == "kv_cache" for _, k in states)
    kind = "kv_cache" if grows or covers_sequence(model, length) else "recurrent"
    return sum(size for size, _ in states), kind


def state_size(config: dict) -> tuple[int, str]:
    """(numbers, "recurrent" or "kv_cache") for the model a composed run config builds (causal,
    as it decodes), at its data.max_length."""
    cfg = OmegaConf.create(config)
    length = cfg.data.max_length
    cfg.model.max_length, cfg.model.causal = length, True
    return model_state(build_model(cfg, DECODER_SIZES), length)


def attention_choice(folder: Path, record: RunRecord) -> str:
    """The conf/attention/ name the run was started with (`attention=<name>`), from Hydra's
    .hydra/hydra.yaml: summary.json names the class ("linear" for every LinearAttention)."""
    hydra_file = folder / ".hydra" / "hydra.yaml"
    if hydra_file.is_file():
        choice = OmegaConf.load(hydra_file).hydra.runtime.choices.get("attention")
        if choice:
            return str(choice)
    return record.attention


def best_step(folder: Path) -> int | None:
    """The step of the best validation accuracy: the best checkpoint's name,
    best-step<N>-acc<...>.ckpt (callbacks/default.yaml); None without one."""
    found = sorted((folder / "checkpoints").glob("best-step*-acc*.ckpt"))
    if not found:
        return None
    return int(found[-1].name.removeprefix("best-step").split("-acc")[0])


def train_command(folder: Path, env: dict[str, str] | None = None) -> str | None:
    """The command that trains this run alone: train.py with the run's own Hydra overrides
    (.hydra/overrides.yaml; a multirun job's are its sweep's values), after the environment
    its numbers depend on (`env`: summary.json's machine.env, e.g. the study runner's
    OMP_NUM_THREADS=1 MKL_NUM_THREADS=1); None without the overrides file."""
    overrides = folder / ".hydra" / "overrides.yaml"
    if not overrides.is_file():
        return None
    settings = [f"{name}={shlex.quote(value)}" for name, value in (env or {}).items()]
    return " ".join([*settings, shlex.join(["python", "train.py",
                                            *map(str, OmegaConf.load(overrides))])])


def train_overrides(command: str) -> list[str]:
    """The Hydra overrides of a train_command (the words after train.py, the environment
    settings before it aside)."""
    words = shlex.split(command)
    return words[words.index("train.py") + 1:]


def run_row(folder: Path) -> dict:
    """The row of one finished run folder: summary.json's fields, as linarena.analysis.runs
    reads them (every schema version; a damaged file is an error naming it), and the model and
    protocol from .hydra/config.yaml."""
    record = read_run(folder / SUMMARY_FILE, required=False)
    config_path = folder / ".hydra" / "config.yaml"
    if not config_path.is_file():
        raise FileNotFoundError(f"{config_path}: missing; the study reads each run's config "
                                "from the folder Hydra wrote (train.py with hydra.run.dir=...)")
    config = OmegaConf.to_container(OmegaConf.load(config_path), resolve=False)
    # A hybrid stack's name is its pattern's (build.build_model), not the attention= choice.
    hybrid = config["model"].get("pattern") is not None
    attention = record.attention if hybrid else attention_choice(folder, record)
    size, kind = state_size(config)
    model, data = config["model"], config["data"]
    return {
        "attention": attention, "label": pattern_label(attention),
        "short_conv": int(model.get("short_conv", 0)), "d_model": model["d_model"],
        "num_heads": model["num_heads"], "num_layers": model["num_layers"],
        "lr": config["optim"]["lr"], "seed": int(config["seed"]), "state_size": size,
        "state_kind": kind, "test_acc": record.metrics.get(TEST_ACC.key),
        "val_acc_best": record.val_acc_best,
        "steps": record.steps, "best_step": best_step(folder),
        "max_steps": config["trainer"]["max_steps"], "vocab_size": data["vocab_size"],
        "seq_len": data["max_length"], "num_pairs": data["num_pairs"],
        "run": f"{folder.parent.name}/{folder.name}", "commit": record.commit,
        "duration_s": record.duration_s, "cpu": record.cpu, "cpu_kernels": record.cpu_kernels,
        "command": train_command(folder, record.env),
    }


def load_study(roots: Iterable[str | Path]) -> pd.DataFrame:
    """One row per finished run (a folder with summary.json) under `roots`, in RUN_COLUMNS and
    OPTIONAL_COLUMNS."""
    folders = sorted(path.parent for root in map(Path, roots) for path in root.rglob(SUMMARY_FILE))
    if not folders:
        raise FileNotFoundError(f"no {SUMMARY_FILE} under {[str(r) for r in roots]}: run "
                                "scripts/mqar_study.py first, or point --runs at its folder")
    return pd.DataFrame([run_row(folder) for folder in folders],
                        columns=[*RUN_COLUMNS, *OPTIONAL_COLUMNS])


def load_archive(path: Path, protocol: dict[str, int]) -> pd.DataFrame:
    """The rows of a runs CSV this study wrote before (<name>_runs.csv), to count as finished
    runs: a study that spans machines or sessions resumes from its committed CSV. Every row
    must have been trained under `protocol` (the preset's value of each PROTOCOL column); a
    damaged file (result_files.read_csv_checked) is a ResultFileError naming the line."""
    runs = read_csv_checked(path, numeric_columns=NUMERIC_COLUMNS,
                            filled_columns=(*GROUP, "lr", "seed", *PROTOCOL, "run"))
    absent = [column for column in RUN_COLUMNS if column not in runs.columns]
    if absent:
        raise ValueError(f"{path}: no column {absent[0]!r}; it was written by an older "
                         "scripts/mqar_study.py, so its runs cannot be resumed: run the study "
                         "without --resume-from")
    for column, value in protocol.items():
        other = runs[runs[column] != value]
        if len(other):
            raise ValueError(f"{path}: run {other['run'].iloc[0]} has {column}="
                             f"{other[column].iloc[0]} but the preset has {value}: those runs "
                             "belong to another study; resume from that study's CSV or none")
    absent_optional = {column: float("nan") for column in OPTIONAL_COLUMNS
                       if column not in runs.columns}
    return runs.assign(**absent_optional)[[*RUN_COLUMNS, *OPTIONAL_COLUMNS]]


def combine(runs: pd.DataFrame | None, archived: pd.DataFrame | None) -> pd.DataFrame:
    """The runs of the study folder and the archived ones it has not rerun (a run's folder
    wins over its archived row)."""
    if archived is None or not len(archived):
        if runs is None:
            raise FileNotFoundError("no finished run: neither the study folder nor the archive "
                                    "has one")
        return runs
    if runs is None or not len(runs):
        return archived.reset_index(drop=True)
    kept = archived[~archived["run"].isin(runs["run"])]
    return pd.concat([kept, runs], ignore_index=True).sort_values("run", kind="stable") \
        .reset_index(drop=True)


def study_runs(root: Path, archived: pd.DataFrame | None) -> pd.DataFrame:
    """The finished runs: the study folder's and the archived ones."""
    if archived is None:
        return load_study([root])
    has_runs = root.is_dir() and any(root.rglob(SUMMARY_FILE))
    return combine(load_study([root]) if has_runs else None, archived)
