"""Create or update the saved W&B views that compare the runs of a project.

    pip install -e ".[dashboard]"
    python scripts/wandb_dashboard.py --entity my-team --project linarena
    python scripts/wandb_dashboard.py --entity my-team --project linarena \\
        --benchmarks docs/results/benchmark_model.csv

One view per task found among the project's runs (or --task): test accuracy against tokens/s,
accuracy and peak memory per attention (mean ± std over seeds), val/acc by step grouped by
attention, the merged comparison table and a runs table with the comparison columns. With
--benchmarks, the benchmark CSVs are logged as runs of group "benchmark" and a view plots their
peak memory and time against sequence length. A view of the same name is updated, not repeated.

The local inputs (the --benchmarks CSVs, wandb-workspaces) and an API key are checked before
anything goes to the network, then whether the server answers (seconds); the W&B part gives up
after NETWORK_TIMEOUT_S with one line.
"""

from __future__ import annotations

import argparse
import signal
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from linarena.analysis.dashboard import (
    benchmark_rows,
    benchmark_view,
    task_view,
    upload_benchmarks,
    workspaces,
)
from linarena.analysis.order import task_sort_key
from linarena.training.wandb_run import base_url, has_credentials, server_unreachable

# Seconds the W&B part (reading the project's runs, uploading, saving the views) may take.
NETWORK_TIMEOUT_S = 300


class NoAnswer(BaseException):
    """The W&B part ran past NETWORK_TIMEOUT_S. A BaseException: wandb's retry loops catch
    Exception, and would retry on."""


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--entity", required=True, help="W&B entity (user or team)")
    parser.add_argument("--project", required=True, help="W&B project, e.g. linarena")
    parser.add_argument("--task", action="append", default=[],
                        help="a task (data config name) to make a view for; repeatable; "
                             "default: every task of the project's runs")
    parser.add_argument("--benchmarks", nargs="*", type=Path, default=[], metavar="CSV",
                        help="scripts/benchmark_model.py CSVs to upload and plot")
    return parser.parse_args(argv)


def check_local_inputs(args: argparse.Namespace) -> None:
    """Every --benchmarks file a benchmark_model.py CSV, wandb-workspaces installed, an API key
    configured; a ValueError (SystemExit for the package) before anything is sent."""
    for path in args.benchmarks:
        if not path.is_file():
            raise ValueError(f"--benchmarks {path}: no such file (a CSV that "
                             "scripts/benchmark_model.py wrote)")
        list(benchmark_rows(path))
    workspaces()
    if not has_credentials():
        raise ValueError("no W&B API key is configured (WANDB_API_KEY, or the netrc entry of "
                         f"{base_url()}): run `wandb login` first; nothing was sent")


@contextmanager
def deadline(seconds: int) -> Iterator[None]:
    """NoAnswer when the block runs longer than `seconds`."""
    def expire(signum: int, frame: object) -> None:
        raise NoAnswer(f"W&B ({base_url()}) did not answer within {seconds} s: check the "
                       "network, WANDB_BASE_URL and the API key, then run this again")

    previous = signal.signal(signal.SIGALRM, expire)
    signal.alarm(seconds)
    try:
        yield
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, previous)


def project_tasks(entity: str, project: str) -> list[str]:
    """The task names in the config of the project's runs (debug runs left out)."""
    import wandb

    runs = wandb.Api().runs(f"{entity}/{project}", filters={"group": {"$ne": "debug"}})
    return sorted({run.config["task"] for run in runs if run.config.get("task")},
                  key=task_sort_key)


def save(view) -> None:
    """Save `view` under a fixed internal name derived from its title, so that running the
    script again updates the view instead of adding one."""
    from wandb_workspaces.workspaces import internal

    slug = "linarena" + "".join(c for c in view.name.lower() if c.isalnum())
    view._internal_name = internal._url_query_str_to_internal_name(slug)
    try:
        view._internal_id = internal.View.from_name(view.entity, view.project, slug).id
    except ValueError:  # no such view yet: created
        view._internal_id = ""
    view.save()


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    import wandb

    try:
        check_local_inputs(args)
        reason = server_unreachable(base_url())
        if reason is not None:
            raise ValueError(f"the W&B server {base_url()} is unreachable ({reason}): check the "
                             "network, or WANDB_BASE_URL")
        with deadline(NETWORK_TIMEOUT_S):
            tasks = args.task or project_tasks(args.entity, args.project)
            if args.benchmarks:
                count = upload_benchmarks(args.entity, args.project, args.benchmarks)
                print(f"logged {count} benchmark runs (group 'benchmark')")
                save(benchmark_view(args.entity, args.project))
            if not tasks and not args.benchmarks:
                raise ValueError(f"no run with a task in {args.entity}/{args.project}; train "
                                 "and sync some runs first, or name one with --task")
            for task in tasks:
                save(task_view(args.entity, args.project, task))
    except (ValueError, wandb.errors.Error, NoAnswer) as error:
        print(f"wandb_dashboard.py: error: {error}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
