"""Command-line argument types the benchmarks share, so they take --lengths, lists of names,
counts, the timing options, --device and --out the same way and refuse bad values with one line
(argparse's `error:` line)."""

from __future__ import annotations

import argparse
from pathlib import Path

import torch

REPO_ROOT = Path(__file__).resolve().parents[3]
OUTPUT_DIR = REPO_ROOT / "outputs" / "benchmarks"  # where --out defaults to, for every benchmark


def _int_at_least(text: str, minimum: int, expected: str, must: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected {expected}, got {text!r}") from None
    if value < minimum:
        raise argparse.ArgumentTypeError(f"must be {must}, got {value}")
    return value


def positive_int(text: str) -> int:
    """An integer >= 1."""
    return _int_at_least(text, 1, "a positive integer", "a positive integer")


def non_negative_int(text: str) -> int:
    """An integer >= 0."""
    return _int_at_least(text, 0, "an integer >= 0", ">= 0")


def positive_float(text: str) -> float:
    """A finite number > 0."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a positive number, got {text!r}") from None
    if not 0 < value < float("inf"):
        raise argparse.ArgumentTypeError(f"must be a positive number, got {text}")
    return value


def names_arg(text: str) -> list[str]:
    """A comma-separated list: `softmax,elu` or `softmax, elu` (empty items dropped)."""
    return [item.strip() for item in text.split(",") if item.strip()]


def lengths_arg(text: str) -> list[int]:
    """One --lengths word: `512` or `256,512` (use with nargs="+" and `flat_lengths`)."""
    items = names_arg(text)
    if not items:
        raise argparse.ArgumentTypeError(f"expected sequence lengths, got {text!r}")
    return [positive_int(item) for item in items]


def flat_lengths(words: list[list[int]]) -> list[int]:
    """The sorted distinct lengths of --lengths words: `256 512`, `256,512` and `256, 512`."""
    return sorted({length for word in words for length in word})


def add_timing_arguments(parser: argparse.ArgumentParser, warmup: tuple[int, str],
                         repeats: tuple[int, str],
                         max_seconds: tuple[float | None, str]) -> None:
    """--warmup (untimed calls), --repeats (timed calls) and --max-seconds (the predicted time
    past which a case is skipped), under one name and type in every benchmark; each
    benchmark gives its own (default, help) of each, as its calls differ."""
    for flag, kind, (default, text) in (("--warmup", non_negative_int, warmup),
                                        ("--repeats", positive_int, repeats),
                                        ("--max-seconds", positive_float, max_seconds)):
        parser.add_argument(flag, type=kind, default=default, help=text)


def check_device(parser: argparse.ArgumentParser, device: str) -> torch.device:
    """torch.device(device), or a parser error for a name torch does not know or CUDA that is
    not there."""
    try:
        parsed = torch.device(device)
    except RuntimeError:
        parser.error(f"--device {device}: not a device name (cpu, cuda, cuda:1, ...)")
    if parsed.type == "cuda" and not torch.cuda.is_available():
        parser.error(f"--device {device}: no CUDA device is visible (torch.cuda.is_available() "
                     "is False); use --device cpu")
    return parsed


def check_out(parser: argparse.ArgumentParser, out: Path) -> Path:
    """--out as an absolute path (a relative one is relative to the current directory), or a
    parser error when it cannot be created because a file stands where a folder must be."""
    out = out.expanduser().resolve()
    for parent in out.parents:
        if parent.exists() and not parent.is_dir():
            parser.error(f"--out {out}: {parent} is a file, not a folder; choose another --out")
    return out
