"""Checks of the composed config's keys and values before anything is built, so a wrong setting
fails in a second with a message naming the key, not after data generation or mid-training."""

from __future__ import annotations

import difflib
import inspect
from collections.abc import Callable, Iterable
from typing import Any

from hydra.core.hydra_config import HydraConfig
from hydra.utils import get_object, instantiate
from omegaconf import DictConfig, OmegaConf, open_dict

from linarena.attention import LinearAttention
from linarena.attention.layers import build_attention
from linarena.attention.layers.base import takes_score_bias
from linarena.errors import ConfigError
from linarena.models.positions import check_positions_kind, check_takes_score_bias
from linarena.models.transformer import repeat_pattern
from linarena.training.build import BUILD_KEYS, INJECTED
from linarena.training.known_keys import check_known_keys
from linarena.training.pattern_config import pattern_attentions
from linarena.training.pretrain_config import check_pretrain


def target_of(node: DictConfig, group: str) -> Callable[..., Any]:
    """The class or function named by `node._target_`."""
    target = node.get("_target_")
    if target is None:
        raise ConfigError(f"The `{group}` config has no _target_ (the class it builds).")
    try:
        return get_object(target)
    except Exception as err:
        raise ConfigError(f"{group}._target_={target} cannot be imported: {err}") from err


def check_keys(node: DictConfig, group: str, kind: str | None = None) -> None:
    """Every key of `node` must be a parameter of its _target_ (torchtune-style), and every
    required parameter must be given. `kind`: the group whose code-passed arguments (INJECTED)
    the node takes, when not `group` itself (a model.pattern entry is an attention)."""
    target = target_of(node, group)
    params = inspect.signature(target).parameters
    injected = INJECTED.get(kind or group, set())
    keys = {k for k in node if not str(k).startswith("_")} - BUILD_KEYS.get(group, set())
    takes_any = any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params.values())
    names = [n for n, p in params.items() if p.kind is not inspect.Parameter.VAR_KEYWORD]
    if not takes_any:
        # Injected names are accepted (trainer.precision is set in the config, then resolved)
        # but not offered as suggestions.
        shown = [n for n in names if n not in injected and n != "self"]
        check_known_keys(keys, names, group, f"{node['_target_']} accepts", shown)
    missing = [
        n
        for n, p in params.items()
        if p.default is inspect.Parameter.empty
        and p.kind in (inspect.Parameter.POSITIONAL_OR_KEYWORD, inspect.Parameter.KEYWORD_ONLY)
        and n not in keys
        and n not in injected
    ]
    if missing:
        raise ConfigError(
            f"The `{group}` config lacks required key(s): "
            + ", ".join(f"{group}.{n}" for n in missing)
            + f" (parameters of {node['_target_']})."
        )


TEST_CHECKPOINTS = ("best", "last")


def check_config(cfg: DictConfig, resumed: bool = False) -> None:
    """All checks that need only the config (and, in a Hydra job, its command-line overrides).
    `resumed`: the config is a resumed run's, whose init_weights (if any) records how the run
    started and is not read again; only both given on the command line are refused then."""
    given: set[str] = set()
    if HydraConfig.initialized():
        hydra_cfg = HydraConfig.get()
        check_added_keys(cfg, hydra_cfg.overrides.task, hydra_cfg.runtime.choices)
        given = {o.lstrip("+~").split("=", 1)[0] for o in hydra_cfg.overrides.task}
    check_test_checkpoint(cfg.get("test_checkpoint", "best"))
    for group in ("data", "attention", "model", "optim", "trainer"):
        check_keys(cfg[group], group)
    for name, node in cfg.get("callbacks", {}).items():
        if isinstance(node, DictConfig) and "_target_" in node:
            check_keys(node, f"callbacks.{name}")
    check_whole_numbers(cfg)
    check_positive_numbers(cfg)
    check_seed(cfg.get("seed"))
    check_validation_runs(cfg.trainer)
    model = cfg.model
    if "positions" in model:  # a model of another _target_ may have no such setting
        check_positions_kind(model.positions)
    check_compile_backend(model.get("compile"))
    check_attention_builds(cfg)
    check_pretrain(cfg)
    if cfg.get("init_weights") and cfg.get("ckpt_path") and (
            not resumed or {"init_weights", "ckpt_path"} <= given):
        raise ConfigError(
            f"init_weights={cfg.init_weights} with ckpt_path={cfg.ckpt_path}: ckpt_path continues "
            "a run whole (weights, optimizer, step); init_weights starts a new run from "
            "weights only. Set one of them.")
    if model.max_length < cfg.data.max_length:
        raise ConfigError(
            f"data.max_length={cfg.data.max_length} is longer than model.max_length="
            f"{model.max_length}: sequences of up to {cfg.data.max_length} tokens would not fit. "
            f"Set model.max_length={cfg.data.max_length} (its default is ${{data.max_length}}) "
            f"or data.max_length={model.max_length}."
        )


