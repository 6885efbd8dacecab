"""Token tasks (a label per position) get their datasets from TaskDataModule itself, and a task
says in its TaskSpec whether it is meant for causal attention."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch
from helpers.training import compose_config, config_names
from hydra.utils import instantiate

from linarena.data import DataConfigError, TaskDataModule, TaskSpec
from linarena.data.base import SPLITS
from linarena.data.batching import IGNORE_INDEX


class PreviousToken(TaskDataModule):
    """At each position but the first, the label is the token before it: a causal token task
    that implements only cache_config() and build()."""

    def __init__(self, data_dir: Path) -> None:
        spec = TaskSpec("previous", "token", vocab_size=5, num_classes=5, max_length=8,
                        causal=True)
        super().__init__(spec, data_dir, batch_size=4, num_workers=0, seed=0)

    def cache_config(self) -> dict:
        return {}

    def build(self) -> dict[str, torch.Tensor]:
        rng = np.random.default_rng(0)
        tensors = {}
        for split in SPLITS:
            tokens = rng.integers(1, 5, size=(6, 8))
            labels = np.full_like(tokens, IGNORE_INDEX)
            labels[:, 1:] = tokens[:, :-1]
            tensors[f"{split}/tokens"] = torch.from_numpy(tokens).to(torch.int16)
            tensors[f"{split}/labels"] = torch.from_numpy(labels).to(torch.int16)
        return tensors


def test_a_token_task_needs_no_dataset_code_of_its_own(tmp_path: Path) -> None:
    datamodule = PreviousToken(tmp_path)
    batch = next(iter(datamodule.val_dataloader()))
    tokens, labels = batch["tokens"], batch["label"]
    assert tokens.shape == labels.shape == (4, 8) and tokens.dtype == labels.dtype == torch.long
    assert (labels[:, 0] == IGNORE_INDEX).all() and torch.equal(labels[:, 1:], tokens[:, :-1])
    assert batch["mask"].all() and datamodule.causal


def test_a_spec_states_causal_as_a_bool() -> None:
    assert not TaskSpec("toy", "sequence", 8, 2, 16).causal
    with pytest.raises(DataConfigError, match="states causal='yes'; it must be True or False"):
        TaskSpec("toy", "token", 8, 8, 16, causal="yes")


@pytest.mark.parametrize("task", config_names("data"))
def test_a_task_that_classifies_whole_sequences_is_never_causal(task: str) -> None:
    """Whole-sequence tasks (LRA's, your own sequences) read every token, as LRA trains them;
    only a per-token task may declare itself causal (MQAR's tasks do, as in Zoology)."""
    datamodule = instantiate(compose_config([f"data={task}"]).data, data_dir="unused")
    if datamodule.head_kind != "token":
        assert not datamodule.causal
    if task.startswith("mqar"):
        assert datamodule.causal
