"""Command-line argument types both benchmarks share, so they take --lengths, counts, --device
and --out the same way and refuse bad values with one line (argparse's `error:` line)."""

from __future__ import annotations

import argparse
from pathlib import Path

import torch

REPO_ROOT = Path(__file__).resolve().parents[3]
OUTPUT_DIR = REPO_ROOT / "outputs" / "benchmarks"  # where --out defaults to, for every benchmark


def positive_int(text: str) -> int:
    """An integer >= 1."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be a positive integer, got {value}")
    return value


def non_negative_int(text: str) -> int:
    """An integer >= 0."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected an integer >= 0, got {text!r}") from None
    if value < 0:
        raise argparse.ArgumentTypeError(f"must be >= 0, got {value}")
    return value


def positive_float(text: str) -> float:
    """A finite number > 0."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a positive number, got {text!r}") from None
    if not 0 < value < float("inf"):
        raise argparse.ArgumentTypeError(f"must be a positive number, got {text}")
    return value


def lengths_arg(text: str) -> list[int]:
    """One --lengths word: `512` or `256,512` (use with nargs="+" and `flat_lengths`)."""
    items = [item.strip() for item in text.split(",") if item.strip()]
    if not items:
        raise argparse.ArgumentTypeError(f"expected sequence lengths, got {text!r}")
    return [positive_int(item) for item in items]


def flat_lengths(words: list[list[int]]) -> list[int]:
    """The sorted distinct lengths of --lengths words: `256 512`, `256,512` and `256, 512`."""
    return sorted({length for word in words for length in word})


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
