"""Your own labelled token sequences, read from tab-separated files: `data=sequences`.

The folder `data.path` holds

    train.tsv   required
    val.tsv     optional: when absent, `data.val_fraction` of the lines of train.tsv, drawn with
                `data.seed` (the same lines for every run with that seed), validate instead
    test.tsv    required

Each file is UTF-8 text with one example per line and no header:

    <label><TAB><token id> <token id> ...

for example `2<TAB>17 4 4 250 9`. The label is an integer in [0, num_classes), the token ids are
integers in [0, vocab_size), separated by spaces; blank lines are skipped. The task is sequence
classification: batches are `tokens`/`mask` (B, L) and `label` (B,), as for ListOps.

Your ids are shifted by one inside (id t is t + 1 in batches; vocabulary vocab_size + 1), so that
0 stays the padding id the model masks: your id 0 is a real token.

`data.vocab_size` and `data.num_classes` are given (and every line is checked against them) or
null: then they are read from the files (largest id + 1, largest label + 1) when the datamodule
is built, which reads the files once more. When the folder holds no train.tsv and test.tsv yet,
the datamodule is still built with the smallest sizes (vocabulary 1, 2 classes), so that configs
compose without data, and fails with DataNotFoundError, saying where it looked and the format,
as soon as the data are needed (`check_available`, `prepare_data`, `setup`).

A line of more than `data.max_length` ids is an error naming the line, unless `data.truncate` is
true: then its first max_length ids are kept. Any line that breaks the format is an error naming
the file, the line and what was expected. The parsed tensors are cached under
`<data_dir>/cache/`, keyed by the folder, each file's size and modification time and the
settings, so an edited file is read again.
"""

from __future__ import annotations

import logging
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch

from linarena.data.base import TaskDataModule
from linarena.data.batching import pack_sequences
from linarena.data.cache import source_stamps
from linarena.data.errors import DataConfigError, DataFormatError, DataNotFoundError, excerpt
from linarena.data.spec import TaskSpec

log = logging.getLogger(__name__)

FILES = {"train": "train.tsv", "val": "val.tsv", "test": "test.tsv"}
REQUIRED = ("train", "test")
FORMAT = (
    "one example per line, `<label><TAB><token ids separated by spaces>`, e.g. `2\\t17 4 4 250 9`"
    ": labels are integers 0..num_classes-1, token ids integers 0..vocab_size-1"
)
# Up to 18 digits, so that every value fits an int64.
_INTEGER = re.compile(r"[0-9]{1,18}")
_IDS = re.compile(r"[0-9]{1,18}(?: +[0-9]{1,18})*")


@dataclass
class SequenceFile:
    """The examples of one file: token ids (int64 arrays (length,)), labels int64 (n,) and the
    line number of each example, int64 (n,)."""

    path: Path
    sequences: list[np.ndarray]
    labels: np.ndarray
    lines: np.ndarray


def parse_line(text: str, path: Path, line: int) -> tuple[int, np.ndarray]:
    """(label, token ids int64 (length,)) of one line, `text` without its line ending."""
    fields = text.split("\t")
    if len(fields) != 2:
        raise DataFormatError(
            path, line, f"expected 2 tab-separated fields, <label><TAB><token ids>, got "
            f"{len(fields)}: {excerpt(path, text)}"
        )
    label, ids = fields[0].strip(), fields[1].strip()
    if not _INTEGER.fullmatch(label):
        raise DataFormatError(
            path, line, f"the label must be a non-negative integer, got {excerpt(path, label)}"
        )
    if not ids:
        raise DataFormatError(path, line, "no token ids after the label")
    if not _IDS.fullmatch(ids):
        bad = next(t for t in ids.split(" ") if t and not _INTEGER.fullmatch(t))
        raise DataFormatError(
            path, line, f"token ids must be non-negative integers (up to 18 digits) separated "
            f"by spaces, got {excerpt(path, bad)}"
        )
    return int(label), np.array(ids.split(), dtype=np.int64)


