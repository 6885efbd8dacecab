"""What a pretraining run's masked-token test accuracy (the report's last column) is read against:
the accuracy of two rules that learn nothing a model would need attention for, and, where the
task's generator makes one, a ceiling no rule can pass.

- Commonest token: always predicting the commonest real token of the training inputs. The masks
  are Bernoulli draws over the real tokens (data.masking.mask_tokens), independent of the
  tokens, so its expected accuracy is that token's share of the test split's real tokens.
- Neighbours: predicting each masked token from the two positions beside it, as the model sees
  them (a real token, the mask token, or no real token: padding or the sequence's edge): the
  target most often found between that pair among the training inputs' masked tokens, the
  commonest token for a pair never seen. It is scored on the test split under the evaluation
  masks of every seed of the study (data.masking.mask_generator), pooled, as the runs are.
- Kinds (a ceiling): where the generator draws a token's identity within its kind uniformly and
  independently of every other token (the datamodule's independent_token_kinds; ListOps),
  the context of a masked token can tell at most its kind, so no predictor scores more, in
  expectation, than an oracle told each masked token's kind that predicts the training inputs'
  commonest token of that kind: the sum over kinds of that token's share of the test split's
  real tokens. Empty (NaN) for a task without such kinds.

Tokens are the batches the datamodule gives training (batch["tokens"], real where
batch["mask"]), so what counts as real is what the pretraining masks (ListOps' padding,
Pathfinder's black pixels under zero_pixel_is_padding).
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence

import pandas as pd
import torch
import torch.nn.functional as F
from torch import Tensor

from linarena.data.masking import mask_generator, mask_tokens, token_targets
from linarena.studies.preset import compose_preset
from linarena.studies.spt import split_overrides
from linarena.training.build import instantiate_group

# A datamodule's loader, or any re-iterable batches with "tokens" and "mask".
Batches = Iterable[dict[str, Tensor]]


def real_sequences(loader: Batches) -> Iterator[tuple[Tensor, Tensor]]:
    """Each batch's (tokens, real), both (sequences, length); a pair task's two documents are
    two sequences, as the pretraining reads them."""
    for batch in loader:
        tokens, real = batch["tokens"], batch["mask"]
        if tokens.dim() == 3:
            tokens, real = tokens.flatten(0, 1), real.flatten(0, 1)
        yield tokens, real


def token_counts(loader: Batches, vocab_size: int) -> torch.Tensor:
    """(vocab_size,) int64: how often each token id occurs at a real position of the loader's
    batches."""
    counts = torch.zeros(vocab_size, dtype=torch.long)
    for tokens, real in real_sequences(loader):
        counts += torch.bincount(tokens[real], minlength=vocab_size)
    return counts


def kind_ceiling(train_counts: Tensor, test_counts: Tensor,
                 kinds: Sequence[Sequence[int]]) -> float:
    """The kind oracle's expected accuracy (the module docstring): for each kind, the test
    split's count of the training inputs' commonest token of that kind, over the test split's
    real tokens; NaN without kinds. `train_counts`, `test_counts`: (vocab_size,) token_counts.
    Raises ValueError unless the kinds hold every real token id once (a group left out would
    be scored as never predicted)."""
    if not kinds:
        return float("nan")
    listed = sorted(token for kind in kinds for token in kind)
    if listed != list(range(1, len(test_counts))):
        raise ValueError(f"token kinds {kinds} must hold each real token id, 1 to "
                         f"{len(test_counts) - 1}, exactly once")
    hits = sum(int(test_counts[max(kind, key=lambda token: (train_counts[token], -token))])
               for kind in kinds)
    return hits / test_counts.sum().item()


def neighbour_pairs(loader: Batches, vocab_size: int, fraction: float, seed: int,
                    split: str) -> tuple[Tensor, Tensor]:
    """(pair, target) of every masked token of the loader's batches, both (masked tokens,)
    int64: the pair of the tokens beside it as the model sees them, encoded as left *
    (vocab_size + 1) + right, with 0 for no real token and vocab_size for the mask token; the
    target is the masked token's id. Masks as the pretraining draws them for `seed` and `split`
    (batch index as the step)."""
    masked_id, pairs, targets = vocab_size, [], []
    for index, (tokens, real) in enumerate(real_sequences(loader)):
        inputs, _ = mask_tokens(tokens, real, fraction, masked_id,
                                mask_generator(seed, split, index))
        seen = torch.where(real, inputs, torch.zeros_like(inputs))
        left, right = F.pad(seen, (1, 0))[:, :-1], F.pad(seen, (0, 1))[:, 1:]
        chosen = inputs == masked_id
        pairs.append((left * (vocab_size + 1) + right)[chosen])
        targets.append(tokens[chosen])
    return torch.cat(pairs), torch.cat(targets)


def neighbour_rule(pairs: Tensor, targets: Tensor) -> pd.Series:
    """pair -> the target seen most often with it (the smallest id among ties)."""
    seen = pd.DataFrame({"pair": pairs.numpy(), "target": targets.numpy()})
    counts = seen.value_counts().rename("count").reset_index()
    counts = counts.sort_values(["count", "target"], ascending=[False, True])
    return counts.drop_duplicates("pair").set_index("pair")["target"]


def neighbours_accuracy(train: Batches, test: Batches, vocab_size: int, fraction: float,
                        seeds: Sequence[int], fallback: int) -> tuple[float, int, float]:
    """The neighbours rule fitted on `train` under the first seed's training masks, scored on
    `test` under every seed's evaluation masks, pooled: (accuracy, masked test tokens, share of
    them whose pair the training inputs never showed, predicted as `fallback`). `train` and
    `test`: a datamodule's loaders."""
    rule = neighbour_rule(*neighbour_pairs(train, vocab_size, fraction, seeds[0], "train"))
    scored = [neighbour_pairs(test, vocab_size, fraction, seed, "test") for seed in seeds]
    pairs, targets = (torch.cat(parts) for parts in zip(*scored, strict=True))
    predicted = pd.Series(pairs.numpy()).map(rule)
    accuracy = float((predicted.fillna(fallback) == targets.numpy()).mean())
    return accuracy, len(targets), float(predicted.isna().mean())


