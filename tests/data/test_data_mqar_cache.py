"""MQAR generation and the tensor cache (keying, atomic writes, corruption detection)."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from linarena.data import MQARDataModule
from linarena.data.cache import config_hash, load_tensors, save_tensors
from linarena.data.mqar import generate_mqar

V, L, P = 64, 40, 6


def check_recall_answers(tokens: np.ndarray, labels: np.ndarray, num_pairs: int, vocab: int):
    """Independent check: each scored position holds a context key, labelled with its value."""
    half = vocab // 2
    for row, row_labels in zip(tokens, labels, strict=True):
        keys, values = row[0 : 2 * num_pairs : 2], row[1 : 2 * num_pairs : 2]
        assert len(set(keys.tolist())) == num_pairs
        assert ((keys >= 1) & (keys < half)).all() and ((values >= half) & (values < vocab)).all()
        value_of = dict(zip(keys.tolist(), values.tolist(), strict=True))
        scored = np.flatnonzero(row_labels != -100)
        assert len(scored) == num_pairs
        assert (scored >= 2 * num_pairs).all()
        assert sorted(row[scored].tolist()) == sorted(keys.tolist())  # every key queried once
        for position in scored:
            assert row_labels[position] == value_of[row[position]]
        assert (row >= 1).all() and (row < vocab).all()


def test_mqar_answers_are_correct():
    tokens, labels = generate_mqar(50, V, L, P, np.random.default_rng(0))
    assert tokens.shape == labels.shape == (50, L)
    check_recall_answers(tokens, labels, P, V)


def test_mqar_fills_every_slot_when_pairs_use_all_of_them():
    tokens, labels = generate_mqar(10, 32, 16, 4, np.random.default_rng(1))
    check_recall_answers(tokens, labels, 4, 32)
    assert (labels[:, 8::2] != -100).all()  # 4 pairs, 4 query slots: all used


def test_mqar_module_batches_and_determinism(tmp_path):
    kwargs = {
        "batch_size": 8,
        "vocab_size": V,
        "max_length": L,
        "num_pairs": P,
        "num_train": 32,
        "num_val": 8,
        "num_test": 8,
    }
    dm = MQARDataModule(tmp_path, **kwargs)
    assert (dm.head_kind, dm.vocab_size, dm.num_classes, dm.max_length) == ("token", V, V, L)
    dm.setup()
    batch = next(iter(dm.val_dataloader()))
    assert batch["tokens"].shape == batch["label"].shape == batch["mask"].shape == (8, L)
    assert batch["mask"].all() and batch["label"].dtype == torch.long
    check_recall_answers(batch["tokens"].numpy(), batch["label"].numpy(), P, V)
    other = MQARDataModule(tmp_path / "b", **kwargs)
    other.setup()
    assert torch.equal(other.datasets["train"].tokens, dm.datasets["train"].tokens)
    assert not torch.equal(dm.datasets["train"].tokens[:8], dm.datasets["val"].tokens)
    reseeded = MQARDataModule(tmp_path / "c", seed=1, **kwargs)
    reseeded.setup()
    assert not torch.equal(reseeded.datasets["train"].tokens, dm.datasets["train"].tokens)


def test_mqar_settings_errors_name_the_key(tmp_path):
    with pytest.raises(
        ValueError, match=r"data\.max_length=40 is too short for data\.num_pairs=11"
    ):
        MQARDataModule(tmp_path, vocab_size=V, max_length=L, num_pairs=11)
    with pytest.raises(ValueError, match=r"data\.vocab_size"):
        MQARDataModule(tmp_path, vocab_size=8, max_length=L, num_pairs=6)


def test_cache_round_trip_and_keying(tmp_path):
    tensors = {"a/values": torch.arange(10, dtype=torch.uint8), "a/labels": torch.tensor([1, 2])}
    path = tmp_path / "cache" / "x.pt"
    save_tensors(path, {"n": 1}, tensors)
    loaded = load_tensors(path, {"n": 1})
    assert loaded is not None and all(torch.equal(loaded[k], v) for k, v in tensors.items())
    assert [p.name for p in path.parent.iterdir()] == ["x.pt"]  # no temp files left
    with pytest.warns(RuntimeWarning, match="different configuration"):
        assert load_tensors(path, {"n": 2}) is None
    assert config_hash({"n": 1}) == config_hash({"n": 1}) != config_hash({"n": 2})


def small_mqar(data_dir):
    return MQARDataModule(
        data_dir, vocab_size=V, max_length=L, num_pairs=P, num_train=16, num_val=4, num_test=4
    )


def test_truncated_cache_is_rebuilt_with_one_warning(tmp_path):
    dm = small_mqar(tmp_path)
    dm.prepare_data()
    reference = load_tensors(dm.cache_path, dm._full_config())
    content = dm.cache_path.read_bytes()
    dm.cache_path.write_bytes(content[: len(content) // 2])
    rebuilt = small_mqar(tmp_path)
    with pytest.warns(RuntimeWarning, match="rebuilding") as warned:
        rebuilt.setup()
    assert sum("rebuilding" in str(w.message) for w in warned) == 1
    assert torch.equal(rebuilt.datasets["train"].tokens, reference["train/tokens"])
    assert dm.cache_path.read_bytes() == content


def test_flipped_bytes_in_cache_are_detected(tmp_path):
    dm = small_mqar(tmp_path)
    dm.prepare_data()
    content = bytearray(dm.cache_path.read_bytes())
    tokens = load_tensors(dm.cache_path, dm._full_config())["train/tokens"]
    # Find the stored token bytes and change one token inside them.
    start = bytes(content).find(tokens.numpy().tobytes())
    assert start > 0
    content[start] ^= 0xFF
    dm.cache_path.write_bytes(bytes(content))
    with pytest.warns(RuntimeWarning, match="rebuilding"):
        assert load_tensors(dm.cache_path, dm._full_config()) is None
    with pytest.warns(RuntimeWarning, match="checksum mismatch"):
        small_mqar(tmp_path).setup()  # rebuilds
    assert load_tensors(dm.cache_path, dm._full_config()) is not None
