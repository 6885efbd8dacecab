"""The masked-token accuracy that needs no context: always predicting the commonest real token of
the task's training inputs. A pretraining run's masked-token test accuracy (the report's last
column) says what the pretraining learned only beside this number: a model that predicts the
token frequencies alone scores it.

The masks are Bernoulli draws over the real tokens (data.masking.mask_tokens), independent of
the tokens, so the expected share of masked test tokens equal to the commonest one is its share
of all real test tokens; that share is what is reported. Tokens are counted from the batches the
datamodule gives training (batch["tokens"] where batch["mask"]), so what counts as real is
what the pretraining masks (ListOps' padding, Pathfinder's black pixels under
zero_pixel_is_padding).
"""

from __future__ import annotations

from collections.abc import Sequence

import pandas as pd
import torch
from torch.utils.data import DataLoader

from linarena.data.masking import token_targets
from linarena.studies.preset import compose_preset
from linarena.studies.spt import split_overrides
from linarena.training.build import instantiate_group


def token_counts(loader: DataLoader, vocab_size: int) -> torch.Tensor:
    """(vocab_size,) int64: how often each token id occurs at a real position of the loader's
    batches."""
    counts = torch.zeros(vocab_size, dtype=torch.long)
    for batch in loader:
        counts += torch.bincount(batch["tokens"][batch["mask"]].flatten(), minlength=vocab_size)
    return counts


def commonest_token_baseline(preset: str, overrides: Sequence[str] = ()) -> pd.DataFrame:
    """One row: the commonest real token id of experiment=<preset>'s training inputs (with the
    study's train.py `overrides`), its class (the LM head's target), its share of the training
    and the test split's real tokens (the latter: the masked-token test accuracy of always
    predicting it), and the counts behind them. Reads (or builds and caches) the task's data."""
    _, train = split_overrides(overrides)
    cfg = compose_preset(preset, train)
    datamodule = instantiate_group(cfg.data, "data")
    datamodule.prepare_data()
    datamodule.setup()
    train_counts = token_counts(datamodule.train_dataloader(), datamodule.vocab_size)
    test_counts = token_counts(datamodule.test_dataloader(), datamodule.vocab_size)
    token = int(train_counts.argmax())
    return pd.DataFrame([{
        "task": datamodule.name, "token_id": token,
        "token_class": int(token_targets(torch.tensor(token))),
        "train_share": train_counts[token].item() / train_counts.sum().item(),
        "test_share": test_counts[token].item() / test_counts.sum().item(),
        "train_real_tokens": int(train_counts.sum()), "test_real_tokens": int(test_counts.sum()),
    }])


def baseline_line(baseline: pd.DataFrame, name: str) -> str:
    """The caption's sentence on the baseline (`name`: the study's output name)."""
    row = baseline.iloc[0]
    return (f"Masked-token accuracy without context: always predicting the commonest real token "
            f"of the training inputs (id {row['token_id']}, "
            f"{100 * row['train_share']:.1f}% of them) scores {100 * row['test_share']:.1f}% of "
            f"the masked test tokens in expectation (its share of the test split's "
            f"{row['test_real_tokens']:,} real tokens; {name}_masked_baseline.csv), the number "
            "the last column is read against.\n")
