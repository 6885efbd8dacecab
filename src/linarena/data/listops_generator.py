"""ListOps expressions, generated as in the LRA release (Tay et al. 2021; Nangia & Bowman 2018).

A node is an operator with probability 0.25 while its depth is below `max_depth` (the root has depth
1), else a leaf digit 0-9. An operator takes 2..`max_args` arguments and is one of MIN, MAX, MED
(median, floored) and SM (sum mod 10). Length counts operators, digits and closing brackets; trees
with `min_length < length < max_length` are kept, duplicates dropped, and the unique expressions
are split in order into train, val and test. Written as in the release, e.g.
`( ( ( [MAX 2 ) 9 ) ] )` for MAX(2, 9).

Generation is deterministic from the seed and independent of the worker count: attempts are drawn
in chunks, chunk k from its own random stream (seed, k), and chunks are merged in order.
"""

from __future__ import annotations

import csv
import hashlib
import itertools
import multiprocessing
import random
from collections.abc import Iterator
from contextlib import closing
from pathlib import Path

from linarena.data.errors import DataConfigError
from linarena.data.progress import progress as progress_bar
from linarena.files import write_atomic
from linarena.system import available_cpus

OPERATORS = ("[MIN", "[MAX", "[MED", "[SM")
CLOSE = "]"
OPERATOR_PROBABILITY = 0.25
# Expressions accepted per chunk; fixed so that the output does not depend on the worker count.
CHUNK_SIZE = 256
# Preorder encoding of a tree: a digit leaf is 0-9; an operator is 10 + 4 * num_args + op index.
_OPERATOR_BASE = 10


def max_tree_length(max_depth: int, max_args: int) -> int:
    """Largest length a tree can have: every node above max_depth an operator with max_args."""
    length = 1
    for _ in range(max_depth - 1):
        length = 2 + max_args * length
    return length


def _sample_tree(rng: random.Random, max_depth: int, max_args: int, limit: int) -> list[int] | None:
    """Draw one tree in preorder encoding; None as soon as its length reaches `limit`."""
    random_unit, randrange = rng.random, rng.randrange
    nodes: list[int] = []
    pending = [1]  # depths of nodes still to draw
    length = 0
    while pending:
        depth = pending.pop()
        if depth < max_depth and random_unit() <= OPERATOR_PROBABILITY:
            num_args = randrange(2, max_args + 1)
            nodes.append(_OPERATOR_BASE + 4 * num_args + randrange(4))
            pending.extend([depth + 1] * num_args)
            length += 2
        else:
            nodes.append(randrange(10))
            length += 1
        if length >= limit:
            return None
    return nodes


def apply_operator(operator: str, args: list[int]) -> int:
    """Value of a ListOps operator: MIN, MAX, MED (floored median) or SM (sum mod 10)."""
    if operator == "[MIN":
        return min(args)
    if operator == "[MAX":
        return max(args)
    if operator == "[MED":
        ordered = sorted(args)
        middle = len(ordered) // 2
        if len(ordered) % 2:
            return ordered[middle]
        return (ordered[middle - 1] + ordered[middle]) // 2
    if operator == "[SM":
        return sum(args) % 10
    raise ValueError(f"unknown ListOps operator {operator!r}")


def _render(nodes: list[int]) -> tuple[str, int]:
    """Expression text (with the release's brackets) and value of a preorder-encoded tree."""
    position = 0

    def visit() -> tuple[list[str], int]:
        nonlocal position
        code = nodes[position]
        position += 1
        if code < _OPERATOR_BASE:
            return [str(code)], code
        num_args, op_index = divmod(code - _OPERATOR_BASE, 4)
        operator = OPERATORS[op_index]
        parts = ["("] * (num_args + 1) + [operator]
        values = []
        for _ in range(num_args):
            child_parts, child_value = visit()
            parts += child_parts
            parts.append(")")
            values.append(child_value)
        parts += [CLOSE, ")"]
        return parts, apply_operator(operator, values)

    parts, value = visit()
    return " ".join(parts), value


