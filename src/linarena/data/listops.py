"""ListOps (LRA): read the release's tsv files, or generate them with the built-in generator."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import torch

from linarena.data.base import (
    SPLITS,
    TaskDataModule,
    check_generator_workers,
    check_split_sizes,
)
from linarena.data.batching import pack_sequences
from linarena.data.cache import config_hash
from linarena.data.errors import (
    DataFormatError,
    excerpt,
    in_generated_folder,
    missing_data_error,
)
from linarena.data.listops_generator import write_listops_files
from linarena.data.sources import LRA_RELEASE_URL, check_source, lra_release_path, reads_official
from linarena.data.spec import TaskSpec
from linarena.files import build_lock, remove_stale_temps

# Token ids: 0 is padding; the 15 symbols follow. `(` and `)` are dropped, as in the LRA pipeline.
SYMBOLS = ("[MIN", "[MAX", "[MED", "[SM", "]", *map(str, range(10)))
VOCAB = {symbol: index + 1 for index, symbol in enumerate(SYMBOLS)}
VOCAB_SIZE = len(SYMBOLS) + 1
NUM_CLASSES = 10
_DROPPED = ("(", ")")
_ALLOWED = frozenset(SYMBOLS) | frozenset(_DROPPED)
# Fast path: operators become one letter each, brackets and spaces vanish, and every remaining
# character is one token, looked up in a 256-entry table.
_LETTERS = {"[MIN": "a", "[MAX": "b", "[MED": "c", "[SM": "d"}
_LOOKUP = np.zeros(256, dtype=np.uint8)
for _symbol, _id in VOCAB.items():
    _LOOKUP[ord(_LETTERS.get(_symbol, _symbol))] = _id
_REMOVE = str.maketrans("", "", " ()")


def encode_listops(expression: str) -> np.ndarray:
    """Token ids (uint8 array (length,)) of an expression; ValueError on an unknown symbol."""
    unknown = set(expression.split()) - _ALLOWED
    if unknown:
        raise ValueError(f"unknown ListOps symbols {sorted(unknown)}; expected {list(SYMBOLS)}")
    for symbol, letter in _LETTERS.items():
        expression = expression.replace(symbol, letter)
    compact = expression.translate(_REMOVE).encode("ascii")
    return _LOOKUP[np.frombuffer(compact, dtype=np.uint8)]


_OPERATOR_IDS = np.array([VOCAB[op] for op in SYMBOLS[:4]], dtype=np.uint8)


def structure_problem(expression: str, tokens: np.ndarray) -> str | None:
    """What makes an expression not a ListOps tree, or None: a lone digit, or an operator, its
    arguments (digits or trees) and `]`, with balanced `(` `)`."""
    if expression.count("(") != expression.count(")"):
        return "unbalanced brackets: " + (
            f"{expression.count('(')} '(' but {expression.count(')')} ')'"
        )
    opens = np.isin(tokens, _OPERATOR_IDS)
    closes = tokens == VOCAB["]"]
    if len(tokens) == 1:
        return None if not (opens[0] or closes[0]) else "a lone operator or ']'"
    depth = np.cumsum(opens.astype(np.int64) - closes)
    if not opens[0] or depth[-1] != 0 or depth[:-1].min() < 1:
        return "operators and ']' do not pair up into one tree"
    if (opens[:-1] & closes[1:]).any():
        return "an operator without arguments"
    return None


def read_listops_tsv(path: Path, max_length: int) -> tuple[list[np.ndarray], np.ndarray]:
    """Parse a `Source\\tTarget` tsv into token arrays and labels (int64 (n,))."""
    sequences, labels = [], []
    with open(path, "rb") as handle:
        header = _decode(handle.readline(), path, 1).rstrip("\r\n")
        if header != "Source\tTarget":
            raise DataFormatError(
                path, 1, f"expected the header 'Source<TAB>Target', got {excerpt(path, header)}"
            )
        for line_number, raw in enumerate(handle, start=2):
            line = _decode(raw, path, line_number)
            if not line.strip():
                continue  # a trailing blank line is harmless
            fields = line.rstrip("\r\n").split("\t")
            if len(fields) != 2:
                raise DataFormatError(
                    path, line_number, f"expected 2 tab-separated fields, got {len(fields)}"
                )
            source, target = fields
            if target.strip() not in {str(k) for k in range(NUM_CLASSES)}:
                raise DataFormatError(
                    path, line_number, f"target must be a digit 0-9, got {excerpt(path, target)}"
                )
            try:
                tokens = encode_listops(source)
            except ValueError:
                unknown = " ".join(sorted(set(source.split()) - _ALLOWED))
                raise DataFormatError(
                    path,
                    line_number,
                    f"unknown ListOps symbols {excerpt(path, unknown)}; expected {list(SYMBOLS)}",
                ) from None
            problem = structure_problem(source, tokens) if len(tokens) else None
            if problem is not None:
                raise DataFormatError(path, line_number, f"not a ListOps expression: {problem}")
            if not 0 < len(tokens) <= max_length:
                raise DataFormatError(
                    path,
                    line_number,
                    f"expression has {len(tokens)} tokens; data.max_length={max_length} allows "
                    "1 to max_length (raise data.max_length)",
                )
            sequences.append(tokens)
            labels.append(int(target))
    return sequences, np.asarray(labels, dtype=np.int64)


def _decode(raw: bytes, path: Path, line_number: int) -> str:
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError:
        raise DataFormatError(
            path, line_number, "not UTF-8 text; ListOps files are tab-separated UTF-8 text"
        ) from None


class ListOpsDataModule(TaskDataModule):
    """ListOps: nested MIN/MAX/MED/SM expressions over digits; 10 classes, 16 token ids.

    Reads `<data_dir>/lra_release/listops-1000/basic_{train,val,test}.tsv` when present (or with
    `source="official"`); otherwise generates the same format into
    `<data_dir>/listops/generated-<hash>/` with the official generator settings, which the keyword
    arguments below override. Generated expressions satisfy min_length < length < max_length.
    """

    # The generator (and LRA's, which made the release) draws each operator from the four and
    # each digit from the ten uniformly, whatever the tree; the closing bracket is alone.
    independent_token_kinds = (
        tuple(VOCAB[op] for op in SYMBOLS[:4]), (VOCAB["]"],), tuple(VOCAB[d] for d in SYMBOLS[5:]))

    def __init__(
        self,
        data_dir: str | Path,
        batch_size: int = 32,
        num_workers: int = 0,
        seed: int = 0,
        max_length: int = 2000,
        source: str = "auto",
        num_train: int = 96_000,
        num_val: int = 2_000,
        num_test: int = 2_000,
        min_length: int = 500,
        max_depth: int = 10,
        max_args: int = 10,
        generator_workers: int | None = None,
    ) -> None:
        spec = TaskSpec("listops", "sequence", VOCAB_SIZE, NUM_CLASSES, max_length)
        super().__init__(spec, data_dir, batch_size, num_workers, seed)
        check_source(source)
        check_split_sizes(num_train, num_val, num_test)
        check_generator_workers(generator_workers)
        self.source = source
        self.sizes = {"train": num_train, "val": num_val, "test": num_test}
        self.generator_settings = {
            "seed": seed,
            "max_depth": max_depth,
            "max_args": max_args,
            "min_length": min_length,
            "max_length": max_length,
        }
        self.generator_workers = generator_workers

    @property
    def official_dir(self) -> Path | None:
        """The release's `listops-1000` folder, or None when absent."""
        return lra_release_path(self.data_dir, "listops-1000")

    def uses_official(self) -> bool:
        """Whether the release files are read (else the generated copy)."""
        expected = [f"lra_release/listops-1000/basic_{split}.tsv" for split in SPLITS]
        return reads_official(self.source, self.official_dir, "listops", expected, self.data_dir)

    def check_sources(self) -> None:
        self.uses_official()  # raises when data.source=official and the release is absent

    @property
    def generated_dir(self) -> Path:
        """Folder of the generated tsv files, named after the generator settings."""
        key = config_hash({**self.generator_settings, "sizes": self.sizes})
        return self.data_dir / "listops" / f"generated-{key}"

    def cache_config(self) -> dict[str, Any]:
        if self.uses_official():
            return {"source": "official"}
        return {"source": "generated", **self.generator_settings, "sizes": self.sizes}

    def source_files(self) -> dict[str, Path]:
        if not self.uses_official():
            return {}  # generated: its folder is named after the generator settings
        names = [f"basic_{split}.tsv" for split in SPLITS]
        return {name: self.official_dir / name for name in names}

    def build(self) -> dict[str, torch.Tensor]:
        official = self.official_dir if self.uses_official() else None
        folder = official or self.generated_dir
        if official is None:
            # One job generates; a second one started at the same time waits, then reads.
            with build_lock(folder):
                if not all((folder / f"basic_{split}.tsv").exists() for split in SPLITS):
                    remove_stale_temps(folder)
                    write_listops_files(
                        folder, self.sizes, workers=self.generator_workers,
                        **self.generator_settings,
                    )
        tensors = {}
        for split in SPLITS:
            path = folder / f"basic_{split}.tsv"
            if not path.exists():
                raise missing_data_error(
                    "listops",
                    [str(path.relative_to(self.data_dir))],
                    self.data_dir,
                    [LRA_RELEASE_URL],
                )
            try:
                sequences, labels = read_listops_tsv(path, self.max_length)
            except DataFormatError as error:
                if official is not None:
                    raise
                raise in_generated_folder(error, folder) from None
            packed = pack_sequences(sequences, torch.uint8)
            tensors |= {f"{split}/{key}": value for key, value in packed.items()}
            tensors[f"{split}/labels"] = torch.from_numpy(labels)
        return tensors
