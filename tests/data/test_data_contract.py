"""Every task in conf/data/ keeps the contract its datamodule states (linarena.data.TaskSpec).

The tasks come from conf/data/, composed with their debug=smoke sizes (conf/debug_data/smoke/):
a new task file is tested here without being listed. Tasks that read files find the tiny
official-format files of tests/helpers/data_fixtures.py in their data folder.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
import torch
from helpers.data_fixtures import (
    write_aan_release,
    write_cifar_folder,
    write_imdb_folder,
    write_sequences_folder,
)
from helpers.training import compose_config, config_names
from hydra.utils import instantiate

from linarena.data import (
    DataConfigError,
    ListOpsDataModule,
    RetrievalDataModule,
    TaskDataModule,
    TaskSpec,
)
from linarena.data.base import SPLITS
from linarena.data.batching import IGNORE_INDEX
from linarena.errors import LinarenaError

TASKS = config_names("data")


@pytest.fixture(scope="module")
def official_files(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Folder with every official file a task may read, in tiny form. CIFAR-10 gets 5,005
    training images, so that the default 5,000 validation images leave some to train on."""
    folder = tmp_path_factory.mktemp("official")
    write_imdb_folder(folder)
    write_aan_release(folder)
    write_cifar_folder(folder, per_file=1001)
    write_sequences_folder(folder)
    return folder


def data_folder(tmp_path: Path, official_files: Path) -> Path:
    """A fresh data folder that links to the official files."""
    data_dir = tmp_path / "data"
    data_dir.mkdir()
    for entry in official_files.iterdir():
        (data_dir / entry.name).symlink_to(entry)
    return data_dir


def check_batch(batch: dict[str, torch.Tensor], spec: TaskSpec, batch_size: int) -> None:
    """Shapes, dtypes, right padding with pad_id, token and label ranges of one batch."""
    tokens, mask, label = batch["tokens"], batch["mask"], batch["label"]
    size = len(tokens)
    assert 1 <= size <= batch_size
    assert tokens.dtype == label.dtype == torch.long and mask.dtype == torch.bool
    assert tokens.ndim == (3 if spec.head_kind == "pair" else 2)
    if spec.head_kind == "pair":
        assert tokens.shape[1] == 2
    assert 1 <= tokens.shape[-1] <= spec.max_length and mask.shape == tokens.shape
    assert torch.equal(mask, tokens != spec.pad_id)
    assert mask[..., 0].all(), "a sequence without real tokens"
    assert not (mask[..., 1:] & ~mask[..., :-1]).any(), "padding before a real token"
    assert tokens.min() >= 0 and tokens.max() < spec.vocab_size
    if spec.head_kind == "token":
        assert label.shape == tokens.shape
        scored = label != IGNORE_INDEX
        assert scored.any() and not (scored & ~mask).any()
        label = label[scored]
    else:
        assert label.shape == (size,)
    assert label.min() >= 0 and label.max() < spec.num_classes


@pytest.mark.parametrize("task", TASKS)
def test_a_task_builds_batches_that_keep_its_contract_and_rebuilds_identically(
    tmp_path: Path, official_files: Path, task: str
) -> None:
    data_dir = data_folder(tmp_path, official_files)
    cfg = compose_config(["debug=smoke", f"data={task}", f"paths.data_dir={data_dir}"])
    datamodule = instantiate(cfg.data)
    assert isinstance(datamodule, TaskDataModule) and isinstance(datamodule.spec, TaskSpec)
    assert datamodule.max_length == cfg.data.max_length <= cfg.model.max_length
    assert sorted(p.name for p in data_dir.iterdir()) == sorted(
        p.name for p in official_files.iterdir()
    ), "the constructor must read and write nothing"
    datamodule.check_available()
    datamodule.prepare_data()
    datamodule.setup()
    for split in SPLITS:
        loader = getattr(datamodule, f"{split}_dataloader")()
        check_batch(next(iter(loader)), datamodule.spec, cfg.data.batch_size)
    built = {name: tensor.clone() for name, tensor in datamodule.load_tensors().items()}

    shutil.rmtree(data_dir / "cache")
    again = instantiate(cfg.data)
    again.prepare_data()
    rebuilt = again.load_tensors()
    assert again.cache_path == datamodule.cache_path
    assert built.keys() == rebuilt.keys()
    for name, tensor in built.items():
        assert torch.equal(tensor, rebuilt[name]), name


class ForgetsItsClasses(TaskDataModule):
    def __init__(self, data_dir: str, num_classes: object = None) -> None:
        spec = TaskSpec("toy", "sequence", vocab_size=8, num_classes=num_classes, max_length=16)
        super().__init__(spec, data_dir, batch_size=4, num_workers=0, seed=0)


class StatesNoSpec(TaskDataModule):
    def __init__(self, data_dir: str) -> None:
        super().__init__(None, data_dir, batch_size=4, num_workers=0, seed=0)


@pytest.mark.parametrize("num_classes", [None, 1, 2.0, True])
def test_a_datamodule_without_a_valid_class_count_fails_when_built(num_classes: object) -> None:
    with pytest.raises(DataConfigError, match=r"task 'toy' states num_classes=.*int >= 2"):
        ForgetsItsClasses("unused", num_classes)
    assert ForgetsItsClasses("unused", 3).num_classes == 3


def test_a_datamodule_that_passes_no_spec_fails_when_built() -> None:
    with pytest.raises(TypeError, match="StatesNoSpec must pass its TaskSpec"):
        StatesNoSpec("unused")


@pytest.mark.parametrize(
    ("fields", "message"),
    [
        ({"head_kind": "image"}, "head_kind='image'; use one of sequence, pair, token"),
        ({"vocab_size": 1}, "vocab_size=1; it must be an int >= 2"),
        ({"max_length": 0}, "data.max_length must be >= 1, got 0"),
        ({"name": ""}, "TaskSpec needs a task name"),
    ],
)
def test_a_spec_that_cannot_work_is_refused_with_the_field(fields: dict, message: str) -> None:
    spec = {"name": "toy", "head_kind": "sequence", "vocab_size": 8, "num_classes": 2,
            "max_length": 16, **fields}
    with pytest.raises(DataConfigError, match=message):
        TaskSpec(**spec)


def test_data_errors_raised_while_preparing_share_the_linarena_root(tmp_path: Path) -> None:
    """scripts/prepare_data.py and train.py catch LinarenaError, not ValueError."""
    with pytest.raises(LinarenaError, match="no ListOps tree has 500 < length < 128"):
        ListOpsDataModule(tmp_path, max_length=128, min_length=500, source="generated").setup()
    with pytest.raises(LinarenaError, match=r"new_aan_pairs\.train\.tsv"):
        RetrievalDataModule(tmp_path).setup()
