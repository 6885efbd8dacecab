"""A study declared once: its name, its preset, its own arguments and the functions that load,
plan, train, collect and report it. linarena.studies.main (scripts/study.py) runs any
declaration the same way, so adding a study is one :class:`Study` at module level in a module of
linarena.studies (STUDIES, in main, collects them) plus its preset of conf/experiment/.

The generic command line gives every study --preset, --root, --jobs, --threads, --resume-from
and train.py overrides; --plan when it declares `plan`; --report-only, --out, --name and
--runs-command when it declares `report`. A study's special arguments come from its own
`add_arguments`, never from the generic command line.
"""

from __future__ import annotations

import argparse
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from linarena.studies.study import Output

# Whatever a study's `load` reads once (its grid, the runs archived by --resume-from, ...), handed
# to its other functions.
State = Any


@dataclass(frozen=True)
class Report:
    """What a study's report writes, and what it says after writing.

    Args:
        outputs: {suffix: table, text or figure}, written as <out>/<name><suffix>, each with its
            provenance record (study.write_report).
        message: the lines printed once written, given the paths written.
        folder: where the outputs go without --out (None: --root).
        trained_by: the commands that trained the runs, when the study knows them: recorded
            in the provenance after --runs-command's.
    """

    outputs: Mapping[str, Output]
    message: Callable[[list[Path]], str]
    folder: Path | None = None
    trained_by: str | None = None


def _no_arguments(parser: argparse.ArgumentParser) -> None:
    """A study without arguments of its own."""


@dataclass(frozen=True)
class Study:
    """One study, as scripts/study.py <name> runs it.

    Args:
        name: its subcommand of scripts/study.py.
        description: one line, shown by `scripts/study.py --help`.
        load: reads what the run needs from the parsed arguments (--root resolved): the grid,
            the runs archived by --resume-from; raises ValueError, FileNotFoundError or a
            LinarenaError on bad input (one-line error, exit 2), before anything trains.
        run: (args, state) -> trains what is left; the count of each run outcome.
        preset: the default --preset (None: the default config).
        root: the run folders' default, outputs/studies/<root> ("{preset}" is the preset's
            name); None: --root is required.
        output: the default --name, the file name stem of the report.
        plan: (args, state) -> prints what is left to train, training nothing (--plan).
        collect: (args, state) -> the runs the report reads (--report-only starts here).
        report: (args, state, runs) -> the Report; None: a study without report, whose exit
            status is 1 when a run failed.
        add_arguments: adds the study's own arguments to its parser.
        check_arguments: (args) -> why the arguments contradict each other, or None; refused
            as argparse refuses a bad value.
        help: the study's words for the generic arguments' help ("--root", "--resume-from",
            "--plan", "--preset", "--out", "overrides").
        overrides: takes train.py overrides after its options (study.* ones change the grid).
        script: its own entry point, kept because published provenance records name it.
    """

    name: str
    description: str
    load: Callable[[argparse.Namespace], State]
    run: Callable[[argparse.Namespace, State], dict[str, int]]
    preset: str | None = None
    root: str | None = "{preset}"
    output: str | None = None
    plan: Callable[[argparse.Namespace, State], None] | None = None
    collect: Callable[[argparse.Namespace, State], Any] | None = None
    report: Callable[[argparse.Namespace, State, Any], Report] | None = None
    add_arguments: Callable[[argparse.ArgumentParser], None] = _no_arguments
    check_arguments: Callable[[argparse.Namespace], str | None] | None = None
    help: Mapping[str, str] = field(default_factory=dict)
    overrides: bool = True
    script: str | None = None

    def __post_init__(self) -> None:
        if (self.collect is None) != (self.report is None) or \
                (self.report is None) != (self.output is None):
            raise TypeError(f"study {self.name!r}: declare collect, report and output together "
                            "(a report reads the collected runs and is written as <output>.*), "
                            "or none of them")