def read_sequence_file(path: Path) -> SequenceFile:
    """Parse a `<label>\\t<ids>` file (the module docstring's format); DataFormatError names the
    file and line of the first line that breaks it."""
    sequences, labels, lines = [], [], []
    with open(path, "rb") as handle:
        for line, raw in enumerate(handle, start=1):
            try:
                text = raw.decode("utf-8").rstrip("\r\n")
            except UnicodeDecodeError:
                raise DataFormatError(path, line, f"not UTF-8 text; expected {FORMAT}") from None
            if not text.strip():
                continue
            label, ids = parse_line(text, path, line)
            sequences.append(ids)
            labels.append(label)
            lines.append(line)
    if not sequences:
        raise DataFormatError(path, None, f"no examples; expected {FORMAT}")
    return SequenceFile(path, sequences, np.array(labels, dtype=np.int64), np.array(lines))


def check_values(
    read: SequenceFile, vocab_size: int, num_classes: int, max_length: int, truncate: bool
) -> None:
    """Every id < vocab_size, label < num_classes and, unless `truncate`, length <= max_length;
    else DataFormatError at the first line that is not, with the file's largest value."""
    largest = np.array([ids.max() for ids in read.sequences])
    for values, limit, what, setting in (
        (largest, vocab_size, "token id", "vocab_size"),
        (read.labels, num_classes, "label", "num_classes"),
    ):
        bad = np.flatnonzero(values >= limit)
        if len(bad):
            raise DataFormatError(
                read.path, int(read.lines[bad[0]]), f"{what} {values[bad[0]]} is not below "
                f"{setting}={limit}; the largest {what} in this file is {values.max()}: set "
                f"data.{setting}={values.max() + 1} (or null to read it from the files)"
            )
    lengths = np.array([len(ids) for ids in read.sequences])
    too_long = np.flatnonzero(lengths > max_length)
    if len(too_long) and not truncate:
        raise DataFormatError(
            read.path, int(read.lines[too_long[0]]), f"{lengths[too_long[0]]} token ids, more "
            f"than data.max_length={max_length}; the longest line of this file has "
            f"{lengths.max()}: raise data.max_length, or set data.truncate=true to keep the "
            "first max_length ids of longer lines"
        )


def present_files(folder: Path) -> dict[str, Path]:
    """The files of FILES that exist in `folder`, by split."""
    return {split: folder / name for split, name in FILES.items() if (folder / name).is_file()}


def sizes_from_files(folder: Path) -> tuple[int, int]:
    """(vocab_size, num_classes) of the files in `folder`: largest id + 1, largest label + 1."""
    files = [read_sequence_file(path) for path in present_files(folder).values()]
    vocab_size = 1 + max(int(ids.max()) for read in files for ids in read.sequences)
    num_classes = 1 + max(int(read.labels.max()) for read in files)
    if num_classes < 2:
        raise DataConfigError(
            f"Every label in {folder} is 0: a classifier needs at least 2 classes. Check the "
            "labels, or set data.num_classes."
        )
    return vocab_size, num_classes