def masked_token_baselines(preset: str, overrides: Sequence[str], fraction: float,
                           seeds: Sequence[int]) -> pd.DataFrame:
    """One row for experiment=<preset> (with the study's train.py `overrides`), masking
    `fraction` of the real tokens: the commonest real token of the training inputs (id, class,
    share of the training and the test split's real tokens: the latter is its expected
    accuracy), the neighbours rule's test accuracy under the evaluation masks of `seeds`, with
    the counts behind them, and the kind oracle's ceiling. Reads (or builds and caches) the
    task's data."""
    _, train = split_overrides(overrides)
    cfg = compose_preset(preset, train)
    datamodule = instantiate_group(cfg.data, "data")
    datamodule.prepare_data()
    datamodule.setup()
    vocab_size = datamodule.vocab_size
    train_counts = token_counts(datamodule.train_dataloader(), vocab_size)
    test_counts = token_counts(datamodule.test_dataloader(), vocab_size)
    token = int(train_counts.argmax())
    with torch.random.fork_rng():  # the training loader's shuffle: the same at every report
        torch.manual_seed(seeds[0])
        accuracy, masked, unseen = neighbours_accuracy(
            datamodule.train_dataloader(), datamodule.test_dataloader(), vocab_size, fraction,
            seeds, token)
    return pd.DataFrame([{
        "task": datamodule.name, "token_id": token,
        "token_class": int(token_targets(torch.tensor(token))),
        "train_share": train_counts[token].item() / train_counts.sum().item(),
        "test_share": test_counts[token].item() / test_counts.sum().item(),
        "train_real_tokens": int(train_counts.sum()), "test_real_tokens": int(test_counts.sum()),
        "mask_fraction": fraction, "mask_seeds": " ".join(map(str, seeds)),
        "neighbours_test_acc": accuracy, "neighbours_masked_test_tokens": masked,
        "neighbours_unseen_share": unseen,
        "kind_ceiling_test_acc": kind_ceiling(train_counts, test_counts,
                                              datamodule.independent_token_kinds),
    }])


def baseline_line(baseline: pd.DataFrame, name: str) -> str:
    """The caption's sentences on the baselines (`name`: the study's output name)."""
    row = baseline.iloc[0]
    return (f"Masked-token accuracy without attention ({name}_masked_baseline.csv), the numbers "
            "the last column is read against: always predicting the commonest real token of the "
            f"training inputs (id {row['token_id']}, {100 * row['train_share']:.1f}% of them) "
            f"scores {100 * row['test_share']:.1f}% in expectation (its share of the test "
            f"split's {row['test_real_tokens']:,} real tokens); predicting each masked token "
            "from the two tokens beside it as the model sees them (the training inputs' "
            f"commonest token between that pair) scores {100 * row['neighbours_test_acc']:.1f}% "
            f"of the {row['neighbours_masked_test_tokens']:,} masked test tokens of the "
            "seeds' evaluation masks." + ceiling_sentence(row) + "\n")


def ceiling_sentence(row: pd.Series) -> str:
    """The caption's sentence on the kind oracle's ceiling; empty for a task without kinds."""
    if pd.isna(row["kind_ceiling_test_acc"]):
        return ""
    return (" The generator draws each token uniformly within its kind and independently of the "
            "other tokens, so no predictor from context scores more, in expectation, than an "
            "oracle told each masked token's kind that predicts the training inputs' commonest "
            f"token of that kind: it scores {100 * row['kind_ceiling_test_acc']:.1f}%.")
