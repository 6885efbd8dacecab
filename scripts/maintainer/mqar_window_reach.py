"""How much of MQAR can a sliding window answer? The share of queries whose value lies within
the window, per test setting of a mixture preset.

A causal window of w tokens (the token and the w - 1 before it) reads a query's answer only when
the value sits at most w - 1 tokens back. Per (length, pairs) test setting of the preset, this
generates `--examples` sequences with the preset's generator settings (vocabulary, power_a) and
writes <out>/<name>.csv: the share of queries within reach of each window, with its provenance
record. The mixture's sliding-window rows can be read against it: a model that recalls exactly
what its window reaches scores that share.

    python scripts/maintainer/mqar_window_reach.py --out docs/results
"""

from __future__ import annotations

import argparse
import sys

import numpy as np
import pandas as pd

from linarena.analysis.provenance import command_line
from linarena.data.mqar import generate_mqar, value_distances
from linarena.studies.cli import STUDY_ERRORS, add_output_arguments, fail
from linarena.studies.preset import compose_preset
from linarena.studies.study import write_report
from linarena.system import REPO_ROOT


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--preset", default="mqar_mixture_cpu", help="a mixture preset")
    parser.add_argument("--windows", type=int, nargs="+", default=[64],
                        help="window sizes (the Based layer's and attention=swa's: 64)")
    parser.add_argument("--examples", type=int, default=10_000, help="sequences per setting")
    parser.add_argument("--seed", type=int, default=0, help="the generator's seed")
    add_output_arguments(parser, "mqar_window_reach", REPO_ROOT / "outputs", "outputs/")
    return parser.parse_args(argv)


def reach_table(preset: str, windows: list[int], examples: int, seed: int) -> pd.DataFrame:
    """One row per (test setting, window): the share of queries within the window's reach."""
    data = compose_preset(preset).data
    if "test" not in data:
        raise ValueError(f"--preset {preset} has no data.test settings: use a mixture preset "
                         "such as mqar_mixture_cpu")
    rows = []
    for setting in data.test:
        length, pairs = int(setting.length), int(setting.pairs)
        tokens, labels = generate_mqar(examples, int(data.vocab_size), length, pairs,
                                       np.random.default_rng(seed), float(data.power_a))
        distances = value_distances(tokens, labels, pairs)
        rows += [{"length": length, "pairs": pairs, "window": window, "examples": examples,
                  "queries": distances.size, "within_window": float(np.mean(distances < window))}
                 for window in windows]
    return pd.DataFrame(rows)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    try:
        table = reach_table(args.preset, args.windows, args.examples, args.seed)
    except STUDY_ERRORS as error:
        return fail("mqar_window_reach.py", error)
    write_report(args.out, args.name, {".csv": table}, command_line(__file__, argv))
    for row in table.itertuples():
        print(f"L{row.length} P{row.pairs}, window {row.window}: {row.within_window:.1%} of "
              f"{row.queries:,} queries within reach")
    return 0


if __name__ == "__main__":
    sys.exit(main())
