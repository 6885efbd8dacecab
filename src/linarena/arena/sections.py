"""The card's sections as Markdown, each with the line it adds to the card's opening (how sure
its reading is): cost, MQAR state size, ListOps and the MQAR mixture. (The certificate's:
card.py.)"""

from __future__ import annotations

import pandas as pd

from linarena.analysis.statistics import ALPHA, SUCCESS_THRESHOLD
from linarena.arena.card import number, table
from linarena.arena.comparisons import machines
from linarena.arena.cost import crossover, ratios
from linarena.studies.mixture import summarize
from linarena.studies.mixture_report import accuracy_table, setting_header


def _names(frame: pd.DataFrame) -> str:
    return ", ".join(frame["label"]) or "none"


def cost_section(times: pd.DataFrame, name: str, states: list[tuple[str, int, str]],
                 causal: bool) -> tuple[str, str]:
    """(body, opening line): fwd+bwd ms and peak MB per length beside softmax and elu+1 from
    this one run, the ratios, the crossover against softmax and the state per layer."""
    ratio = ratios(times, name)
    rows = [[int(r.length), number(r.ms), number(r.softmax_ms), number(r.elu_ms),
             number(r.softmax_over_variant), number(r.variant_over_elu), number(r.peak_mb),
             number(r.memory_over_elu)] for r in ratio.itertuples()]
    cross = crossover(times, name)
    first = times.iloc[0]
    cross_text = (f"faster than softmax (fwd+bwd) from N={cross} on, at every longer length "
                  "measured" if cross else "not faster than softmax at the longest length "
                  "measured")
    if name == "softmax":
        cross_text = "softmax is the baseline itself"
    skipped = times[(times["variant"] == name) & (times["status"] != "ok")]
    as_layer = first.get("timed_as") == "layer"
    how = ("each on x (batch, N, d_model): the whole layer with its own projections, softmax "
           "and elu+1 inside the block's q, k, v and output projections" if as_layer else
           "each core on q, k, v (the block's projections left out)")
    body = [f"{'Causal' if causal else 'Bidirectional'}, batch 1, {first['heads']} heads of "
            f"{first['head_dim']}, fp32, CPU, {first['threads']} threads, {how}; softmax and "
            "elu+1 timed in the same process, round-robin, so read the ratios, not the "
            "absolute times (a shared machine's speed drifts).", "",
            table(["N", "fwd+bwd ms", "softmax ms", "elu+1 ms", "softmax / it", "it / elu+1",
                   "peak MB", "MB / elu+1"], rows), "",
            f"Crossover: {cross_text}."]
    if len(skipped):
        missing = ", ".join(f"N={r.length} ({r.status})" for r in skipped.itertuples())
        body.append(f"Not measured: {missing}.")
    body += ["", "State it keeps to decode, per layer and sequence:", "",
             table(["shape", "numbers", "kind"], [[s, f"{n:,}", k] for s, n, k in states])]
    top = ratio.dropna(subset=["ms", "softmax_ms", "elu_ms"]).tail(1)  # all three measured
    line = (f"Cost: {cross_text}; at N={int(top['length'].iloc[0])} "
            f"softmax takes {number(top['softmax_over_variant'].iloc[0])}x its time and it "
            f"takes {number(top['variant_over_elu'].iloc[0])}x elu+1's (one run on this "
            "machine)." if len(top) else "Cost: no length measured.")
    return "\n".join(body), line