def split_validation(count: int, fraction: float, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """(train, val) indices into `count` training examples, each sorted: round(fraction * count)
    of them, drawn by a permutation from `seed`, validate. DataConfigError if a side is empty."""
    num_val = round(fraction * count)
    if not 0 < num_val < count:
        raise DataConfigError(
            f"train.tsv has {count} examples, and data.val_fraction={fraction} of them gives "
            f"{num_val} for validation; both sides need at least one: add a val.tsv or change "
            "data.val_fraction"
        )
    order = np.random.default_rng(seed).permutation(count)
    return np.sort(order[num_val:]), np.sort(order[:num_val])


class SequencesDataModule(TaskDataModule):
    """Labelled token sequences from `path` (format: the module docstring); "sequence" task."""

    token_shift = 1  # user id t is t + 1 in batches; 0 is padding

    def __init__(
        self,
        data_dir: str | Path,
        path: str | Path,
        vocab_size: int | None = None,
        num_classes: int | None = None,
        batch_size: int = 32,
        num_workers: int = 0,
        seed: int = 0,
        max_length: int = 1024,
        truncate: bool = False,
        val_fraction: float = 0.1,
    ) -> None:
        if not str(path).strip():  # Path("") would be the working directory
            raise DataConfigError("data.path is empty: set it to the folder of your train.tsv, "
                                  "val.tsv and test.tsv")
        folder = Path(path).expanduser().absolute()
        for setting, value, least in (
            ("vocab_size", vocab_size, 1), ("num_classes", num_classes, 2)
        ):
            if value is not None and (not isinstance(value, int) or value < least):
                raise DataConfigError(
                    f"data.{setting} must be an integer >= {least}, or null to read it from the "
                    f"files; got {value!r}"
                )
        if not 0 < val_fraction < 1:
            raise DataConfigError(f"data.val_fraction must be in (0, 1), got {val_fraction}")
        self.settings = {"vocab_size": vocab_size, "num_classes": num_classes}
        if None in self.settings.values() and set(REQUIRED) <= present_files(folder).keys():
            found_vocab, found_classes = sizes_from_files(folder)
            vocab_size, num_classes = vocab_size or found_vocab, num_classes or found_classes
            log.info("data=sequences: vocab_size %d, num_classes %d", vocab_size, num_classes)
        # Without the files: the smallest sizes; check_sources() refuses to go further.
        spec = TaskSpec("sequences", "sequence", (vocab_size or 1) + 1, num_classes or 2,
                        max_length)
        super().__init__(spec, data_dir, batch_size, num_workers, seed)
        self.path, self.truncate, self.val_fraction = folder, truncate, val_fraction

    @property
    def user_vocab_size(self) -> int:
        """Token ids in the files are in [0, user_vocab_size); one less than `vocab_size`."""
        return self.vocab_size - self.token_shift

    def check_sources(self) -> None:
        missing = [FILES[split] for split in REQUIRED if split not in present_files(self.path)]
        if missing:
            looked = "it does not exist" if not self.path.is_dir() else f"no {', '.join(missing)}"
            raise DataNotFoundError(
                f"Data for data=sequences not found in {self.path} (data.path): {looked}.\n"
                f"It reads a folder with train.tsv and test.tsv (and val.tsv, else "
                f"data.val_fraction of train.tsv validates), UTF-8 text, {FORMAT}.\n"
                "Set data.path to your folder: python train.py data=sequences data.path=..."
            )

    def cache_config(self) -> dict[str, Any]:
        self.check_sources()
        files = present_files(self.path)
        validation = "val.tsv" if "val" in files else {"fraction": self.val_fraction,
                                                       "seed": self.seed}
        return {
            "path": str(self.path),
            "files": source_stamps(files),
            **self.settings,
            "truncate": self.truncate,
            "validation": validation,
        }

    def build(self) -> dict[str, torch.Tensor]:
        self.check_sources()
        splits = {}
        for split, path in present_files(self.path).items():
            read = read_sequence_file(path)
            check_values(read, self.user_vocab_size, self.num_classes, self.max_length,
                         self.truncate)
            splits[split] = ([ids[: self.max_length] for ids in read.sequences], read.labels)
        if "val" not in splits:
            sequences, labels = splits["train"]
            train, val = split_validation(len(labels), self.val_fraction, self.seed)
            splits["train"] = ([sequences[i] for i in train], labels[train])
            splits["val"] = ([sequences[i] for i in val], labels[val])
        unused = sorted(set(range(self.num_classes)) - set(splits["train"][1].tolist()))
        if unused:
            log.warning("data=sequences: %d of the %d classes have no training example "
                        "(labels %s)", len(unused), self.num_classes, unused[:10])
        dtype = next(d for d in (torch.uint8, torch.int16, torch.int32, torch.int64)
                     if self.user_vocab_size - 1 <= torch.iinfo(d).max)
        tensors = {}
        for split, (sequences, labels) in splits.items():
            packed = pack_sequences(sequences, dtype)
            tensors |= {f"{split}/{key}": value for key, value in packed.items()}
            tensors[f"{split}/labels"] = torch.from_numpy(labels)
        return tensors
