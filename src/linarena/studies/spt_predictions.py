"""The self-pretraining studies' predictions, stated before any run so that a reading cannot be
fitted to the result, and their checks against the report's own tables (spt_statistics): one
row per clause, with what the tables show and a verdict.

Verdicts: "held", "contradicted", "not separated" (the tests cannot tell), and "not read" while
the study is partial: a clause is read once every arm has its seeds, never before. How each
clause is read was fixed on 2026-12-06, with 3-4 of ListOps' 10 seeds per arm in (then: SPT's
spread above scratch's, its interval above 0; no attention separated between SPT and either
scratch arm; Pathfinder at chance in every run). "Most" is more than half of the attentions,
"few" at most a quarter.

ListOps (the permutation test of the mean, Holm across attentions, as the report's pairs):
- spread: SPT's standard deviation of the attentions' means minus scratch's at equal
  fine-tuning steps: held when its 95% bootstrap interval lies below 0, contradicted when it
  lies above, else not separated;
- pairs: the pairs of attentions separated within SPT against within scratch: held when fewer,
  contradicted otherwise (a count, both arms at the same seeds);
- raises: SPT against scratch at equal fine-tuning steps: held when most attentions are
  separated above, contradicted when most are separated below, else not separated;
- matched: SPT against scratch at equal total steps: held when few attentions are separated
  (either way), contradicted otherwise.
Pathfinder (rates at the threshold, Fisher's exact test, Holm):
- chance from scratch: held when no seed of any attention reaches the threshold from scratch
  (at either step count), contradicted otherwise (those that did, named);
- SPT lifts few: held when no attention's rate is separated between SPT and scratch at equal
  fine-tuning steps, contradicted otherwise (those that are, named: the finding).
"""

from __future__ import annotations

from collections.abc import Callable

import pandas as pd

from linarena.attention.patterns import pattern_label
from linarena.studies.spt import SCRATCH, SCRATCH_TOTAL, SPT, Protocol
from linarena.studies.spt_statistics import COMPARISONS

STATED = "2026-12-06, before any run of this study"
PREDICTIONS = {
    "spt/listops_small": (
        "SPT narrows the spread between attentions on ListOps: with SPT the standard deviation "
        "of the attentions' mean accuracies is smaller than from scratch at equal fine-tuning "
        "steps (its bootstrap interval of the difference below 0), and fewer pairs of "
        "attentions are separated (Holm) than from scratch. At equal fine-tuning steps SPT "
        "raises the mean accuracy of most attentions; at equal total steps (from scratch, "
        "P + F steps) most of that gain is matched, so few attentions are separated there."),
    "spt/pathfinder_small": (
        "At this budget (200 fine-tuning steps of 16 images) every attention stays at chance "
        "from scratch: no seed reaches 60% test accuracy, at 200 or at 400 steps. SPT lifts "
        "at most a few seeds above it, so no attention's rate at 60% is separated between SPT "
        "and scratch (Fisher, Holm); if some are, the finding is that SPT lifts those."),
}
VERDICT_COLUMNS = ("preset", "clause", "rule", "found", "verdict")
NOT_READ = "not read"


def _separated(pairs: pd.DataFrame, comparison: tuple[str, str, str], test: str
               ) -> tuple[list[str], list[str], int]:
    """The attentions a comparison separates above and below (a's arm minus b's), and how many
    it tested."""
    a, b, equal = comparison
    family = pairs[(pairs["comparison"] == f"{a} vs {b}: {equal}") & (pairs["test"] == test)]
    split = family[family["separated"].astype(bool)]
    return (list(split[split["difference"] > 0]["attention_a"]),
            list(split[split["difference"] < 0]["attention_a"]), len(family))


def _names(attentions: list[str]) -> str:
    return ", ".join(pattern_label(name) for name in attentions) or "none"


def _row(clause: str, rule: str, found: str, verdict: str) -> dict:
    return {"clause": clause, "rule": rule, "found": found, "verdict": verdict}