def state_size_section(points: pd.DataFrame, comparisons: dict[tuple[int, int], pd.DataFrame],
                       figure: str, trained_on: str) -> tuple[str, str]:
    """(body, opening line): the subject's points (its lr chosen as the study chooses), each
    against the published points of its column (Fisher, Holm), and the figure; `trained_on`:
    the machines and commits of the subject's runs."""
    body = [f"MQAR under the state-size study's protocol (`experiment=mqar_study_cpu`: vocab 64, "
            "64 tokens, 8 pairs, 2 layers, one head, at most 2,000 steps; every lr at seeds 1-2, "
            "the lr chosen on their median validation accuracy, seeds 3-5 at it, 6-10 where "
            f"they split). A seed recalls at {SUCCESS_THRESHOLD:.0%} test accuracy. Compared "
            "as rates (Fisher's exact test), never seed by seed: a seed's outcome can move "
            "with the CPU; each published row names its machines and commit. This variant's "
            f"runs: {trained_on}.", "",
            f"![state size]({figure})", ""]
    lines = []
    for point in points.itertuples():
        key = (int(point.d_model), int(point.short_conv))
        found = comparisons[key]
        above = found[found["separated"] & (found["successes"] / found["n_seeds"]
                                            < point.successes / point.n_seeds)]
        below = found[found["separated"] & (found["successes"] / found["n_seeds"]
                                            > point.successes / point.n_seeds)]
        body += [f"### d_model {key[0]}, short conv {key[1] or 'off'}: "
                 f"{point.successes}/{point.n_seeds} seeds recall, median "
                 f"{100 * point.median_acc:.1f}%, lr {point.chosen_lr:g}, state "
                 f"{int(point.state_size):,}", "",
                 table(["published point", "state", "recall", "median %", "Fisher p",
                        "p floor", "Holm p", "separated", "trained on"],
                       [[r.label, f"{int(r.state_size):,}", f"{r.successes}/{r.n_seeds}",
                         f"{100 * r.median_acc:.1f}", number(r.p), number(r.p_floor),
                         number(r.p_holm), "yes" if r.separated else "no", r.machines]
                        for r in found.itertuples()]), ""]
        lines.append(f"MQAR d_model {key[0]}, short conv {key[1] or 'off'}: "
                     f"{point.successes}/{point.n_seeds} seeds recall; at n = {point.n_seeds} "
                     f"against the published points' 5-10, Fisher p < {ALPHA} separates it "
                     f"above {_names(above)} and below {_names(below)}; the other "
                     f"{len(found) - len(above) - len(below)} are not separated; after Holm "
                     f"over the column's {len(found)}, "
                     f"{int(found['separated_after_holm'].sum())} are.")
    return "\n".join(body), " ".join(lines)


def listops_section(runs: pd.DataFrame, comparison: pd.DataFrame, figure: str | None,
                    threads: int) -> tuple[str, str]:
    """(body, opening line): the subject's seeds (trained on `threads` threads each) and the
    permutation test against every published attention's (Holm over them), and accuracy against
    throughput."""
    acc = runs["test_acc"].dropna()
    mean, std = acc.mean(), acc.std()
    above = comparison[comparison["separated"] & (comparison["mean_acc"] < mean)]
    below = comparison[comparison["separated"] & (comparison["mean_acc"] > mean)]
    floor = comparison["p_floor"].min() * len(comparison) if len(comparison) else float("nan")
    # The share of its threads' time a run got: below 1 the machine was shared, and its
    # tokens/s understate an idle machine's.
    share = (runs["cpu_s"] / runs["duration_s"] / threads).median()
    shared = (f"; its runs had a median {share:.0%} of their {threads} threads' time (cpu_s / "
              "duration_s / threads: below 100% the machine was shared, and their tokens/s "
              "understate an idle machine's)" if share == share else "")
    body = ["The small-budget ListOps sweep (`python train.py trainer.max_steps=300`, generated "
            "listops_small, 2 layers, d_model 128, each seed its own process on 2 threads). "
            f"This variant: {len(acc)} seeds, mean {100 * mean:.2f}% ± {100 * std:.2f} (sample "
            f"std), range {100 * acc.min():.2f}-{100 * acc.max():.2f}%, median "
            f"{number(runs['tokens_per_sec'].median())} tokens/s on this machine "
            f"({machines(runs)}){shared}. The exact "
            "permutation test of the mean against each published attention's seeds, Holm over "
            f"the {len(comparison)} comparisons (the smallest Holm p these seed counts allow: "
            f"{number(min(floor, 1.0))}). Published tokens/s are their machine's.", ""]
    if figure:
        body += [f"![accuracy against throughput]({figure})", ""]
    body.append(table(
        ["published attention", "seeds", "mean %", "std", "tokens/s", "p", "Holm p",
         "separated", "trained on"],
        [[r.label, r.n, f"{100 * r.mean_acc:.2f}", f"{100 * r.std_acc:.2f}",
          number(r.tokens_per_sec), number(r.p), number(r.p_holm),
          "yes" if r.separated else "no", r.machines] for r in comparison.itertuples()]))
    line = (f"ListOps: mean {100 * mean:.2f}% over {len(acc)} seeds; after Holm over "
            f"{len(comparison)} published attentions it is above {_names(above)} and below "
            f"{_names(below)}; the rest are not separated at n = {len(acc)}.")
    return "\n".join(body), line


