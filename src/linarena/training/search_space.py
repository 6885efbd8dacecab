"""An Optuna search's space (hparams_search=optuna: hydra.sweeper.params, and sweeps given on the
command line), read as hydra-optuna-sweeper reads it: checked before the study starts, since a
range Optuna cannot sample ends the sweeper in a traceback; and the advice for a search whose
every trial diverged, which the sweeper would end in "No trials are completed yet". Kept free of
torch: the check runs in a Hydra callback before anything is launched."""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from hydra.core.override_parser.overrides_parser import OverridesParser
from hydra.core.override_parser.types import Override
from hydra.errors import HydraException

# The setting whose range the advice for a diverged search lowers.
LR_KEY = "optim.lr"


def search_space_problem(params: Mapping[str, Any], arguments: Iterable[str] = ()) -> str | None:
    """Why the search space cannot be sampled, in one line, or None when it can: an interval or
    range whose low end is above its high end, a log interval reaching down to 0 or below, or a
    value that is no search range. `params`: hydra.sweeper.params ({"optim.lr": "interval(1e-4,
    3e-3)", ...}); `arguments`: the command line's overrides (those that sweep are searched
    too)."""
    parser = OverridesParser.create()
    settings = [(f"hydra.sweeper.params.{key}={value}", f"{key}={value}")
                for key, value in params.items()]
    settings += [(str(argument), str(argument)) for argument in arguments]
    for shown, setting in settings:
        try:
            override = parser.parse_override(setting)
        except HydraException as err:
            return f"{shown}: not a search range ({str(err).splitlines()[0]})."
        bounds = _bounds(override)
        if bounds is None:
            continue
        low, high, log = bounds
        if low > high:
            kind = "interval" if override.is_interval_sweep() else "range"
            return (f"{shown}: its low end {low:g} is above its high end {high:g}; write "
                    f"{kind}({high:g}, {low:g}).")
        if log and low <= 0:
            return (f"{shown}: a log interval needs a low end above 0 (e.g. "
                    f"tag(log, interval({high / 100:g}, {high:g}))).")
    return None


def _bounds(override: Override) -> tuple[float, float, bool] | None:
    """(low, high, whether sampled on a log scale) of an interval or range sweep; None for
    anything else (a fixed value, a choice)."""
    if override.is_interval_sweep():
        sweep = override.value()
        return sweep.start, sweep.end, "log" in sweep.tags
    if override.is_range_sweep() and not override.value().shuffle:
        sweep = override.value()
        return sweep.start, sweep.stop, False
    return None


def all_trials_diverged(lrs: Sequence[float | None]) -> str:
    """The message that ends an Optuna search whose every trial diverged, one learning rate per
    trial in `lrs` (None where unknown), with a tenfold lower learning-rate range as the way out:
    a command-line sweep, which replaces the search range of hydra.sweeper.params."""
    known = sorted(lr for lr in lrs if lr is not None)
    lower = "a lower learning-rate range"
    if known:
        low, high = known[0] / 10, known[-1] / 10
        low = low if low < high else low / 10  # one trial: a range below the one lr tried
        lower = (f"a tenth of the learning rates tried ({known[0]:.2g} to {known[-1]:.2g}), e.g. "
                 f"add '{LR_KEY}=tag(log, interval({low:.2g}, {high:.2g}))' to the command")
    return (f"All {len(lrs)} trials of the Optuna search diverged (non-finite weights or "
            f"optimizer state), so it has no best trial. Search again with {lower}, or with a "
            "longer optim.warmup_steps.")
