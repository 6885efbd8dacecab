"""The self-pretraining step as a benchmark case (pretrain_step), and its timing beside the
fine-tuning step (model_step) of the same model, round-robin in one process.

pretrain_step is one optimizer step of model_step's model and optimizer under the objective that
pretrain=mlm (bidirectional) or pretrain=lm (causal) trains with, run by the training's own code:
the model gets the mask token's row as build_model gives it, PretrainModule adds its LM head and
computes the loss (masking.mask_tokens with a fresh mask_generator draw per step, as training
draws one per step; the LM head over every position; token_loss). Tokens per second count the
real tokens, batch x length, as model_step's.
"""

from __future__ import annotations

import dataclasses
import gc
import itertools
import statistics
from collections.abc import Callable
from pathlib import Path

import torch
from hydra import compose, initialize_config_dir
from hydra.utils import instantiate

from linarena.analysis.bench_cases import (
    PRETRAIN_STEP,
    TINY_MODEL,
    CaseSpec,
    ModelShape,
    _autocast,
    build_classifier,
    make_model_step,
)
from linarena.analysis.timing import elapsed, is_out_of_memory, peak_allocated_mb
from linarena.attention.engine.backend import backend_used
from linarena.training import pretrain_config
from linarena.training.optim import OptimSettings
from linarena.training.pretrain import PretrainModule

MODEL_STEP = "model_step"
PAIR = (MODEL_STEP, PRETRAIN_STEP)
MIN_ROUNDS = 3  # a time budget never cuts the rounds below this: a median of three at least


def objective(shape: ModelShape) -> str:
    """The pretraining objective the model takes: next-token (lm) for a causal model, masked-token
    (mlm) for a bidirectional one (pretrain_config.check_objective_fits_model)."""
    return pretrain_config.LM if shape.causal else pretrain_config.MLM


def make_pretrain_module(spec: CaseSpec) -> PretrainModule:
    """The PretrainModule of the pretraining stage around model_step's classifier, on the device,
    in training mode."""
    shape, goal = spec.shape, objective(spec.shape)
    if goal == pretrain_config.MLM and not (spec.mask_fraction and 0 < spec.mask_fraction < 1):
        raise ValueError(f"pretrain_step of a bidirectional model masks a fraction of the real "
                         f"tokens in (0, 1); the spec has mask_fraction={spec.mask_fraction!r}")
    # build_model's table under mlm: the mask token's row, id vocab_size, appended.
    rows = shape.vocab_size + (goal == pretrain_config.MLM)
    model = build_classifier(dataclasses.replace(
        spec, shape=dataclasses.replace(shape, vocab_size=rows)))
    fraction = spec.mask_fraction if goal == pretrain_config.MLM else None
    # The optimizer settings are not read by predict_tokens: the step uses model_step's AdamW.
    module = PretrainModule(model, OptimSettings(), shape.vocab_size, goal, fraction, seed=0)
    return module.to(spec.device).train()


def make_pretrain_step(spec: CaseSpec) -> tuple[Callable[[], torch.Tensor], torch.nn.Module]:
    """One pretraining step on model_step's random full-length sequences (the same tokens):
    the objective's loss (PretrainModule.predict_tokens, the masks of step 0, 1, ... in turn),
    backward, model_step's AdamW; returns (step, which returns the loss, and the model)."""
    module = make_pretrain_module(spec)
    optimizer = torch.optim.AdamW(module.model.parameters(), lr=1e-4)
    generator = torch.Generator().manual_seed(0)  # model_step's draw: the same tokens
    tokens = torch.randint(1, spec.shape.vocab_size, (spec.batch, spec.length),
                           generator=generator).to(spec.device)
    batch = {"tokens": tokens, "mask": torch.ones_like(tokens, dtype=torch.bool)}
    steps = itertools.count()

    def step() -> torch.Tensor:
        optimizer.zero_grad(set_to_none=True)
        with _autocast(spec):
            loss = module.predict_tokens(batch, "train", next(steps))[0]
        loss.backward()
        optimizer.step()
        return loss.detach()

    return step, module.model


