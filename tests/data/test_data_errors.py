"""Bad data and settings end in one line saying what is wrong and what to change."""

from __future__ import annotations

import shutil
from pathlib import Path

import numpy as np
import pytest
import torch
from helpers.data_fixtures import (
    write_cifar_archive,
    write_cifar_folder,
    write_imdb_folder,
    write_listops_release,
    write_pathfinder_release,
)
from helpers.training import compose_config
from hydra.core.hydra_config import HydraConfig
from PIL import Image

from linarena.data import (
    DataFormatError,
    ImageDataModule,
    ListOpsDataModule,
    PathfinderDataModule,
    TextDataModule,
)
from linarena.data.errors import DataConfigError, DataDirError
from linarena.data.pathfinder import read_pathfinder_images
from linarena.errors import LinarenaError
from linarena.training.entry import run_job


@pytest.fixture(autouse=True)
def reset_hydra():
    yield
    HydraConfig.instance().cfg = None


def listops(data_dir: Path) -> ListOpsDataModule:
    return ListOpsDataModule(data_dir, max_length=100, source="official")


def test_listops_file_that_is_not_utf8_is_named_with_its_line(tmp_path: Path) -> None:
    folder = write_listops_release(tmp_path)
    (folder / "basic_val.tsv").write_bytes(b"Source\tTarget\n( ( [MAX 2 ) 9 ] )\t9\n\xff\xfe\t1\n")
    with pytest.raises(DataFormatError, match=r"basic_val\.tsv:3: not UTF-8"):
        listops(tmp_path).setup()


@pytest.mark.parametrize("expression", ["( ( [MAX 2 ) 9 ) ] )", "( ( ( [MAX 2 ) 9 ) )",
                                        "( [MAX ] )", "( ( ( [MAX 2 ) 9 ) ] ) 3"])
def test_listops_expression_that_is_not_a_tree_is_refused_with_file_and_line(
    tmp_path: Path, expression: str
) -> None:
    folder = write_listops_release(tmp_path)
    (folder / "basic_test.tsv").write_text("Source\tTarget\n( ( [MAX 2 ) 9 ] )\t9\n"
                                           f"{expression}\t9\n")
    with pytest.raises(DataFormatError, match=r"basic_test\.tsv:3: not a ListOps expression"):
        listops(tmp_path).setup()


def test_an_empty_split_is_named(tmp_path: Path) -> None:
    folder = write_listops_release(tmp_path)
    (folder / "basic_val.tsv").write_text("Source\tTarget\n")
    with pytest.raises(DataConfigError, match="The val split of data=listops is empty"):
        listops(tmp_path).setup()


def test_pathfinder_metadata_that_is_not_utf8_is_named(tmp_path: Path) -> None:
    folder, _ = write_pathfinder_release(tmp_path)
    (folder / "metadata" / "1.npy").write_bytes(b"imgs/1 sample_5.png 5 1\n\x80\x81\n")
    dm = PathfinderDataModule(tmp_path, source="official", num_val=2, num_test=2)
    with pytest.raises(DataFormatError, match=r"1\.npy:2: not UTF-8"):
        dm.setup()


def test_pathfinder_without_usable_images_says_what_to_change(tmp_path: Path) -> None:
    write_pathfinder_release(tmp_path, empty=tuple(range(12)))
    dm = PathfinderDataModule(tmp_path, source="official", num_val=2, num_test=2)
    with pytest.raises(DataConfigError,
                       match=r"only 0 usable Pathfinder images.*data.num_val") as err:
        dm.setup()
    assert isinstance(err.value, LinarenaError)  # train.py prints it as one line


def test_a_16_bit_png_is_scaled_not_clipped(tmp_path: Path) -> None:
    grey = np.arange(256, dtype=np.uint16).reshape(16, 16)
    path = tmp_path / "deep.png"
    Image.fromarray(grey * 257).save(path)  # 16-bit PNG, values 0..65535
    with Image.open(path) as image:
        assert image.mode.startswith("I")
    pixels, labels = read_pathfinder_images([(path, 1)], resolution=16, progress=False)
    assert np.array_equal(pixels[0], grey.reshape(-1).astype(np.uint8))
    assert labels.tolist() == [1]


