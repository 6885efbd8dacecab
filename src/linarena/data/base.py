"""Base LightningDataModule shared by every task: its contract, caching, datasets, data loaders."""

from __future__ import annotations

import logging
import warnings
from pathlib import Path
from typing import Any, ClassVar

import lightning as L
import torch
from lightning.pytorch.overrides.distributed import UnrepeatedDistributedSampler
from torch.utils.data import DataLoader, Dataset, Sampler
from torchdata.stateful_dataloader import StatefulDataLoader

from linarena.data.batching import (
    PackedSequences,
    PairDataset,
    SequenceDataset,
    TokenDataset,
    collate_pairs,
    collate_sequences,
    collate_tokens,
)
from linarena.data.cache import config_hash, load_or_build
from linarena.data.errors import DATA_DIR_ERRNOS, DataConfigError, DataDirError, data_dir_error
from linarena.data.spec import TaskSpec

log = logging.getLogger(__name__)

SPLITS = ("train", "val", "test")
COLLATE_FUNCTIONS = {"sequence": collate_sequences, "pair": collate_pairs, "token": collate_tokens}


def check_data_dir(data_dir: Path) -> None:
    """The data folder must be a folder (or absent, then it is created)."""
    for folder in (data_dir, *data_dir.parents):
        if folder.exists():
            if not folder.is_dir():
                raise DataDirError(
                    f"The data folder {data_dir.resolve()} cannot be used: {folder} is a file. "
                    "Set paths.data_dir to a folder."
                )
            return


def check_split_sizes(num_train: int, num_val: int, num_test: int) -> None:
    """Every split of a generated task needs at least one example."""
    if min(num_train, num_val, num_test) < 1:
        raise DataConfigError("data.num_train, data.num_val and data.num_test must be >= 1")


def check_generator_workers(workers: int | None) -> None:
    """data.generator_workers: a number of processes, or null for all CPUs."""
    if workers is not None and workers < 1:
        raise DataConfigError(
            f"data.generator_workers must be >= 1, or null for all CPUs; got {workers}"
        )


