"""The generic checks of a whole layer (x -> x; tests/attention/test_layers.py), each a function
of the variant's name returning a certificate row: float64 exactness of its chunked recurrence
against the token-by-token one on its own parts, padding (outputs and gradients), causal
leakage, step() and continued states against the whole sequence, the state it declares, autocast
at a long length, and gradcheck. Layers of d_model 32 with 2 heads, float64, as the tests."""

from __future__ import annotations

from functools import partial
from pathlib import Path

import torch

from linarena.arena.checks import (
    SKIP,
    Row,
    autocast_row,
    gradcheck_row,
    long_checks,
    max_error,
    measured,
    mode,
)
from linarena.arena.reference import (
    LAYER_WIDTH,
    build_layer,
    float64_tolerance,
    has_reference,
    layer_reference,
)

LENGTH = 21
# Products summed into one output element: the length times the widths the layer's projections
# and state sum over (at most a few times d_model); the bound of reference.float64_tolerance.
TERMS = LENGTH * 4 * LAYER_WIDTH


def _tokens(batch: int = 2, length: int = LENGTH, seed: int = 1,
            dtype: torch.dtype = torch.float64) -> torch.Tensor:
    generator = torch.Generator().manual_seed(seed)
    return torch.randn(batch, length, LAYER_WIDTH, generator=generator, dtype=dtype)


def _layer(name: str, conf_dir: Path, causal: bool, **kwargs) -> torch.nn.Module:
    return build_layer(name, causal, conf_dir=conf_dir, **kwargs).double()


def exact(name: str, conf_dir: Path, causal: bool) -> Row:
    """The layer against its own parts around the token-by-token float64 recurrence."""
    check = f"float64 reference ({mode(causal)})"
    layer = _layer(name, conf_dir, causal)
    if not has_reference(layer):
        return Row(check, SKIP, None, None, "the layer mixes tokens its own way (no single "
                   "recurrence to run token by token); its fla test checks it")
    x = _tokens()
    expected = layer_reference(layer, x)
    return measured(check, max_error(layer(x), expected), float64_tolerance(expected, TERMS),
                    "max |layer - its parts around the token-by-token recurrence|, float64")


def padding(name: str, conf_dir: Path, causal: bool) -> Row:
    """Right padding holding NaN: real outputs are those of the unpadded rows, and every
    gradient stays finite (padded positions' gradient zero)."""
    layer = _layer(name, conf_dir, causal)
    x, lengths = _tokens(), [LENGTH, 13]
    mask = torch.arange(LENGTH) < torch.tensor(lengths)[:, None]
    padded = torch.where(mask[..., None], x, float("nan")).requires_grad_()
    out = layer(padded, mask)
    error = max(max_error(out[row:row + 1, :n], layer(x[row:row + 1, :n]))
                for row, n in enumerate(lengths))
    out[mask].sum().backward()
    finite = all(p.grad is None or torch.isfinite(p.grad).all() for p in layer.parameters())
    finite = finite and torch.isfinite(padded.grad[mask]).all() and \
        bool((padded.grad[~mask] == 0).all())
    return measured(f"NaN padding ({mode(causal)})", error if finite else float("inf"),
                    float64_tolerance(out[mask], TERMS),
                    "max |padded row - row alone| over real tokens; gradients finite")


def causal_leakage(name: str, conf_dir: Path) -> Row:
    """Changing the tokens from 12 on leaves the outputs before 12 unchanged."""
    layer = _layer(name, conf_dir, True)
    x = _tokens()
    changed = x.clone()
    changed[:, 12:] = torch.randn_like(changed[:, 12:])
    out, out_changed = layer(x), layer(changed)
    if torch.equal(out[:, 12:], out_changed[:, 12:]):
        return measured("causal leakage", float("nan"), 0.0,
                        "the outputs from 12 on did not change either: the check saw nothing")
    return measured("causal leakage", max_error(out_changed[:, :12], out[:, :12]),
                    float64_tolerance(out[:, :12], TERMS),
                    "max |change| of outputs before 12 when the tokens from 12 on change")


def step_and_state(name: str, conf_dir: Path) -> Row:
    """step() token by token, and two segments (split at 8), give the whole sequence's outputs."""
    layer = _layer(name, conf_dir, True)
    x = _tokens()
    whole = layer(x)
    first, state = layer(x[:, :8], return_state=True)
    rest = layer(x[:, 8:], initial_state=state)
    state, steps = None, []
    for t in range(LENGTH):
        out, state = layer.step(x[:, t], state)
        steps.append(out)
    error = max(max_error(torch.cat([first, rest], 1), whole),
                max_error(torch.stack(steps, 1), whole))
    return measured("step() and continued state", error, float64_tolerance(whole, TERMS),
                    "max |step-by-step or two segments (split at 8) - whole|, float64")


def state_size(name: str, conf_dir: Path) -> Row:
    """state_size(length), which the studies plot, is the numbers the state holds."""
    layer = _layer(name, conf_dir, True)
    error = 0.0
    for length in (5, LENGTH):
        _, state = layer(_tokens(length=length), return_state=True)
        held = sum(tensor[0].numel() for tensor in state.tensors.values())
        error = max(error, abs(layer.state_size(length) - held))
    return measured("state size", error, 0.0,
                    f"|state_size() - numbers the state holds| after 5 and {LENGTH} tokens "
                    f"({layer.state_size(LENGTH)} at d_model {LAYER_WIDTH})")


def autocast_long(name: str, conf_dir: Path, causal: bool, length: int) -> Row:
    """bf16 autocast at `length` tokens (x of unit scale, as the block's norm gives it) within
    2e-2 (max) and 3e-3 (mean) of float32, relative to the output's magnitude, as the cores'
    check."""
    layer = build_layer(name, causal, conf_dir=conf_dir)
    x = _tokens(batch=1, length=length).to(torch.bfloat16)  # unit scale: a normed input
    with torch.autocast("cpu", dtype=torch.bfloat16):
        out = layer(x)
    exact_out = layer(x.float())  # the same (rounded) input
    return autocast_row(length, causal, out, exact_out)


def gradcheck(name: str, conf_dir: Path, causal: bool) -> Row:
    """torch.autograd.gradcheck of x in float64 (7 tokens), along random directions."""
    layer = _layer(name, conf_dir, causal)
    x = _tokens(length=7).requires_grad_(True)
    return gradcheck_row(causal, layer, (x,), "float64 Jacobian of x")


def layer_checks(long_length: int) -> list[tuple[str, object]]:
    """(check name, function(name, conf_dir) -> Row) of every generic layer check."""
    found: list[tuple[str, object]] = []
    for causal in (False, True):
        found += [(f"float64 reference ({mode(causal)})", partial(exact, causal=causal)),
                  (f"NaN padding ({mode(causal)})", partial(padding, causal=causal))]
    found += [("causal leakage", causal_leakage), ("step() and continued state", step_and_state),
              ("state size", state_size)]
    return found + long_checks(autocast_long, gradcheck, long_length)