def listops_checks(summary: pd.DataFrame, pairs: pd.DataFrame, spread: pd.DataFrame,
                   protocol: Protocol) -> list[dict]:
    """The ListOps prediction's four clauses (see the module docstring)."""
    rows = []
    by_arm = spread.set_index("arm") if len(spread) else None
    key = f"{SPT} - {SCRATCH}"
    if by_arm is None or key not in by_arm.index:
        rows.append(_row("spread", "SPT's std of the means minus scratch's, 95% interval < 0",
                         "no spread yet", "not separated"))
    else:
        diff = by_arm.loc[key]
        low, high = float(diff["std_ci_low"]), float(diff["std_ci_high"])
        verdict = "held" if high < 0 else "contradicted" if low > 0 else "not separated"
        rows.append(_row("spread", "SPT's std of the means minus scratch's, 95% interval < 0",
                         f"{100 * diff['std']:+.2f} points [{100 * low:+.2f}, {100 * high:+.2f}]",
                         verdict))
        spt, scratch = (int(by_arm.loc[arm, "pairs_separated"]) for arm in (SPT, SCRATCH))
        pairs_total = int(by_arm.loc[SPT, "pairs"])
        rows.append(_row("pairs", "fewer pairs of attentions separated within SPT than within "
                         "scratch", f"{spt} of {pairs_total} within SPT, {scratch} within "
                         "scratch", "held" if spt < scratch else "contradicted"))
    up, down, tested = _separated(pairs, COMPARISONS[0], "permutation")
    most = tested / 2
    rows.append(_row("raises", "SPT above scratch at equal fine-tuning steps for most "
                     "attentions", f"above for {len(up)} of {tested} ({_names(up)}), below for "
                     f"{len(down)} ({_names(down)})",
                     "held" if len(up) > most else "contradicted" if len(down) > most
                     else "not separated"))
    up, down, tested = _separated(pairs, COMPARISONS[1], "permutation")
    rows.append(_row("matched", "at most a quarter of the attentions separated at equal total "
                     "steps", f"{len(up) + len(down)} of {tested} separated: SPT above for "
                     f"{_names(up)}, below for {_names(down)}",
                     "held" if len(up) + len(down) <= tested / 4 else "contradicted"))
    return rows


def pathfinder_checks(summary: pd.DataFrame, pairs: pd.DataFrame, spread: pd.DataFrame,
                      protocol: Protocol) -> list[dict]:
    """The Pathfinder prediction's two clauses (see the module docstring)."""
    scratch = summary[summary["arm"].isin([SCRATCH, SCRATCH_TOTAL]) & (summary["n"] > 0)]
    learned = sorted(set(scratch[scratch["successes"] > 0]["attention"]))
    seeds = int(scratch["n"].sum())
    threshold = f"{100 * protocol.threshold:g}%"
    rows = [_row("chance from scratch", f"no seed at {threshold} from scratch",
                 f"{int(scratch['successes'].sum())} of {seeds} seeds at {threshold} "
                 f"(attentions: {_names(learned)})", "contradicted" if learned else "held")]
    up, down, tested = _separated(pairs, COMPARISONS[0], "fisher")
    rows.append(_row("SPT lifts few", f"no attention's rate at {threshold} separated between "
                     "SPT and scratch", f"{len(up) + len(down)} of {tested} separated: SPT "
                     f"above for {_names(up)}, below for {_names(down)}",
                     "contradicted" if up or down else "held"))
    return rows


CHECKS: dict[str, Callable[..., list[dict]]] = {"spt/listops_small": listops_checks,
                                                "spt/pathfinder_small": pathfinder_checks}


def verdicts(summary: pd.DataFrame, pairs: pd.DataFrame, spread: pd.DataFrame,
             protocol: Protocol, partial: bool) -> pd.DataFrame:
    """One row per clause of the preset's prediction (VERDICT_COLUMNS; none for a preset
    without one); every verdict "not read" while the study is partial."""
    check = CHECKS.get(protocol.preset)
    rows = [] if check is None else check(summary, pairs, spread, protocol)
    rows = [{"preset": protocol.preset, **row, **({"verdict": NOT_READ} if partial else {})}
            for row in rows]
    return pd.DataFrame(rows, columns=list(VERDICT_COLUMNS))


def verdict_lines(table: pd.DataFrame, name: str) -> str:
    """The Markdown list of the clauses and their verdicts (empty without a prediction)."""
    if not len(table):
        return ""
    partial = (table["verdict"] == NOT_READ).all()
    head = ("**The prediction, clause by clause: not read yet** (the study is partial; what "
            f"the tables show now, {name}_verdicts.csv):" if partial else
            f"**The prediction, clause by clause** ({name}_verdicts.csv):")
    lines = [f"- *{row.clause}* ({row.rule}): {row.found}. **{row.verdict}**"
             for row in table.itertuples()]
    return head + "\n\n" + "\n".join(lines) + "\n\n"
