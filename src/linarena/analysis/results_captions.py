"""The short caption above each README result table: the command that wrote the table's files,
the commit, the machine and the date, one line per distinct record (a CSV and the table made
with it share one), and a stale mark per reason. The full records (every training command of a
sweep, the whole environment) stay in docs/results/provenance.json."""

from __future__ import annotations

import shlex
from collections.abc import Sequence
from typing import Any

RECORDS = "docs/results/provenance.json"
# A record's command is "<the commands that made the runs>; then <the report command>" when the
# report script was given --runs-command (compare.py, mqar_mixture.py).
THEN = "; then "
# Other names of an option a benchmark command may give instead (benchmark_attention.py).
ALIASES = {"--attentions": ("--variants",)}


def shown_command(command: str, flags: Sequence[str] = ()) -> tuple[str, bool]:
    """(The command a caption shows, whether training runs came before it): the report step of
    a "<runs>; then <report>" record without its --runs-command (both stay in provenance.json),
    and `flags` (e.g. ["--lengths", "256,512"]) inserted after the script where the command
    does not give that option already."""
    _, then, report = command.rpartition(THEN)
    try:
        words = shlex.split(report)
    except ValueError:  # not shell syntax: shown as recorded
        return report, bool(then)
    if "--runs-command" in words:
        at = words.index("--runs-command")
        del words[at:at + 2]
    given = {word.split("=")[0] for word in words}
    added = [word for option, value in zip(flags[::2], flags[1::2], strict=True)
             if not given & {option, *ALIASES.get(option, ())} for word in (option, value)]
    script = next((at + 1 for at, word in enumerate(words) if word.endswith(".py")), len(words))
    words[script:script] = added
    return shlex.join(words), bool(then)


def machine(environment: dict[str, Any]) -> str:
    """The hardware a record's numbers were measured on: the GPU, or the CPU and its threads."""
    if environment.get("device") == "cuda":
        return f"{environment.get('gpu') or 'a GPU'} (cuda)"
    threads = environment.get("threads")
    return f"{environment.get('cpu') or 'CPU'} (cpu, {threads} thread{'s' * (threads != 1)})"


def caption_lines(sources: Sequence[str], records: dict[str, dict[str, Any]], stage: str,
                  flags: Sequence[str] = ()) -> list[str]:
    """The caption of a table made from `sources` (file names in docs/results/): a line per
    distinct (command, commit, machine, date), then a stale mark per reason; `stage` is the
    scripts/maintainer/reproduce_results.sh stage that remakes the files, `flags` those the
    command shows (shown_command)."""
    lines, stale_marks = [], []
    groups: dict[tuple[str, str, str, str], list[str]] = {}
    for source in sources:
        entry = records.get(source)
        if entry is None:
            lines.append(f"> **No provenance record** for docs/results/{source}.")
            continue
        key = (entry["command"], (entry.get("commit") or "unknown")[:10],
               machine(entry.get("environment") or {}), (entry.get("recorded") or "?")[:10])
        groups.setdefault(key, []).append(source)
        stale = entry.get("stale")
        if stale:
            stale_marks.append(f"> **Stale** (marked at {(stale.get('commit') or '?')[:10]}): "
                               f"{stale['reason']}. Rerun it (`bash "
                               f"scripts/maintainer/reproduce_results.sh {stage}`), then "
                               "`python scripts/maintainer/results_tables.py`.")
    for (command, commit, where, date), names in groups.items():
        shown, after_runs = shown_command(command, flags)
        runs = f" after training (commands: {RECORDS})" if after_runs else ""
        files = ", ".join(f"docs/results/{name}" for name in names)
        lines.append(f"<sub>{files}: `{shown}`{runs}; commit {commit}, {where}, {date}.</sub>")
    return lines + list(dict.fromkeys(stale_marks))