def test_cifar_num_val_larger_than_the_training_set_says_the_range(tmp_path: Path) -> None:
    write_cifar_folder(tmp_path, per_file=4)  # 20 training images
    with pytest.raises(DataConfigError, match=r"set data.num_val between 1 and 19") as err:
        ImageDataModule(tmp_path, num_val=50).setup()
    assert isinstance(err.value, LinarenaError)


def test_a_data_dir_that_is_a_file_is_named(tmp_path: Path) -> None:
    (tmp_path / "data").write_text("not a folder")
    with pytest.raises(DataDirError, match=r"is a file\. Set paths\.data_dir"):
        ListOpsDataModule(tmp_path / "data" / "sub", max_length=64).setup()


def run_message(tmp_path: Path, capsys: pytest.CaptureFixture, *overrides: str) -> str:
    cfg = compose_config(["debug=smoke", "logger=none", f"paths.data_dir={tmp_path / 'data'}",
                          *overrides], output_dir=tmp_path / "run")
    with pytest.raises(SystemExit) as exit_info:
        run_job(cfg)
    assert exit_info.value.code == 1
    return capsys.readouterr().err.strip()


@pytest.mark.parametrize(("overrides", "expected"), [
    (["trainer.max_steps=0"], "trainer.max_steps=0 trains nothing"),
    (["data.num_workers=-1"], "data.num_workers must be >= 0"),
    (["attention=cosformer", "model.causal=true", "model.pooling=mean",
      "attention.max_length=16"], "sequence length 128 exceeds max_length=16"),
])
def test_settings_that_cannot_work_are_refused_before_training(
    tmp_path: Path, capsys: pytest.CaptureFixture, overrides: list[str], expected: str
) -> None:
    assert expected in run_message(tmp_path, capsys, *overrides)


def test_a_truncated_or_foreign_checkpoint_is_named(
    tmp_path: Path, capsys: pytest.CaptureFixture
) -> None:
    truncated = tmp_path / "cut.ckpt"
    torch.save({"state_dict": {"w": torch.zeros(1000)}, "global_step": 1, "loops": {}}, truncated)
    truncated.write_bytes(truncated.read_bytes()[:300])
    message = run_message(tmp_path, capsys, f"ckpt_path={truncated}")
    assert f"{truncated} cannot be read as a checkpoint" in message and "\n" not in message

    foreign = tmp_path / "weights.pt"
    torch.save({"weight": torch.zeros(3)}, foreign)
    message = run_message(tmp_path, capsys, f"ckpt_path={foreign}")
    assert f"{foreign} is not a Lightning training checkpoint" in message


def test_a_checkpoint_of_another_model_is_named_not_a_size_mismatch_traceback(
    tmp_path: Path, capsys: pytest.CaptureFixture
) -> None:
    from linarena.training import train

    other = tmp_path / "other"
    train(compose_config(["debug=smoke", "logger=none", "model.d_model=16",
                          "trainer.enable_progress_bar=false",
                          f"paths.data_dir={tmp_path / 'data'}"], output_dir=other))
    checkpoint = other / "checkpoints" / "last.ckpt"
    message = run_message(tmp_path, capsys, f"ckpt_path={checkpoint}", "trainer.max_steps=8")
    assert "model.d_model: 16 there, 32 here" in message  # the run it stores says so first
    assert f"hydra.run.dir={other}" in message  # the run folder the checkpoint belongs to
    # A checkpoint written before checkpoints stored their run: the weight shapes tell.
    import torch

    from linarena.training.checkpoint_identity import IDENTITY_KEY

    stored = torch.load(checkpoint, weights_only=True)
    del stored[IDENTITY_KEY]
    torch.save(stored, checkpoint)
    message = run_message(tmp_path, capsys, f"ckpt_path={checkpoint}", "trainer.max_steps=8")
    assert "holds a different model than this config" in message