def check_added_keys(cfg: DictConfig, overrides: Iterable[str], groups: Iterable[str]) -> None:
    """A `+key...=value` override must not create a top-level key: nothing reads a key that no
    config defines, so `+atention=elu` (a typo, with the + that Hydra's hint for an unknown key
    suggests) would train the default attention and file it under that name. A + below an
    existing node (`+callbacks.poison._target_=...`, `+trainer.max_time=...`) is fine; the keys
    below a group are checked against its _target_ (check_keys). `groups`: the config groups
    (a `+group=option` adds that group's config, not a key)."""
    groups = {str(group) for group in groups}
    added: dict[str, list[tuple[str, str]]] = {}  # top-level key: (override, its key path)
    for override in overrides:
        if not override.startswith("+") or override.startswith("++"):
            continue  # ++ is Hydra's "add or override": it may name an existing key
        path = override[1:].split("=", 1)[0]
        added.setdefault(path.split(".", 1)[0], []).append((override, path))
    for key, uses in added.items():
        if key in groups or key not in cfg:
            continue
        node = cfg[key]
        # A + on a dotted path under an existing node leaves that node's other keys.
        set_below = {path.split(".")[1] for _, path in uses if "." in path}
        if isinstance(node, DictConfig) and not set(node.keys()) <= set_below:
            continue
        override, path = uses[0]
        known = [name for name in (*groups, *map(str, cfg)) if name not in added]
        close = difflib.get_close_matches(key, known, n=1)
        hint = ""
        if close:
            meant = close[0] + path[len(key):]
            # An existing key (or group) takes no +; a new key below an existing node keeps it.
            plus = "" if OmegaConf.select(cfg, meant, default=None) is not None else "+"
            hint = f" (did you mean {plus}{meant}={override.partition('=')[2]}?)"
        raise ConfigError(
            f"{override}: no config defines the key `{key}`, so nothing would read it and the "
            f"run would train without it{hint}. A config group or an existing setting takes no "
            "+ (e.g. attention=elu); + adds a key below an existing node (e.g. "
            "+trainer.max_time=00:01:00:00).")


def check_compile_backend(backend: Any) -> None:
    """model.compile is null or one of torch.compile's backends."""
    if backend is None:
        return
    import torch._dynamo  # loaded only when a run compiles

    if str(backend) not in torch._dynamo.list_backends(exclude_tags=()):
        raise ConfigError(
            f"model.compile={backend!r}: not a torch.compile backend. Use model.compile=null "
            "(eager), inductor or aot_eager (every backend: "
            "torch._dynamo.list_backends(exclude_tags=())).")


def check_test_checkpoint(which: Any) -> None:
    """test_checkpoint is one of TEST_CHECKPOINTS."""
    if str(which) not in TEST_CHECKPOINTS:
        raise ConfigError(
            f"test_checkpoint={which!r}: use test_checkpoint=best (best val/acc checkpoint) or "
            "test_checkpoint=last (the weights at the end of training, as the LRA scripts)."
        )


# Settings that count something, so must be whole numbers (the constructors would fail later
# with a traceback, or with a message about the wrong problem: "must be >= 1" for 2.5).
WHOLE_NUMBERS = ("trainer.max_steps", "data.max_length", "model.max_length", "data.batch_size")
# Settings that count something there must be at least one of, with an example for the message:
# a model of no layers would train no attention and be filed under its attention's name.
POSITIVE_NUMBERS = {"model.d_model": 128, "model.num_heads": 4, "model.num_layers": 2,
                    "model.mlp_dim": 256, "model.qkv_dim": 128,
                    "trainer.accumulate_grad_batches": 1}
# seed_everything's range: numpy's seed is an unsigned 32-bit integer.
SEED_RANGE = (0, 2**32 - 1)


