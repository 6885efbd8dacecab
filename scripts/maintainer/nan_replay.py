"""Where does a diverged run's first NaN come from: the model, or the engine's float32?

Trains each run again (train.py with its overrides, one thread, in a scratch folder) with the
backward of one op of the attention engine checked: at the first call whose gradients are not
finite, the call is repeated in float64 from the same saved inputs, and the run stops. A NaN
from finite inputs whose float64 gradients are finite is the engine's numerics, not the model's
divergence. <out>/<name>.csv has one row per run, with its provenance record.

    python scripts/maintainer/nan_replay.py --op linear --out docs/results \\
        --name nan_replay_performer \\
        --run "experiment=mqar_study_cpu attention=performer model.d_model=64 \
               model.short_conv=0 optim.lr=0.0316 seed=1"
    python scripts/maintainer/nan_replay.py --op gated --checkout /tmp/at-71018e1 ...

--op linear checks the feature-map kernels' causal chunks (Performer, elu+1, ...), --op gated
the gated linear attention's chunks (GLA, HGRN2, RetNet, ...). --checkout trains another commit's
code (a git worktree of it, with data/), e.g. the commit a published run was trained at.
"""

from __future__ import annotations

import argparse
import json
import os
import runpy
import shlex
import subprocess
import sys
import tempfile
from pathlib import Path

import pandas as pd
import torch

# The runs import the package of their --checkout (PYTHONPATH), so this file imports this
# checkout's only where the parent process needs it (parse_args, main).
REPO_ROOT = Path(__file__).resolve().parents[2]
MARK = "NAN_REPLAY "
# True while a call is replayed in float64, whose own backward then passes through unchecked.
replaying = False
COLUMNS = ("run", "op", "commit", "nan_found", "inputs_finite", "nonfinite_grads", "detail",
           "max_out_diff", "float64_grads_finite", "float64_grad_absmax")


def _finite(*tensors: torch.Tensor | None) -> bool:
    return all(t is None or bool(torch.isfinite(t).all()) for t in tensors)


def _report(inputs_finite: bool, bad: list[int], detail: str, out32: torch.Tensor,
            out64: torch.Tensor, grads64: tuple[torch.Tensor, ...]) -> None:
    """Print the child's finding and end the process at once (the run is abandoned)."""
    row = {"nan_found": True, "inputs_finite": inputs_finite, "nonfinite_grads": str(bad),
           "detail": detail, "max_out_diff": (out32.double() - out64).abs().max().item(),
           "float64_grads_finite": _finite(*grads64),
           "float64_grad_absmax": max(g.abs().max().item() for g in grads64)}
    print(MARK + json.dumps(row), flush=True)
    os._exit(0)


def _check_linear() -> None:
    from linarena.attention.engine.linear import chunk
    backward = chunk._ChunkedCausal.backward

    def checked(ctx, grad_out, grad_state, grad_top):
        global replaying
        grads = backward(ctx, grad_out, grad_state, grad_top)
        bad = [i for i, g in enumerate(grads[:3]) if not _finite(g)]
        if bad and not replaying:
            replaying = True
            q, k, v, mask, den, out, starts, tops = ctx.saved_tensors
            with torch.enable_grad():
                xs = [x.detach().double().requires_grad_(True) for x in (q, k, v)]
                out64, _, _ = chunk._ChunkedCausal.apply(
                    *xs, mask, starts[0].double(), tops[0].double(), ctx.features, ctx.eps,
                    ctx.blocks[0][2])
                grads64 = torch.autograd.grad((out64 * grad_out.double()).sum(), xs)
            detail = (f"normalisers: min {den.min().item():.2g}, {int((den < 1e-30).sum())} of "
                      f"{den.numel()} below 1e-30; max |q| {q.norm(dim=-1).max().item():.3g}")
            _report(_finite(*ctx.saved_tensors, grad_out), bad, detail, out, out64, grads64)
        return grads

    chunk._ChunkedCausal.backward = staticmethod(checked)