def task_shape(task: str, causal: bool, conf_dir: Path, tiny: bool = False
               ) -> tuple[ModelShape, float | None]:
    """The model `python train.py data=<task>` builds (conf/model's default sizes; TINY_MODEL's
    with `tiny`), with the task's vocabulary and classes from its datamodule's constructor (no
    data is read), and the masking fraction pretrain=mlm uses for the task (None when causal)."""
    goal = pretrain_config.LM if causal else pretrain_config.MLM
    with initialize_config_dir(config_dir=str(Path(conf_dir).resolve()), version_base="1.3"):
        cfg = compose(config_name="config",
                      overrides=[f"data={task}", f"pretrain={goal}", f"task_name={task}"])
    datamodule = instantiate(cfg.data)
    model = cfg.model
    sizes = ({field: getattr(TINY_MODEL, field) for field in
              ("num_layers", "d_model", "num_heads", "mlp_dim", "dropout")} if tiny else
             {"num_layers": model.num_layers, "d_model": model.d_model,
              "num_heads": model.num_heads, "mlp_dim": model.mlp_dim, "dropout": model.dropout})
    shape = ModelShape(**sizes, vocab_size=datamodule.vocab_size,
                       num_classes=datamodule.num_classes, causal=causal)
    return shape, None if causal else pretrain_config.mask_fraction(cfg)


def time_pair(spec: CaseSpec, max_seconds: float | None = None) -> dict[str, dict]:
    """model_step and pretrain_step of `spec` (its `what` is ignored), each warmed up
    spec.warmup times (at least once), then timed spec.repeats rounds of one call each, in
    alternating order (the second call of a round never always gets the first's leftovers),
    or fewer once the rounds took `max_seconds` (at least MIN_ROUNDS):
    what -> {ms (median), min_ms, tokens_per_sec (median), rounds, peak_memory_mb (torch's
    allocator, one more call), backend, status, note}; pretrain_step's also has its tokens/s over
    model_step's: vs_model_step, the median over the rounds of the ratio within a round (two
    calls next to each other, so a load that comes and goes falls on both; steadier than the
    ratio of the medians on a shared machine), and vs_model_step_min, from the fastest calls.
    An allocation failure is a result (status oom)."""
    device = torch.device(spec.device)
    torch.set_num_threads(spec.threads)
    try:
        steps = {}
        for what, make in ((MODEL_STEP, make_model_step), (PRETRAIN_STEP, make_pretrain_step)):
            # Both from one seed (a body initialised alike, and dropout masks drawn alike), and
            # a pair's numbers do not depend on the cases timed before it in the process.
            torch.manual_seed(0)
            steps[what] = make(spec)
        for fn, _ in steps.values():
            for _ in range(max(spec.warmup, 1)):
                fn()
        times: dict[str, list[float]] = {what: [] for what in PAIR}
        for round_index in range(spec.repeats):
            for what in PAIR[::-1] if round_index % 2 else PAIR:
                times[what].append(elapsed(steps[what][0], device))
            spent = sum(map(sum, times.values()))
            if max_seconds is not None and round_index + 1 >= MIN_ROUNDS and spent > max_seconds:
                break
        memory = {what: peak_allocated_mb(fn, device) for what, (fn, _) in steps.items()}
    except Exception as error:  # only allocation failures are results; anything else is a bug
        if not is_out_of_memory(error):
            raise
        del error
        gc.collect()
        return {what: {"ms": None, "min_ms": None, "tokens_per_sec": None, "rounds": 0,
                       "peak_memory_mb": None, "backend": "", "status": "oom",
                       "note": "allocation failed (out of memory)"} for what in PAIR}
    results = {}
    for what, (_, model) in steps.items():
        median_s = statistics.median(times[what])
        results[what] = {"ms": 1e3 * median_s, "min_ms": 1e3 * min(times[what]),
                         "tokens_per_sec": spec.batch * spec.length / median_s,
                         "rounds": len(times[what]),
                         "peak_memory_mb": memory[what],
                         "backend": backend_used(model) or "torch", "status": "ok", "note": ""}
    rounds = zip(times[MODEL_STEP], times[PRETRAIN_STEP], strict=True)
    results[PRETRAIN_STEP]["vs_model_step"] = statistics.median(m / p for m, p in rounds)
    results[PRETRAIN_STEP]["vs_model_step_min"] = min(times[MODEL_STEP]) / min(times[PRETRAIN_STEP])
    del steps
    gc.collect()
    return results
