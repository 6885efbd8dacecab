"""What every study script (scripts/study.py and the study scripts that call it, those of
scripts/maintainer/ too) shares on its command line: how it trains, where it writes and how it
fails. Bad values (--jobs 0, --preset nope, a negative seed) are refused by the parser, with
argparse's one `error:` line and exit code 2, before anything runs."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from linarena.analysis.bench_args import positive_int
from linarena.analysis.results_captions import THEN
from linarena.attention.variants import CONF_DIR
from linarena.errors import LinarenaError

# The errors a study script reports as a one-line message (exit 2) rather than a traceback: a
# bad preset or override, a malformed runs CSV, a missing run folder.
STUDY_ERRORS = (LinarenaError, ValueError, FileNotFoundError)


def attention_name(value: str) -> str:
    """An --attention value; an override (key=value) there was meant for train.py."""
    if "=" in value:
        raise argparse.ArgumentTypeError(
            f"{value!r} is a train.py override, not an attention: --attention takes every word "
            "after it, so put the overrides before --attention (or after --)")
    return value


def preset_name(value: str) -> str:
    """A --preset value: the name of a config of conf/experiment/ (e.g. mqar_study_cpu)."""
    folder = CONF_DIR / "experiment"
    if not (folder / f"{value}.yaml").is_file():
        known = sorted(path.relative_to(folder).with_suffix("").as_posix()
                       for path in folder.rglob("*.yaml"))
        raise argparse.ArgumentTypeError(
            f"no such preset {value!r} (no {folder}/{value}.yaml); the presets: "
            f"{', '.join(known)}")
    return value


def add_preset_argument(parser: argparse.ArgumentParser, default: str | None,
                        help_text: str) -> None:
    """--preset: a config of conf/experiment/, checked when the arguments are parsed."""
    parser.add_argument("--preset", default=default, type=preset_name, help=help_text)


def add_attention_argument(parser: argparse.ArgumentParser) -> None:
    """--attention: the variants a study trains (default None: all of them)."""
    parser.add_argument("--attention", nargs="+", default=None, type=attention_name,
                        help="only these variants (default: every file of conf/attention/)")


def add_training_arguments(parser: argparse.ArgumentParser, report_only: bool = True) -> None:
    """--jobs, --threads and --report-only (unless `report_only` is False)."""
    parser.add_argument("--jobs", type=positive_int, default=2, help="points trained at a time")
    parser.add_argument("--threads", type=positive_int, default=1, help="torch threads per run")
    if report_only:
        parser.add_argument("--report-only", action="store_true",
                            help="do not train; report only")


def add_output_arguments(parser: argparse.ArgumentParser, name: str, default: Path | None,
                         default_text: str) -> None:
    """--out (the folder the outputs go to; `default`, described as `default_text` in --help)
    and --name (their file name stem, `name` by default)."""
    parser.add_argument("--out", type=Path, default=default,
                        help=f"the folder the outputs go to (default {default_text})")
    parser.add_argument("--name", default=name, help="file name stem of the outputs")


def add_runs_command_argument(parser: argparse.ArgumentParser) -> None:
    """--runs-command: the command that trained the runs a --report-only rewrite reports, for
    the outputs' provenance records (analysis.provenance: a record names its training)."""
    parser.add_argument("--runs-command", default=None,
                        help="the command that trained the runs (with --report-only), for the "
                             "outputs' provenance records (<out>/provenance.json)")


def report_command(command: str, runs_command: str | None) -> str:
    """The command a report's provenance records: `command`, after `runs_command` (the
    training) when one was given."""
    return f"{runs_command}{THEN}{command}" if runs_command else command


def fail(script: str, error: BaseException) -> int:
    """Print `error` as the script's one-line message on stderr; the exit code (2)."""
    print(f"{script}: error: {error}", file=sys.stderr)
    return 2
