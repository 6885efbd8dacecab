"""The one command line of every study: STUDIES, the registry of the declarations
(declaration.Study), and the generic main of scripts/study.py <name> and of each study's own
script (scripts/mqar_study.py and the others call run_study_cli with their study's name).

Every study runs the same way: parse its arguments, load (grid, --resume-from archive), --plan
or train what is left (unless --report-only), collect the runs, then write the report with its
provenance record naming the command. Errors of input are one line and exit code 2.
"""

from __future__ import annotations

import argparse
import importlib
import pkgutil
from collections.abc import Mapping, Sequence
from pathlib import Path

from linarena.analysis.provenance import command_line
from linarena.studies.cli import (
    STUDY_ERRORS,
    add_output_arguments,
    add_preset_argument,
    add_runs_command_argument,
    add_training_arguments,
    fail,
    report_command,
)
from linarena.studies.declaration import Study
from linarena.studies.study import write_report
from linarena.system import REPO_ROOT

# The generic arguments' help, where a study's declaration does not word it (Study.help).
HELP = {
    "--preset": "a conf/experiment/ preset with a study: block",
    "--resume-from": "a runs CSV this study wrote (<name>_runs.csv): its runs count as "
                     "finished and go into the report",
    "--plan": "print the runs left to train; train nothing",
    "overrides": "train.py overrides for every run (study.* ones change the grid)",
}


def declared_studies(package: str = "linarena.studies") -> dict[str, Study]:
    """Every Study declared at module level in the modules of `package`, by name: importing
    them is registering them, so a new study needs no list edited."""
    found: dict[str, Study] = {}
    for module in pkgutil.iter_modules(importlib.import_module(package).__path__):
        for value in vars(importlib.import_module(f"{package}.{module.name}")).values():
            if isinstance(value, Study) and found.setdefault(value.name, value) is not value:
                raise TypeError(f"two studies are named {value.name!r}")
    return dict(sorted(found.items()))


STUDIES: dict[str, Study] = declared_studies()


def default_root(study: Study, preset: str | None) -> Path:
    """The run folders of `study` without --root: outputs/studies/<study.root>."""
    return REPO_ROOT / "outputs" / "studies" / str(study.root).format(preset=preset)


def add_study_arguments(study: Study, parser: argparse.ArgumentParser) -> None:
    """The generic arguments, as far as `study` declares what they act on, then its own."""
    words = {**HELP, **study.help}
    add_preset_argument(parser, study.preset, words["--preset"])
    root = "required" if study.root is None else \
        f"default outputs/studies/{study.root.replace('{preset}', '<preset>')}"
    parser.add_argument("--root", type=Path, default=None, required=study.root is None,
                        help=words.get("--root", f"folder of the run folders ({root})"))
    add_training_arguments(parser, report_only=study.report is not None)
    parser.add_argument("--resume-from", type=Path, default=None, metavar="CSV",
                        help=words["--resume-from"])
    parser.set_defaults(plan=False, report_only=False)  # for a study without them
    if study.plan is not None:
        parser.add_argument("--plan", action="store_true", help=words["--plan"])
    if study.report is not None:
        add_output_arguments(parser, str(study.output), None, words.get("--out", "--root"))
        add_runs_command_argument(parser)
    study.add_arguments(parser)
    if study.overrides:
        parser.add_argument("overrides", nargs="*", help=words["overrides"])


def run_study(study: Study, args: argparse.Namespace, parser: argparse.ArgumentParser,
              command: str) -> int:
    """Run `study` as its parsed `args` say; `command` (the command line) goes into the
    report's provenance. The exit status."""
    problem = study.check_arguments(args) if study.check_arguments else None
    if problem:
        parser.error(problem)
    args.root = args.root or default_root(study, args.preset)
    try:
        state = study.load(args)
        if args.plan:
            study.plan(args, state)
            return 0
        if not args.report_only:
            counts = study.run(args, state)
            print(f"outcomes: {counts}", flush=True)
            if study.report is None:  # the runs are its result: say whether they all trained
                return 0 if all(outcome.startswith(("ok", "done")) for outcome in counts) else 1
        runs = study.collect(args, state)
        report = study.report(args, state, runs)
    except STUDY_ERRORS as error:
        return fail(parser.prog, error)
    trained_by = " ; ".join(c for c in (args.runs_command, report.trained_by) if c) or None
    paths = write_report(args.out or report.folder or args.root, args.name, report.outputs,
                         report_command(command, trained_by))
    print(report.message(paths))
    return 0


def study_parser(name: str, script: str | Path) -> argparse.ArgumentParser:
    """The parser of study `name`'s own script (`script`): its arguments, no subcommand."""
    study = STUDIES[name]
    parser = argparse.ArgumentParser(prog=Path(script).name, description=study.description)
    add_study_arguments(study, parser)
    return parser


def run_study_cli(name: str, argv: Sequence[str] | None, script: str | Path) -> int:
    """The main of a study's own script (`script`, which provenance records name)."""
    parser = study_parser(name, script)
    return run_study(STUDIES[name], parser.parse_args(argv), parser, command_line(script, argv))


def studies_cli(argv: Sequence[str] | None, script: str | Path,
                studies: Mapping[str, Study] | None = None) -> int:
    """The main of scripts/study.py: `<study name> [its arguments]`, for any of `studies`
    (default STUDIES)."""
    studies = STUDIES if studies is None else studies
    parser = argparse.ArgumentParser(
        prog=Path(script).name, description="Run a declared study (linarena.studies.main): "
        "train what is left of its grid, then write its report with provenance.")
    commands = parser.add_subparsers(dest="study", required=True, metavar="STUDY",
                                     title="studies")
    for study in studies.values():
        also = f" (also: python {study.script})" if study.script else ""
        add_study_arguments(study, commands.add_parser(
            study.name, help=study.description + also, description=study.description))
    args = parser.parse_args(argv)
    return run_study(studies[args.study], args, commands.choices[args.study],
                     command_line(script, argv))