def _check_gated() -> None:
    from linarena.attention.engine.gated import chunk
    backward = chunk.GatedChunks.backward

    def checked(ctx, grad_out, grad_final):
        global replaying
        grads = backward(ctx, grad_out, grad_final)
        bad = [i for i, g in enumerate(grads[:4]) if g is not None and not _finite(g)]
        if bad and not replaying:
            replaying = True
            q, k, v, log_gate, *states = ctx.saved_tensors
            start = states[0][:, :, 0]
            settings = (ctx.size, ctx.causal, ctx.gated, ctx.scale)
            with torch.enable_grad():
                xs = [x.detach().double().requires_grad_(True) for x in (q, k, v, log_gate)]
                out64, final64 = chunk.GatedChunks.apply(*xs, start.double(), *settings)
                loss = (out64 * grad_out.double()).sum() + (final64 * grad_final.double()).sum()
                grads64 = torch.autograd.grad(loss, xs)
            with torch.no_grad():
                out32, _ = chunk.GatedChunks.apply(q, k, v, log_gate, start, *settings)
            detail = (f"{q.shape[2]} tokens in chunks of {ctx.size}; log gates summed over the "
                      f"sequence down to {log_gate.sum(dim=2).min().item():.3g}")
            _report(_finite(*ctx.saved_tensors, grad_out), bad, detail, out32, out64, grads64)
        return grads

    chunk.GatedChunks.backward = staticmethod(checked)


CHECKS = {"linear": _check_linear, "gated": _check_gated}


def child(op: str, overrides: list[str]) -> None:
    """In the run's own process: the check installed, then train.py of the current folder."""
    CHECKS[op]()
    sys.argv = ["train.py", *overrides]
    runpy.run_path("train.py", run_name="__main__")


def replay(run: str, op: str, checkout: Path) -> dict:
    """One run trained again in `checkout` with the check; its row of COLUMNS."""
    commit = subprocess.run(["git", "rev-parse", "HEAD"], cwd=checkout, capture_output=True,
                            text=True, check=True).stdout.strip()
    env = {**os.environ, "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1",
           "PYTHONPATH": str(checkout / "src"), "WANDB_MODE": "offline"}
    with tempfile.TemporaryDirectory() as folder:
        command = [sys.executable, str(Path(__file__).resolve()), "--child", "--op", op, "--",
                   *shlex.split(run), "logger=none", f"paths.output_dir={folder}"]
        done = subprocess.run(command, cwd=checkout, env=env, capture_output=True, text=True)
    found = [line for line in done.stdout.splitlines() if line.startswith(MARK)]
    row = {"run": run, "op": op, "commit": commit}
    if not found:
        tail = (done.stderr or done.stdout).strip().splitlines()[-1:] or [""]
        return row | {"nan_found": False, "detail": f"exit {done.returncode}: {tail[0][:200]}"}
    return row | json.loads(found[-1][len(MARK):])


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    from linarena.studies.cli import add_output_arguments

    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--op", choices=sorted(CHECKS), required=True,
                        help="the op whose backward is checked")
    parser.add_argument("--run", action="append", default=[],
                        help="a run's train.py overrides, quoted (repeat for more runs)")
    parser.add_argument("--checkout", type=Path, default=REPO_ROOT,
                        help="the checkout whose code trains the runs (default this one)")
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("overrides", nargs="*", help=argparse.SUPPRESS)
    add_output_arguments(parser, "nan_replay", REPO_ROOT / "outputs", "outputs/")
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    if args.child:
        child(args.op, args.overrides)
        return 0
    if not args.run:
        print("nan_replay.py: give at least one --run", file=sys.stderr)
        return 2
    from linarena.analysis.provenance import command_line
    from linarena.studies.study import write_report

    rows = []
    for run in args.run:
        rows.append(replay(run, args.op, args.checkout.resolve()))
        print(json.dumps(rows[-1]), flush=True)
    table = pd.DataFrame(rows, columns=list(COLUMNS))
    write_report(args.out, args.name, {".csv": table}, command_line(__file__, argv))
    print(f"-> {args.out / (args.name + '.csv')}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
