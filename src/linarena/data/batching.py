"""Compact storage of variable-length sequences, datasets over it, and padding collate functions.

Sequences are stored as one flat tensor of values plus offsets (sequence i is
`values[offsets[i]:offsets[i + 1]]`), in the smallest dtype that holds them; raw bytes and
pixels are stored as uint8 and shifted by `shift` (+1) when a batch is built, so that id 0 stays
the padding id.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import torch
from torch.utils.data import Dataset

PAD_ID = 0
IGNORE_INDEX = -100


def pack_sequences(sequences: Sequence[np.ndarray], dtype: torch.dtype) -> dict[str, torch.Tensor]:
    """Pack 1-D arrays into {"values": (total,), "offsets": (n + 1,) int64}."""
    lengths = np.fromiter((len(s) for s in sequences), dtype=np.int64, count=len(sequences))
    offsets = np.zeros(len(sequences) + 1, dtype=np.int64)
    np.cumsum(lengths, out=offsets[1:])
    values = torch.from_numpy(np.concatenate(sequences)) if sequences else torch.empty(0)
    return {"values": values.to(dtype), "offsets": torch.from_numpy(offsets)}


def pack_rows(rows: np.ndarray, dtype: torch.dtype) -> dict[str, torch.Tensor]:
    """Pack the rows of a (n, length) array, all of the same length."""
    count, length = rows.shape
    offsets = torch.arange(count + 1, dtype=torch.int64) * length
    return {
        "values": torch.from_numpy(np.ascontiguousarray(rows).reshape(-1)).to(dtype),
        "offsets": offsets,
    }


class PackedSequences:
    """Read-only view of packed sequences: `seqs[i]` is a LongTensor (length_i,) of token ids."""

    def __init__(self, values: torch.Tensor, offsets: torch.Tensor, shift: int = 0) -> None:
        if offsets.ndim != 1 or len(offsets) == 0 or int(offsets[-1]) != len(values):
            raise ValueError("offsets must be 1-D and end at len(values)")
        self.values = values
        self.offsets = offsets
        self.shift = shift

    def __len__(self) -> int:
        return len(self.offsets) - 1

    def __getitem__(self, index: int) -> torch.Tensor:
        start, end = int(self.offsets[index]), int(self.offsets[index + 1])
        return self.values[start:end].long() + self.shift

    def lengths(self) -> torch.Tensor:
        """Sequence lengths, LongTensor (n,)."""
        return self.offsets[1:] - self.offsets[:-1]


class SequenceDataset(Dataset):
    """Sequence classification items: (tokens LongTensor (length,), label int)."""

    def __init__(self, sequences: PackedSequences, labels: torch.Tensor) -> None:
        if len(sequences) != len(labels):
            raise ValueError(f"{len(sequences)} sequences but {len(labels)} labels")
        self.sequences = sequences
        self.labels = labels

    def __len__(self) -> int:
        return len(self.labels)

    def __getitem__(self, index: int) -> tuple[torch.Tensor, int]:
        return self.sequences[index], int(self.labels[index])


class PairDataset(Dataset):
    """Two-document items: ((tokens1 (length1,), tokens2 (length2,)), label int)."""

    def __init__(self, first: PackedSequences, second: PackedSequences, labels: torch.Tensor):
        if not len(first) == len(second) == len(labels):
            raise ValueError(f"{len(first)}/{len(second)} documents but {len(labels)} labels")
        self.first, self.second, self.labels = first, second, labels

    def __len__(self) -> int:
        return len(self.labels)

    def __getitem__(self, index: int) -> tuple[tuple[torch.Tensor, torch.Tensor], int]:
        return (self.first[index], self.second[index]), int(self.labels[index])


class TokenDataset(Dataset):
    """Per-position classification items: (tokens (length,), labels (length,)), -100 = unscored."""

    def __init__(self, tokens: torch.Tensor, labels: torch.Tensor) -> None:
        if tokens.shape != labels.shape:
            raise ValueError(f"tokens {tuple(tokens.shape)} vs labels {tuple(labels.shape)}")
        self.tokens, self.labels = tokens, labels

    def __len__(self) -> int:
        return len(self.tokens)

    def __getitem__(self, index: int) -> tuple[torch.Tensor, torch.Tensor]:
        return self.tokens[index].long(), self.labels[index].long()


def _pad(sequences: Sequence[torch.Tensor], length: int) -> torch.Tensor:
    """Right-pad 1-D LongTensors with PAD_ID into a (n, length) LongTensor."""
    out = torch.full((len(sequences), length), PAD_ID, dtype=torch.long)
    for row, seq in enumerate(sequences):
        out[row, : len(seq)] = seq
    return out


def collate_sequences(batch: Sequence[tuple[torch.Tensor, int]]) -> dict[str, torch.Tensor]:
    """Batch for task "sequence": tokens/mask (B, L) with L the longest in the batch; label (B,)."""
    sequences = [tokens for tokens, _ in batch]
    tokens = _pad(sequences, max(len(s) for s in sequences))
    labels = torch.tensor([label for _, label in batch], dtype=torch.long)
    return {"tokens": tokens, "mask": tokens != PAD_ID, "label": labels}


def collate_pairs(
    batch: Sequence[tuple[tuple[torch.Tensor, torch.Tensor], int]],
) -> dict[str, torch.Tensor]:
    """Batch for task "pair": tokens/mask (B, 2, L) with L the longest document; label (B,)."""
    length = max(max(len(a), len(b)) for (a, b), _ in batch)
    first = _pad([a for (a, _), _ in batch], length)
    second = _pad([b for (_, b), _ in batch], length)
    tokens = torch.stack([first, second], dim=1)
    labels = torch.tensor([label for _, label in batch], dtype=torch.long)
    return {"tokens": tokens, "mask": tokens != PAD_ID, "label": labels}


def collate_tokens(batch: Sequence[tuple[torch.Tensor, torch.Tensor]]) -> dict[str, torch.Tensor]:
    """Batch for task "token": tokens/mask/label (B, L); label -100 where not scored."""
    tokens = torch.stack([tokens for tokens, _ in batch])
    labels = torch.stack([labels for _, labels in batch])
    return {"tokens": tokens, "mask": tokens != PAD_ID, "label": labels}
