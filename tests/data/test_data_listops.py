"""ListOps: tokenizer, tsv reader, generator correctness and determinism, data module."""

from __future__ import annotations

import itertools
import statistics
from contextlib import closing

import pytest
import torch
from helpers.data_fixtures import LISTOPS_LINES, write_listops_release

from linarena.data import DataFormatError, DataNotFoundError, ListOpsDataModule
from linarena.data.listops import VOCAB_SIZE, encode_listops, read_listops_tsv
from linarena.data.listops_generator import iter_unique_listops, write_listops_files


def generate_listops(num_examples: int, **settings: int) -> list[tuple[str, int]]:
    """The first `num_examples` of `iter_unique_listops(**settings)`."""
    with closing(iter_unique_listops(**settings)) as stream:
        return list(itertools.islice(stream, num_examples))


SMALL = {"max_depth": 10, "max_args": 10, "min_length": 10, "max_length": 64}


def evaluate(expression: str) -> tuple[int, int]:
    """Independent evaluator: value and depth of a bracketed ListOps expression."""
    tokens = [t for t in expression.split() if t not in ("(", ")")]
    stack: list[tuple[str, list[int]]] = []
    depth = max_depth = 0
    result = None
    for token in tokens:
        if token.startswith("["):
            stack.append((token, []))
            depth += 1
            max_depth = max(max_depth, depth)
            continue
        if token == "]":
            op, args = stack.pop()
            depth -= 1
            value = {
                "[MIN": lambda a: min(a),
                "[MAX": lambda a: max(a),
                "[MED": lambda a: int(statistics.median(a)),
                "[SM": lambda a: sum(a) % 10,
            }[op](args)
        else:
            value = int(token)
            max_depth = max(max_depth, depth + 1)
        if stack:
            stack[-1][1].append(value)
        else:
            result = value
    assert result is not None and not stack
    return result, max_depth


def test_encode_known_lines():
    assert encode_listops("( ( ( [MAX 2 ) 9 ) ] )").tolist() == [2, 8, 15, 5]
    assert encode_listops("( ( ( [MIN 0 ) [SM ) ] )").tolist() == [1, 6, 4, 5]
    assert encode_listops("( ( [MED 9 ) ] )").tolist() == [3, 15, 5]
    with pytest.raises(ValueError, match=r"\[FIRST"):
        encode_listops("( ( [FIRST 1 ) ] )")


def test_release_files_are_read(tmp_path):
    write_listops_release(tmp_path)
    dm = ListOpsDataModule(tmp_path, batch_size=2, num_train=5)  # sizes ignored for the release
    assert (dm.vocab_size, dm.num_classes, dm.head_kind, dm.name) == (
        VOCAB_SIZE,
        10,
        "sequence",
        "listops",
    )
    dm.prepare_data()
    dm.setup()
    assert {split: len(ds) for split, ds in dm.datasets.items()} == {
        "train": 3,
        "val": 3,
        "test": 3,
    }
    batch = next(iter(dm.val_dataloader()))
    assert batch["label"].tolist() == [9, 8]
    expected_first = [2, 8, 15, 5]  # [MAX 2 9 ]
    longest = max(len(encode_listops(s)) for s, _ in LISTOPS_LINES[:2])
    assert batch["tokens"].shape == (2, longest)
    assert batch["tokens"][0, :4].tolist() == expected_first
    assert batch["tokens"][0, 4:].eq(0).all() and not batch["mask"][0, 4:].any()
    assert batch["mask"][0, :4].all() and batch["mask"][1].all()


@pytest.mark.parametrize(
    ("content", "line", "message"),
    [
        ("Source\tTarget\n( ( [MAX 1 ) ] )\t1\n( ( [MAX 1 ) ] )\n", 3, "2 tab-separated"),
        ("Source\tTarget\n( ( [MAX 1 ) ] )\t12\n", 2, "digit 0-9"),
        ("Source\tTarget\n( ( [MAX 1 ) ] )\t1\n( ( [POW 1 ) ] )\t1\n", 3, "POW"),
        ("Src\tTgt\n", 1, "header"),
    ],
)
def test_malformed_tsv_names_file_and_line(tmp_path, content, line, message):
    path = tmp_path / "basic_train.tsv"
    path.write_text(content)
    with pytest.raises(DataFormatError, match=message) as error:
        read_listops_tsv(path, max_length=100)
    assert f"{path}:{line}" in str(error.value)