def test_slurm_sends_the_signal_lightning_requeues_on() -> None:
    import signal

    from helpers.training import compose_with_hydra
    from lightning.fabric.plugins.environments import SLURMEnvironment
    from omegaconf import OmegaConf

    launcher = compose_with_hydra(["hydra/launcher=slurm", "trainer=ddp"]).hydra.launcher
    sbatch_signal = OmegaConf.to_container(launcher.additional_parameters, resolve=True)["signal"]
    assert sbatch_signal.split("@")[0] == SLURMEnvironment().requeue_signal.name.removeprefix("SIG")
    assert SLURMEnvironment().auto_requeue and SLURMEnvironment().requeue_signal == signal.SIGUSR1


def test_a_release_file_linked_elsewhere_is_named_not_echoed(tmp_path: Path) -> None:
    folder = write_listops_release(tmp_path / "data")
    secret = tmp_path / "elsewhere" / "key.txt"
    secret.parent.mkdir()
    secret.write_text("PRIVATE-FIRST-LINE\nmore\n")
    (folder / "basic_train.tsv").unlink()
    (folder / "basic_train.tsv").symlink_to(secret)
    with pytest.raises(DataFormatError, match="expected the header") as err:
        listops(tmp_path / "data").setup()
    assert "PRIVATE" not in str(err.value)
    assert f"is a link to {secret.resolve()}" in str(err.value)


def test_an_empty_imdb_review_is_named_by_its_real_path(tmp_path: Path) -> None:
    folder = write_imdb_folder(tmp_path)
    (folder / "train" / "neg" / "0_2.txt").write_bytes(b"")
    with pytest.raises(DataFormatError) as err:
        TextDataModule(tmp_path, download=False).setup()
    assert str(err.value).startswith(f"{folder / 'train' / 'neg' / '0_2.txt'}: ")


def test_a_bad_cifar_batch_is_named_with_its_folder_or_archive(tmp_path: Path) -> None:
    write_cifar_folder(tmp_path, per_file=4)
    batch = tmp_path / "cifar-10-batches-bin" / "data_batch_3.bin"
    batch.write_bytes(batch.read_bytes()[:-1])
    with pytest.raises(DataFormatError, match="not a positive multiple") as err:
        ImageDataModule(tmp_path, num_val=2).setup()
    assert str(err.value).startswith(f"{batch}: ")

    archive = write_cifar_archive(tmp_path)
    shutil.rmtree(tmp_path / "cifar-10-batches-bin")
    with pytest.raises(DataFormatError, match="not a positive multiple") as err:
        ImageDataModule(tmp_path, num_val=2).setup()
    assert str(err.value).startswith(
        f"{archive} (member cifar-10-batches-bin/data_batch_3.bin): "
    )


def test_a_damaged_generated_listops_file_says_which_folder_to_delete(tmp_path: Path) -> None:
    settings = {"max_length": 64, "min_length": 10, "source": "generated", "num_train": 20,
                "num_val": 5, "num_test": 5, "generator_workers": 1}
    first = ListOpsDataModule(tmp_path, **settings)
    first.setup()
    folder = first.generated_dir
    train = folder / "basic_train.tsv"
    train.write_bytes(train.read_bytes()[:-4])  # a copy cut short, mid-line
    shutil.rmtree(tmp_path / "cache")
    with pytest.raises(DataFormatError, match=r"basic_train\.tsv:21: ") as err:
        ListOpsDataModule(tmp_path, **settings).setup()
    assert f"delete the folder {folder.resolve()} and run again" in str(err.value)
    shutil.rmtree(folder)  # the advice works
    again = ListOpsDataModule(tmp_path, **settings)
    again.setup()
    assert len(again.datasets["train"]) == 20