def mixture_section(runs: pd.DataFrame, comparison: pd.DataFrame) -> tuple[str, str]:
    """(body, opening line): the subject's recall per kind of positions and test setting, and
    at each setting beyond the training lengths its rate against every published attention's
    there (Fisher, Holm within the positions and setting)."""
    ours = summarize(runs)
    body = ["MQAR trained on a mixture of lengths 32-64 and tested to 256 under the mixture "
            "study's protocol (`experiment=mqar_mixture_cpu`: vocab 256, d_model 64, 2 layers, "
            "1,500 steps, lr 3.16e-3; each kind of positions at seeds 1-5, 6-10 where they "
            f"split). Each cell: median test accuracy % ({SUCCESS_THRESHOLD:.0%} reached / "
            f"seeds); † a length longer than any trained on. This variant's runs: "
            f"{machines(runs.drop_duplicates('run'))}.", "", accuracy_table(ours), ""]
    beyond = comparison[comparison["beyond_train"]]
    lines = []
    for positions, rows in beyond.groupby("positions", sort=False):
        settings = list(dict.fromkeys(zip(rows["length"], rows["pairs"], strict=True)))
        heads = [setting_header(length, pairs, True) for length, pairs in settings]
        mine = [f"{r.successes}/{r.n_seeds}" for r in
                rows.drop_duplicates(["length", "pairs"]).itertuples()]
        cells = {}
        for r in rows.itertuples():
            mark = " (separated)" if r.separated else ""
            cells.setdefault(r.label, {})[(r.length, r.pairs)] = \
                f"{r.other_successes}/{r.other_n}, Holm p {number(r.p_holm)}{mark}"
        machine = dict(zip(rows["label"], rows["machines"], strict=False))
        body += [f"### Beyond the training lengths, positions {positions}: this variant "
                 + ", ".join(f"{h} {m}" for h, m in zip(heads, mine, strict=True)), "",
                 table(["published attention", *heads, "trained on"],
                       [[label, *(found.get(s, "") for s in settings), machine[label]]
                        for label, found in cells.items()]), ""]
        above = sorted({r.label for r in rows.itertuples() if r.separated
                        and r.other_successes / r.other_n < r.successes / r.n_seeds})
        below = sorted({r.label for r in rows.itertuples() if r.separated
                        and r.other_successes / r.other_n > r.successes / r.n_seeds})
        n = int(rows["n_seeds"].iloc[0])
        lines.append(f"positions {positions} (n = {n}): {', '.join(mine)} seeds recall at "
                     f"{', '.join(heads)}; after Holm within each setting it is above "
                     f"{', '.join(above) or 'none'} and below {', '.join(below) or 'none'}")
    line = ("Mixture beyond the training lengths: " + "; ".join(lines)
            + " (against the published attentions' 5-10 seeds)." if lines else
            "Mixture: no test setting beyond the training lengths.")
    return "\n".join(body), line