def test_too_long_expression_is_an_error(tmp_path):
    path = tmp_path / "basic_test.tsv"
    path.write_text("Source\tTarget\n( ( ( [MAX 2 ) 9 ) ] )\t9\n")
    with pytest.raises(DataFormatError, match=r"data\.max_length=3") as error:
        read_listops_tsv(path, max_length=3)
    assert f"{path}:2" in str(error.value)


def test_generated_labels_lengths_and_uniqueness():
    examples = generate_listops(300, seed=3, workers=1, **SMALL)
    assert len({expression for expression, _ in examples}) == 300
    for expression, label in examples:
        value, depth = evaluate(expression)
        assert label == value
        assert depth <= SMALL["max_depth"]
        assert SMALL["min_length"] < len(encode_listops(expression)) < SMALL["max_length"]


def test_generator_respects_max_depth_and_max_args():
    examples = generate_listops(
        100, seed=0, workers=1, max_depth=3, max_args=3, min_length=5, max_length=40
    )
    for expression, label in examples:
        value, depth = evaluate(expression)
        assert label == value and depth <= 3
        # every operator has at most 3 arguments: at most 3 + 1 opening brackets before it
        assert "( ( ( ( ( [" not in expression


def test_generator_is_deterministic_and_independent_of_workers():
    one = generate_listops(600, seed=1, workers=1, **SMALL)
    two = generate_listops(600, seed=1, workers=2, **SMALL)
    assert one == two
    assert generate_listops(600, seed=2, workers=1, **SMALL) != one


def test_generator_rejects_impossible_settings():
    with pytest.raises(ValueError, match="longest possible"):
        generate_listops(10, max_depth=2, max_args=3, min_length=20, max_length=100, workers=1)
    with pytest.raises(ValueError, match="unique"):
        generate_listops(10_000, max_depth=2, max_args=2, min_length=1, max_length=10, workers=1)


def test_written_files_have_release_format(tmp_path):
    write_listops_files(
        tmp_path, {"train": 5, "val": 2, "test": 2}, progress=False, workers=1, **SMALL
    )
    lines = (tmp_path / "basic_val.tsv").read_text().splitlines()
    assert lines[0] == "Source\tTarget" and len(lines) == 3
    source, target = lines[1].split("\t")
    assert (
        source.startswith("( ") and source.endswith(" ] )") and int(target) == evaluate(source)[0]
    )
    assert not list(tmp_path.glob(".*tmp"))


def test_generated_module_split_sizes_and_determinism(tmp_path):
    kwargs = {
        "batch_size": 4,
        "num_train": 40,
        "num_val": 8,
        "num_test": 8,
        "min_length": 10,
        "max_length": 64,
        "generator_workers": 1,
    }
    write_listops_release(tmp_path)  # present but not used with source="generated"
    dm = ListOpsDataModule(tmp_path, source="generated", **kwargs)
    dm.setup()
    assert {split: len(ds) for split, ds in dm.datasets.items()} == {
        "train": 40,
        "val": 8,
        "test": 8,
    }
    assert dm.generated_dir.is_dir() and dm.cache_path.is_file()
    other = ListOpsDataModule(tmp_path / "elsewhere", source="generated", **kwargs)
    other.setup()
    for split in ("train", "val", "test"):
        a, b = dm.datasets[split], other.datasets[split]
        assert all(torch.equal(a[i][0], b[i][0]) and a[i][1] == b[i][1] for i in range(len(a)))
    lengths = dm.datasets["train"].sequences.lengths()
    assert lengths.min() > 10 and lengths.max() < 64


def test_official_source_missing_gives_paths_and_url(tmp_path):
    dm = ListOpsDataModule(tmp_path, source="official")
    with pytest.raises(DataNotFoundError) as error:
        dm.prepare_data()
    message = str(error.value)
    assert str(tmp_path.resolve() / "lra_release/listops-1000/basic_train.tsv") in message
    assert "https://storage.googleapis.com/long-range-arena/lra_release.gz" in message
    assert "python scripts/prepare_data.py data=listops" in message


def test_bad_settings_name_the_key(tmp_path):
    with pytest.raises(ValueError, match=r"data\.source"):
        ListOpsDataModule(tmp_path, source="web")
    with pytest.raises(ValueError, match=r"data\.num_train"):
        ListOpsDataModule(tmp_path, num_train=0)