def _is_whole(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def check_whole_numbers(cfg: DictConfig) -> None:
    """The settings of WHOLE_NUMBERS that are set must be integers."""
    for key in WHOLE_NUMBERS:
        value = OmegaConf.select(cfg, key, default=None)
        if value is not None and not _is_whole(value):
            raise ConfigError(f"{key}={value!r}: it must be a whole number, e.g. {key}=128.")


def check_positive_numbers(cfg: DictConfig) -> None:
    """The settings of POSITIVE_NUMBERS that are set (a model of another _target_ may lack
    them; model.qkv_dim null is d_model) must be whole numbers >= 1."""
    for key, example in POSITIVE_NUMBERS.items():
        value = OmegaConf.select(cfg, key, default=None)
        if value is not None and not (_is_whole(value) and value >= 1):
            raise ConfigError(
                f"{key}={value!r}: it must be a whole number >= 1, e.g. {key}={example}.")


def check_seed(seed: Any) -> None:
    """The training seed must be an integer in SEED_RANGE (Lightning's seed_everything would fail
    with a traceback on anything else)."""
    low, high = SEED_RANGE
    if seed is not None and (not _is_whole(seed) or not low <= seed <= high):
        raise ConfigError(
            f"seed={seed!r}: the seed must be a whole number from {low} to {high}, e.g. seed=1 "
            "(or seed=null for a random one)."
        )


def check_attention_builds(cfg: DictConfig) -> None:
    """Build one attention layer as the model will (one per model.pattern entry for a hybrid
    stack, whose names and length are checked first) and ask it whether it can take sequences
    of data.max_length tokens, so that the constructors' own checks (e.g. causal cosFormer's
    max_length) fail now, before any data is prepared, and are written once. A model.positions
    that biases the scores (alibi) is refused here, naming the attention or pattern entry, unless
    each one computes scores. Runs before the run's seed is set: a random draw here changes no
    result."""
    model = cfg.model
    entries = pattern_attentions(cfg)
    if entries is not None:
        repeat_pattern(entries, model.num_layers)
    width = model.get("qkv_dim") or model.d_model
    if model.num_heads < 1 or width % model.num_heads != 0:
        return  # the model's constructor reports it, when build.py builds the model
    groups = [("attention", cfg.attention)]
    groups += [(f"model.pattern.{name}", node) for name, node in entries or []]
    for group, attention in groups:
        if group != "attention":  # check_config checked the group's own keys
            check_keys(attention, group, kind="attention")
        if "positions" in model and (entries is None or group != "attention"):
            check_takes_score_bias(model.positions, takes_score_bias(target_of(attention, group)),
                                   attention_label(cfg, group, attention))
        for key, node in attention.items():  # nested objects (a feature map): keys too
            if isinstance(node, DictConfig) and "_target_" in node:
                check_keys(node, f"{group}.{key}")
        try:
            # model.causal null is the task's own, known once the datamodule is built: probed
            # as bidirectional here, built as the task says in build.py.
            layer = build_attention(instantiate(attention), width // model.num_heads,
                                    bool(model.causal))
            if isinstance(layer, LinearAttention):
                layer.feature_map.check_length(cfg.data.max_length)
        except Exception as err:
            cause = err.__cause__ or err
            raise ConfigError(f"{group} ({attention._target_}): {cause}") from err


def attention_label(cfg: DictConfig, group: str, attention: DictConfig) -> str:
    """How a message names an attention: attention=<its conf/attention/ name> (in a Hydra job,
    else its _target_), or model.pattern entry <name>."""
    if group != "attention":
        return f"model.pattern entry {group.removeprefix('model.pattern.')}"
    name = OmegaConf.select(cfg, "attention_name", throw_on_resolution_failure=False)
    return f"attention={name or attention._target_}"


def check_validation_runs(trainer: DictConfig) -> None:
    """val/acc_best, the best checkpoint and the value an Optuna search maximises all need at
    least one validation."""
    if trainer.get("fast_dev_run"):
        return
    if trainer.get("limit_val_batches") == 0:
        raise ConfigError(
            "trainer.limit_val_batches=0 turns validation off, but the run needs it (val/acc, "
            "val/acc_best, the best checkpoint). Use a positive number or null (all batches)."
        )
    interval, max_steps = trainer.get("val_check_interval"), trainer.get("max_steps", -1)
    per_epoch = trainer.get("check_val_every_n_epoch")
    if not _valid_interval(interval, per_epoch):
        # Lightning takes a fraction of an epoch only with validation per epoch.
        raise ConfigError(
            f"trainer.val_check_interval={interval!r}: use a number of training steps >= 1 (e.g. "
            "trainer.val_check_interval=100), trainer.val_check_interval=null (once per epoch), "
            "or a fraction of an epoch in (0, 1] with validation per epoch (e.g. "
            "trainer.val_check_interval=0.5 trainer.check_val_every_n_epoch=1)."
        )
    if max_steps == 0 or (max_steps is not None and max_steps < -1):
        raise ConfigError(
            f"trainer.max_steps={max_steps} trains nothing: set a positive number of steps (or "
            "-1 with trainer.max_epochs)."
        )
    if isinstance(interval, int) and 0 < max_steps < interval:
        raise ConfigError(
            f"trainer.max_steps={max_steps} is smaller than trainer.val_check_interval="
            f"{interval}: no validation would run. Set trainer.val_check_interval to at most "
            f"{max_steps}."
        )


def _valid_interval(interval: Any, per_epoch: Any) -> bool:
    """A validation interval Lightning takes: steps >= 1, null, or a fraction of an epoch when
    validation runs per epoch (`per_epoch`: trainer.check_val_every_n_epoch, not null)."""
    if interval is None:
        return True
    if _is_whole(interval):
        return interval >= 1
    return isinstance(interval, float) and 0 < interval <= 1 and per_epoch is not None


def fit_validation_interval(cfg: DictConfig, user_overrides: Iterable[str]) -> int | None:
    """Shortening a run shortens its validation interval: when trainer.max_steps is below
    trainer.val_check_interval and the user did not set the interval themselves (an override in
    `user_overrides`), the interval becomes max_steps, so that the run still validates (once, at
    its end). Returns the interval it replaced, or None when nothing changed."""
    trainer = cfg.trainer
    interval, max_steps = trainer.get("val_check_interval"), trainer.get("max_steps", -1)
    if any(o.lstrip("+~").startswith("trainer.val_check_interval=") for o in user_overrides):
        return None
    if not (_is_whole(interval) and _is_whole(max_steps) and 0 < max_steps < interval):
        return None
    with open_dict(trainer):
        trainer.val_check_interval = max_steps
    return interval