def _generate_chunk(args: tuple[int, int, int, int, int, int]) -> list[tuple[str, int]]:
    """CHUNK_SIZE accepted (expression, value) pairs from the random stream of (seed, chunk)."""
    seed, chunk, max_depth, max_args, min_length, max_length = args
    rng = random.Random(f"linarena-listops-{seed}-{chunk}")
    accepted = []
    while len(accepted) < CHUNK_SIZE:
        nodes = _sample_tree(rng, max_depth, max_args, max_length)
        # Length = operators and digits (one node each) + one close bracket per operator.
        if nodes is not None and len(nodes) + sum(c >= _OPERATOR_BASE for c in nodes) > min_length:
            accepted.append(_render(nodes))
    return accepted


def iter_unique_listops(
    seed: int = 0,
    max_depth: int = 10,
    max_args: int = 10,
    min_length: int = 500,
    max_length: int = 2000,
    workers: int | None = None,
) -> Iterator[tuple[str, int]]:
    """Endless stream of unique (expression, value) pairs with min_length < length < max_length.

    The order depends only on the seed and settings. Raises DataConfigError when the settings
    cannot give a tree in range, or stop giving new expressions (too few distinct trees exist).
    """
    if max_depth < 1 or max_args < 2:
        raise DataConfigError(
            f"data.max_depth must be >= 1 and data.max_args >= 2, got {max_depth}, {max_args}"
        )
    if min(max_length - 1, max_tree_length(max_depth, max_args)) <= min_length:
        raise DataConfigError(
            f"no ListOps tree has {min_length} < length < {max_length} with max_depth={max_depth} "
            f"and max_args={max_args} (longest possible: {max_tree_length(max_depth, max_args)}); "
            "lower data.min_length or raise data.max_depth / data.max_args / data.max_length"
        )
    workers = workers or min(available_cpus(), 8)
    round_size = 4 * workers
    seen: set[bytes] = set()  # 16-byte digests, not the (long) expressions
    context = multiprocessing.get_context(
        "fork" if "fork" in multiprocessing.get_all_start_methods() else "spawn"
    )
    pool = context.Pool(workers) if workers > 1 else None
    try:
        for start in itertools.count(0, round_size):
            jobs = [
                (seed, chunk, max_depth, max_args, min_length, max_length)
                for chunk in range(start, start + round_size)
            ]
            results = pool.map(_generate_chunk, jobs) if pool else map(_generate_chunk, jobs)
            new = 0
            for expression, value in itertools.chain.from_iterable(results):
                digest = hashlib.blake2b(expression.encode(), digest_size=16).digest()
                if digest not in seen:
                    seen.add(digest)
                    new += 1
                    yield expression, value
            if new == 0:
                raise DataConfigError(
                    f"ListOps settings max_depth={max_depth}, max_args={max_args}, "
                    f"{min_length} < length < {max_length} allow only about {len(seen)} unique "
                    "expressions; ask for fewer examples or widen the length range"
                )
    finally:
        if pool is not None:
            pool.terminate()


def write_listops_files(
    folder: Path,
    sizes: dict[str, int],
    progress: bool = True,
    **settings: int,
) -> None:
    """Write `basic_{split}.tsv` files (header `Source\\tTarget`) with `sizes[split]` examples.

    Splits take consecutive unique expressions in the order of `sizes`. Each file is written to
    a temporary name and renamed, so a file that exists is complete.
    """
    folder.mkdir(parents=True, exist_ok=True)
    total = sum(sizes.values())
    with (
        closing(iter_unique_listops(**settings)) as stream,
        progress_bar(total=total, desc="ListOps", unit="expr", disable=not progress) as bar,
    ):
        for split, size in sizes.items():
            path = folder / f"basic_{split}.tsv"

            def write(handle, size=size):
                writer = csv.writer(handle, delimiter="\t", lineterminator="\n")
                writer.writerow(["Source", "Target"])
                for example in itertools.islice(stream, size):
                    writer.writerow(example)
                    bar.update()

            write_atomic(path, write)