class TaskDataModule(L.LightningDataModule):
    """Common machinery; subclasses say what the data is and how to build it.

    A subclass passes its `TaskSpec` (name, head kind, vocabulary, classes, max length) to this
    constructor, which checks it, and implements `cache_config()` (the settings the cached
    tensors depend on) and `build()` (read, download or generate the data and return named
    tensors); `check_sources()` and `source_files()` when it reads files. Sequence tasks store
    per split `{split}/values`, `{split}/offsets`, `{split}/labels`; pair tasks store
    `{split}/first/...` and `{split}/second/...` plus `{split}/labels`; token tasks store
    `{split}/tokens` and `{split}/labels`, both (n, L) (labels -100 where not scored).
    `make_dataset` turns each into its dataset; a subclass overrides it only for another layout
    (MQAR's mixture).

    Batches are dicts with `tokens` LongTensor (B, L) (pair task: (B, 2, L)), `mask` BoolTensor of
    the same shape (True = real token, right padding, pad id 0) and `label` LongTensor (B,)
    (token task: (B, L) with -100 where not scored).
    """

    # Added to stored values when a batch is built: 1 for bytes and pixels (0 stays padding).
    token_shift: ClassVar[int] = 0
    # Splits served from another stored split, e.g. text: {"val": "test"} as in LRA.
    split_aliases: ClassVar[dict[str, str]] = {}
    # Groups of token ids (as batches carry them) within which the task's generator draws a
    # token's identity uniformly and independently of every other token (ListOps: the digits,
    # the operators, the closing bracket); empty where no such partition is known (pixels,
    # text). A masked token's context can tell at most its group: spt_baseline's ceiling.
    independent_token_kinds: ClassVar[tuple[tuple[int, ...], ...]] = ()

    def __init__(
        self,
        spec: TaskSpec,
        data_dir: str | Path,
        batch_size: int,
        num_workers: int,
        seed: int,
    ) -> None:
        super().__init__()
        if not str(data_dir).strip():
            # Path("") is the working directory: the data would land wherever the run starts.
            raise DataConfigError(
                "data.data_dir is empty: paths.data_dir is LINARENA_DATA_DIR when that is set, "
                "and it is set to an empty string (or paths.data_dir= was given no value), which "
                "would put the data in the working directory. Unset LINARENA_DATA_DIR (the data "
                "then go to data/ in the repository), or set it, or paths.data_dir=..., to a "
                "folder."
            )
        if not isinstance(spec, TaskSpec):
            raise TypeError(
                f"{type(self).__name__} must pass its TaskSpec (name, head_kind, vocab_size, "
                f"num_classes, max_length) to TaskDataModule.__init__, got {spec!r}"
            )
        if batch_size < 1:
            raise DataConfigError(f"data.batch_size must be >= 1, got {batch_size}")
        if num_workers < 0:
            raise DataConfigError(
                f"data.num_workers must be >= 0 (0 loads batches in the main process), got "
                f"{num_workers}"
            )
        self.spec = spec
        self.data_dir = Path(data_dir)
        self.batch_size = batch_size
        self.num_workers = num_workers
        self.seed = seed
        self.datasets: dict[str, Dataset] = {}

    # ---- the contract, read by the model builder and the training loop ----------------------
    @property
    def name(self) -> str:
        return self.spec.name

    @property
    def head_kind(self) -> str:
        return self.spec.head_kind

    @property
    def vocab_size(self) -> int:
        return self.spec.vocab_size

    @property
    def num_classes(self) -> int:
        return self.spec.num_classes

    @property
    def max_length(self) -> int:
        return self.spec.max_length

    @property
    def causal(self) -> bool:
        return self.spec.causal

    # ---- what subclasses provide -------------------------------------------------------------
    def cache_config(self) -> dict[str, Any]:
        """JSON-serialisable settings that the cached tensors depend on."""
        raise NotImplementedError

    def build(self) -> dict[str, torch.Tensor]:
        """Read, download or generate the data; return the tensors to cache."""
        raise NotImplementedError

    def check_sources(self) -> None:
        """Raise DataNotFoundError when files this task builds from are absent and will not be
        downloaded or generated; only looks whether files exist (default: nothing to check)."""

    def source_files(self) -> dict[str, Path]:
        """The files or folders the cached tensors are built from, by name (default: none, as
        for generated data, which its settings key). The cache records their sizes and
        modification times and is rebuilt when one of them changed; one absent now (a release
        deleted after the build) leaves the cache usable."""
        return {}

    def make_dataset(self, tensors: dict[str, torch.Tensor], split: str) -> Dataset:
        """Dataset for a stored split, by head kind (the layouts of the class docstring)."""
        labels = tensors[f"{split}/labels"]
        if self.head_kind == "token":
            return TokenDataset(tensors[f"{split}/tokens"], labels)
        if self.head_kind == "pair":
            first = self._packed(tensors, f"{split}/first")
            second = self._packed(tensors, f"{split}/second")
            return PairDataset(first, second, labels)
        return SequenceDataset(self._packed(tensors, split), labels)

    def _packed(self, tensors: dict[str, torch.Tensor], prefix: str) -> PackedSequences:
        return PackedSequences(
            tensors[f"{prefix}/values"], tensors[f"{prefix}/offsets"], self.token_shift
        )

    def check_available(self) -> None:
        """Raise DataNotFoundError (with what to get and where to put it) when this task's data
        is neither cached nor buildable: files it reads are absent and will not be downloaded or
        generated. Cheap, and reads, writes or downloads nothing, so an entry point can call it
        before it builds a run (a trainer, loggers, checkpoints)."""
        check_data_dir(self.data_dir)
        if not self.cache_path.is_file():
            self.check_sources()

    # ---- caching ----------------------------------------------------------------------------
    @property
    def cache_path(self) -> Path:
        """File under `<data_dir>/cache/` named after the task and the hash of its settings."""
        return self.data_dir / "cache" / f"{self.name}-{config_hash(self._full_config())}.pt"

    def _full_config(self) -> dict[str, Any]:
        return {"name": self.name, "max_length": self.max_length, **self.cache_config()}

    def load_tensors(self) -> dict[str, torch.Tensor]:
        """Cached tensors, built (and cached) first when absent, stale or corrupt."""
        check_data_dir(self.data_dir)
        try:
            return load_or_build(self.cache_path, self._full_config(), self._build_logged,
                                 self.source_files())
        except OSError as error:
            # A full, read-only or unwritable data folder. DataNotFoundError, a FileNotFoundError
            # without errno, passes through.
            if error.errno not in DATA_DIR_ERRNOS:
                raise
            raise data_dir_error(error, self.name, self.data_dir) from None

    def _build_logged(self) -> dict[str, torch.Tensor]:
        log.info("Building %s data (cache %s)", self.name, self.cache_path)
        tensors = self.build()
        for name, tensor in tensors.items():
            if name.endswith("labels") and len(tensor) == 0:
                raise DataConfigError(
                    f"The {name.split('/')[0]} split of data={self.name} is empty (read from "
                    f"{self.data_dir.resolve()}): check that split's file, or the data.num_* "
                    "settings."
                )
        return tensors

    # ---- LightningDataModule hooks ------------------------------------------------------------
    def prepare_data(self) -> None:
        """Generate, download and cache the data (called once per node by Lightning)."""
        self.load_tensors()

    def setup(self, stage: str | None = None) -> None:
        """Load the cached tensors into one dataset per split."""
        if self.datasets:
            return
        tensors = self.load_tensors()
        for split in SPLITS:
            self.datasets[split] = self.make_dataset(tensors, self.split_aliases.get(split, split))
        sizes = ", ".join(f"{split} {len(self.datasets[split])}" for split in SPLITS)
        log.info("%s data: %s examples", self.name, sizes)

    def _loader(self, split: str, shuffle: bool) -> DataLoader:
        """The split's loader; training shuffles, evaluation reads every example once."""
        if not self.datasets:
            self.setup()
        # The training loader is stateful: checkpoints hold its position and shuffling state,
        # so a resumed run sees the rest of the epoch in the same order as an uninterrupted one.
        loader_class = StatefulDataLoader if shuffle else DataLoader
        with warnings.catch_warnings():
            # torchdata 0.11's constructor calls a torch function deprecated since; nothing to do.
            warnings.filterwarnings("ignore", "'set_vital' is deprecated", UserWarning)
            return loader_class(
                self.datasets[split],
                batch_size=self.batch_size,
                shuffle=shuffle,
                sampler=None if shuffle else evaluation_sampler(self.datasets[split]),
                num_workers=self.num_workers,
                collate_fn=COLLATE_FUNCTIONS[self.head_kind],
                pin_memory=torch.cuda.is_available(),
                persistent_workers=self.num_workers > 0,
            )

    def train_dataloader(self) -> DataLoader:
        return self._loader("train", shuffle=True)

    def val_dataloader(self) -> DataLoader:
        return self._loader("val", shuffle=False)

    def test_dataloader(self) -> DataLoader:
        return self._loader("test", shuffle=False)


def evaluation_sampler(dataset: Dataset) -> Sampler | None:
    """Under DDP, each rank's distinct share of an evaluation split, every example exactly once;
    None otherwise (Lightning then reads the split in order). Lightning's default for evaluation,
    a DistributedSampler, pads the ranks to equal length by repeating examples, which biases
    val/test accuracy (and warns during test). The metrics are epoch-level torchmetrics, synced
    once at the end, so ranks with one batch more or less never wait on each other."""
    distributed = torch.distributed.is_available() and torch.distributed.is_initialized()
    if not distributed or torch.distributed.get_world_size() == 1:
        return None
    return UnrepeatedDistributedSampler(dataset, shuffle=False)
