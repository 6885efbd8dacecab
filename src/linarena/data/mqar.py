"""Multi-query associative recall (MQAR; Arora et al. 2023, "Zoology"), generated.

A sequence starts with `num_pairs` key-value pairs `k1 v1 k2 v2 ...`; the rest is the query region:
slots at every other position, `num_pairs` of which hold the keys again (each once, in random
order), everything else random filler tokens. At the position of each queried key the label is that
key's value; the model has read the key and must recall the value (causal attention). Keys come from
ids [1, vocab_size/2), values from [vocab_size/2, vocab_size); 0 is padding and never appears.
Query slots are drawn with probability proportional to (slot + 1) ** (power_a - 1), which favours
slots close to the pairs for small `power_a`, as in Zoology.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch.utils.data import ConcatDataset, DataLoader, Dataset

from linarena.data.base import TaskDataModule, check_split_sizes
from linarena.data.batching import IGNORE_INDEX, PAD_ID, TokenDataset, collate_tokens
from linarena.data.errors import DataConfigError
from linarena.data.spec import TaskSpec

_ROWS_PER_BLOCK = 2048  # bounds the (rows, key range) random matrices drawn at once


def _distinct_choices(
    rng: np.random.Generator, rows: int, low: int, high: int, k: int
) -> np.ndarray:
    """(rows, k) array; each row k distinct integers drawn uniformly from [low, high), in random
    order (argpartition's order is unspecified, so it is shuffled explicitly)."""
    scores = rng.random((rows, high - low))
    chosen = np.argpartition(scores, k - 1, axis=1)[:, :k] + low
    return np.take_along_axis(chosen, np.argsort(rng.random((rows, k)), axis=1), axis=1)


def generate_mqar(
    num_examples: int,
    vocab_size: int,
    seq_len: int,
    num_pairs: int,
    rng: np.random.Generator,
    power_a: float = 0.01,
) -> tuple[np.ndarray, np.ndarray]:
    """Token ids (n, seq_len) int64 and labels (n, seq_len) int64, IGNORE_INDEX where unscored."""
    check_mqar_settings(vocab_size, seq_len, num_pairs)
    half = vocab_size // 2
    context = 2 * num_pairs
    num_slots = (seq_len - context) // 2
    slot_weights = (power_a - 1.0) * np.log(np.arange(1, num_slots + 1, dtype=np.float64))
    tokens = np.empty((num_examples, seq_len), dtype=np.int64)
    labels = np.full((num_examples, seq_len), IGNORE_INDEX, dtype=np.int64)
    for start in range(0, num_examples, _ROWS_PER_BLOCK):
        rows = min(_ROWS_PER_BLOCK, num_examples - start)
        block = tokens[start : start + rows]
        keys = _distinct_choices(rng, rows, 1, half, num_pairs)
        values = _distinct_choices(rng, rows, half, vocab_size, num_pairs)
        block[:] = rng.integers(1, vocab_size, size=(rows, seq_len))  # filler everywhere first
        block[:, 0:context:2] = keys
        block[:, 1:context:2] = values
        # Weighted sampling of distinct slots without replacement (Gumbel top-k).
        gumbel = slot_weights - np.log(-np.log(rng.random((rows, num_slots))))
        slots = np.argpartition(-gumbel, num_pairs - 1, axis=1)[:, :num_pairs]
        # Which pair each chosen slot queries: a random permutation per row.
        pair_of_slot = np.argsort(rng.random((rows, num_pairs)), axis=1)
        positions = context + 2 * slots
        row_index = np.arange(rows)[:, None]
        block[row_index, positions] = keys[row_index, pair_of_slot]
        labels[start : start + rows][row_index, positions] = values[row_index, pair_of_slot]
    return tokens, labels


def value_distances(tokens: np.ndarray, labels: np.ndarray, num_pairs: int) -> np.ndarray:
    """(n, num_pairs): for each query of generate_mqar's sequences, in position order, how many
    tokens back its answer's value sits (query position - value position): what a window must
    reach to recall it."""
    queries = np.nonzero(labels != IGNORE_INDEX)[1].reshape(len(tokens), num_pairs)
    keys = tokens[:, 0 : 2 * num_pairs : 2]
    queried = np.take_along_axis(tokens, queries, axis=1)
    pair = np.argmax(queried[:, :, None] == keys[:, None, :], axis=2)  # keys are distinct
    return queries - (2 * pair + 1)


def check_mqar_settings(vocab_size: int, seq_len: int, num_pairs: int) -> None:
    """Raise DataConfigError naming the config key when the settings cannot produce a sequence."""
    if num_pairs < 1:
        raise DataConfigError(f"data.num_pairs must be >= 1, got {num_pairs}")
    if vocab_size // 2 - 1 < num_pairs:
        raise DataConfigError(
            f"data.vocab_size={vocab_size} gives {vocab_size // 2 - 1} key ids, fewer "
            f"than data.num_pairs={num_pairs}; raise data.vocab_size"
        )
    if seq_len < 4 * num_pairs:
        raise DataConfigError(
            f"data.max_length={seq_len} is too short for data.num_pairs={num_pairs}: "
            f"pairs and query slots need 4 * num_pairs = {4 * num_pairs} positions"
        )


class MQARDataModule(TaskDataModule):
    """Generated MQAR sequences; task "token": labels (B, L) are value ids at queried keys.

    num_classes = vocab_size, so a label is a token id. A causal task (TaskSpec.causal).
    """

    def __init__(
        self,
        data_dir: str | Path,
        batch_size: int = 64,
        num_workers: int = 0,
        seed: int = 0,
        max_length: int = 256,
        vocab_size: int = 8192,
        num_pairs: int = 16,
        power_a: float = 0.01,
        num_train: int = 100_000,
        num_val: int = 3_000,
        num_test: int = 3_000,
    ) -> None:
        # A label is a value id, i.e. a token id: as many classes as token ids.
        spec = TaskSpec("mqar", "token", vocab_size, vocab_size, max_length, causal=True)
        super().__init__(spec, data_dir, batch_size, num_workers, seed)
        check_mqar_settings(vocab_size, max_length, num_pairs)
        check_split_sizes(num_train, num_val, num_test)
        if not power_a > 0:
            raise DataConfigError(f"data.power_a must be > 0, got {power_a}")
        self.num_pairs, self.power_a = num_pairs, power_a
        self.sizes = {"train": num_train, "val": num_val, "test": num_test}

    def cache_config(self) -> dict[str, Any]:
        return {
            "seed": self.seed,
            "vocab_size": self.vocab_size,
            "num_pairs": self.num_pairs,
            "power_a": self.power_a,
            "sizes": self.sizes,
        }

    def build(self) -> dict[str, torch.Tensor]:
        dtype = torch.int16 if self.vocab_size <= torch.iinfo(torch.int16).max else torch.int32
        tensors = {}
        for split_index, (split, size) in enumerate(self.sizes.items()):
            rng = np.random.default_rng([self.seed, split_index])
            tokens, labels = generate_mqar(
                size, self.vocab_size, self.max_length, self.num_pairs, rng, self.power_a
            )
            tensors[f"{split}/tokens"] = torch.from_numpy(tokens).to(dtype)
            tensors[f"{split}/labels"] = torch.from_numpy(labels).to(dtype)
        return tensors


def mqar_setting_name(length: int, pairs: int) -> str:
    """The name of a (length, pairs) setting in metric keys: test/acc_L256_P64."""
    return f"L{length}_P{pairs}"


def _settings(items: Sequence[Mapping[str, int]], key: str) -> list[tuple[int, int, int]]:
    """[(length, pairs, examples)] from the config list `data.<key>` of
    {length, pairs, examples}."""
    if not items:
        raise DataConfigError(f"data.{key} is empty: list at least one {{length, pairs, examples}}")
    found = []
    for item in items:
        if set(item) != {"length", "pairs", "examples"} or int(item["examples"]) < 1:
            raise DataConfigError(f"data.{key}: each entry needs length, pairs and examples >= 1, "
                             f"got {dict(item)}")
        found.append((int(item["length"]), int(item["pairs"]), int(item["examples"])))
    return found


def _padded(arrays: list[np.ndarray], length: int, fill: int) -> np.ndarray:
    """Rows of every (n_i, length_i) array, right-padded with `fill` to `length`, stacked."""
    return np.concatenate([np.pad(a, ((0, 0), (0, length - a.shape[1])), constant_values=fill)
                           for a in arrays])


class SettingTokens(TokenDataset):
    """TokenDataset of one (length, pairs) setting; items carry the setting's index."""

    def __init__(self, tokens: torch.Tensor, labels: torch.Tensor, setting: int) -> None:
        super().__init__(tokens, labels)
        self.setting = setting

    def __getitem__(self, index: int) -> tuple[torch.Tensor, torch.Tensor, int]:
        return (*super().__getitem__(index), self.setting)


def collate_settings(batch: Sequence[tuple[torch.Tensor, torch.Tensor, int]]) -> dict:
    """collate_tokens plus `setting`: the index of the batch's one (length, pairs) setting."""
    out = collate_tokens([(tokens, labels) for tokens, labels, _ in batch])
    out["setting"] = torch.tensor(batch[0][2])
    return out


class MQARMixtureDataModule(TaskDataModule):
    """MQAR as Zoology trains and tests it: training on a mixture of (length, pairs) settings
    (shorter ones right-padded to the longest, labels -100 there), validation on fresh examples
    of the same mixture, and a test set per setting, typically longer and with more pairs.

    Test batches hold one setting each and carry its index (`setting`); `test_setting_names`
    names them (L<length>_P<pairs>), and the training module logs test/acc_<name> per setting
    beside test/acc over all of them. max_length must cover the longest setting (the model's
    position table).
    """

    def __init__(
        self,
        data_dir: str | Path,
        train: Sequence[Mapping[str, int]],
        test: Sequence[Mapping[str, int]],
        batch_size: int = 64,
        num_workers: int = 0,
        seed: int = 0,
        max_length: int = 1024,
        vocab_size: int = 8192,
        power_a: float = 0.01,
        num_val: int = 200,
    ) -> None:
        spec = TaskSpec("mqar_mixture", "token", vocab_size, vocab_size, max_length, causal=True)
        super().__init__(spec, data_dir, batch_size, num_workers, seed)
        self.train_settings, self.test_settings = _settings(train, "train"), _settings(test, "test")
        for length, pairs, _ in self.train_settings + self.test_settings:
            check_mqar_settings(vocab_size, length, pairs)
        longest = max(length for length, _, _ in self.train_settings + self.test_settings)
        if max_length < longest:
            raise DataConfigError(f"data.max_length={max_length} is shorter than the longest "
                                  f"setting ({longest} tokens); set data.max_length={longest}")
        if num_val < 1 or not power_a > 0:
            raise DataConfigError(f"data.num_val must be >= 1 and data.power_a > 0, got "
                                  f"{num_val}, {power_a}")
        self.power_a, self.num_val = power_a, num_val
        self.test_setting_names = [mqar_setting_name(length, pairs)
                                   for length, pairs, _ in self.test_settings]

    def cache_config(self) -> dict[str, Any]:
        return {"seed": self.seed, "vocab_size": self.vocab_size, "power_a": self.power_a,
                "train": [list(s) for s in self.train_settings],
                "test": [list(s) for s in self.test_settings],
                "num_val": self.num_val}

    def _generate(self, split: int, settings: list[tuple[int, int, int]]) -> list[tuple]:
        """(tokens, labels) per setting, each from its own stream (seed, split, setting)."""
        return [generate_mqar(examples, self.vocab_size, length, pairs,
                              np.random.default_rng([self.seed, split, index]), self.power_a)
                for index, (length, pairs, examples) in enumerate(settings)]

    def build(self) -> dict[str, torch.Tensor]:
        dtype = torch.int16 if self.vocab_size <= torch.iinfo(torch.int16).max else torch.int32
        tensors = {}
        val_settings = [(length, pairs, self.num_val) for length, pairs, _ in self.train_settings]
        train_length = max(length for length, _, _ in self.train_settings)
        for split_index, (split, settings) in enumerate(
            (("train", self.train_settings), ("val", val_settings))
        ):
            parts = self._generate(split_index, settings)
            tokens = _padded([t for t, _ in parts], train_length, PAD_ID)
            labels = _padded([label for _, label in parts], train_length, IGNORE_INDEX)
            tensors[f"{split}/tokens"] = torch.from_numpy(tokens).to(dtype)
            tensors[f"{split}/labels"] = torch.from_numpy(labels).to(dtype)
        for name, (tokens, labels) in zip(self.test_setting_names,
                                          self._generate(2, self.test_settings), strict=True):
            tensors[f"test/{name}/tokens"] = torch.from_numpy(tokens).to(dtype)
            tensors[f"test/{name}/labels"] = torch.from_numpy(labels).to(dtype)
        return tensors

    def make_dataset(self, tensors: dict[str, torch.Tensor], split: str) -> Dataset:
        if split != "test":
            return super().make_dataset(tensors, split)
        return ConcatDataset([
            SettingTokens(tensors[f"test/{name}/tokens"], tensors[f"test/{name}/labels"], index)
            for index, name in enumerate(self.test_setting_names)])

    def test_dataloader(self) -> DataLoader:
        """Batches of one setting each (settings differ in length), in setting order."""
        if not self.datasets:
            self.setup()
        batches, start = [], 0
        for _, _, examples in self.test_settings:
            batches += [list(range(i, min(i + self.batch_size, start + examples)))
                        for i in range(start, start + examples, self.batch_size)]
            start += examples
        return DataLoader(self.datasets["test"], batch_sampler=batches,
                          collate_fn=collate_settings, num_workers=self.num_workers)
