"""Cores written in this file run the generic tests, unedited, as the cores of conf/attention/ do:

- PlainCore declares only its own parameters (`__init__(self, head_dim, causal)`): the base,
  RecurrentAttention, owns `backend` and `rotary` (the configs and the model builder pass them;
  the base sets them after the core's __init__), so the backend and rotary tests pass.
- IgnoresKCore ties its key to its gate (an HGRN-like core): k never reaches the output and its
  gradient is zero, which the generic tests compare as zero (absolute tolerance).
- StrongGateCore forgets almost at once (log gates of -20): outputs, states and gradients span
  many orders of magnitude, and the generic tolerances scale with the magnitudes involved.

The generic test modules are loaded by path and their functions called with these cores'
names: `load_variant` answers those names with the cores' factories (helpers.attention.build and
the backend tests' build both go through it), everything else as before.
"""

from __future__ import annotations

import importlib.util
import inspect
import itertools
from functools import partial
from pathlib import Path

import helpers.attention as helpers_attention
import pytest
import torch
from omegaconf import OmegaConf
from torch.nn import functional as F

from linarena.arena import reference as arena_reference
from linarena.attention.recurrent import RecurrentAttention
from linarena.attention.recurrent.core import Recurrence
from linarena.attention.variants import load_variant
from linarena.training.config_checks import check_keys

TESTS = Path(__file__).resolve().parents[1]


class PlainCore(RecurrentAttention):
    """A fixed per-head decay of 0.9 per token; declares no backend and no rotary."""

    reads_token = False

    def __init__(self, head_dim: int, causal: bool) -> None:
        super().__init__(head_dim, causal)

    def recurrence(self, q, k, v, x):
        return Recurrence(q, k, v, torch.full(q.shape[:3], -0.1, dtype=q.dtype,
                                              device=q.device), None, None)


class IgnoresKCore(RecurrentAttention):
    """HGRN-like: per-feature forget gate f = sigmoid(q), key 1 - f; k is never read."""

    reads_token = False

    def __init__(self, head_dim: int, causal: bool) -> None:
        super().__init__(head_dim, causal)

    def recurrence(self, q, k, v, x):
        log_gate = F.logsigmoid(q)
        return Recurrence(q, 1 - torch.exp(log_gate), v, log_gate, None, None)


class StrongGateCore(RecurrentAttention):
    """Log gates around -20 (read from q, so they carry gradients): each token forgets its past."""

    reads_token = False

    def __init__(self, head_dim: int, causal: bool) -> None:
        super().__init__(head_dim, causal)

    def recurrence(self, q, k, v, x):
        return Recurrence(q, k, v, -20 * torch.sigmoid(q.mean(-1)) - 10, None, None)


CORES = {"plain_core": PlainCore, "ignores_k_core": IgnoresKCore,
         "strong_gate_core": StrongGateCore}


def _load(relative: str):
    """A generic test module, loaded by path under its own name (its functions unedited)."""
    path = TESTS / relative
    spec = importlib.util.spec_from_file_location(f"generic_{path.stem}", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _with_cores(name, model=None, *args, **kwargs):
    if name in CORES:
        return partial(CORES[name])
    return load_variant(name, model, *args, **kwargs)


@pytest.fixture
def cores(monkeypatch):
    """load_variant answers the cores' names (where helpers.attention's builders look it up,
    and in the loaded modules)."""
    monkeypatch.setattr(helpers_attention, "load_variant", _with_cores, raising=False)
    # helpers.attention re-exports its builders from linarena.arena.reference, which looks the
    # names up in its own module.
    monkeypatch.setattr(arena_reference, "load_variant", _with_cores)

    def loaded(relative: str):
        module = _load(relative)
        if hasattr(module, "load_variant"):
            monkeypatch.setattr(module, "load_variant", _with_cores)
        return module

    return loaded


def test_a_core_declares_only_its_parameters_and_the_base_owns_backend_and_rotary():
    rotary = torch.nn.Identity()
    core = PlainCore(head_dim=8, causal=True, backend="torch", rotary=rotary)
    assert (core.backend, core.rotary, core.output_norm) == ("torch", rotary, "none")
    with pytest.raises(ValueError, match="backend must be one of"):
        PlainCore(head_dim=8, causal=True, backend="triton")
    with pytest.raises(ValueError, match="no kernel for bidirectional attention"):
        PlainCore(head_dim=8, causal=False, backend="fla")
    core.configure(backend="auto")
    assert core.backend == "auto" and core.rotary is rotary


BACKEND_TESTS = [
    ("test_auto_and_torch_give_identical_outputs_on_cpu", {"causal": [False, True]}),
    ("test_an_unknown_backend_is_refused", {}),
]


@pytest.mark.parametrize("name", list(CORES))
@pytest.mark.parametrize(("test", "grid"), BACKEND_TESTS, ids=[t for t, _ in BACKEND_TESTS])
def test_the_backend_tests_pass_on_cores_defined_here(cores, name, test, grid):
    run_grid(getattr(cores("attention/test_attention_backend.py"), test), name, grid)


@pytest.mark.parametrize("name", list(CORES))
def test_fla_is_refused_for_cores_defined_here(cores, name):
    module = cores("attention/test_attention_backend.py")
    if torch.cuda.is_available() and module.backends.fla_installed():
        pytest.skip("fla can run here")
    run_grid(module.test_fla_is_refused_at_construction_where_it_cannot_run, name,
             {"causal": [False, True]})


@pytest.mark.parametrize("name", list(CORES))
def test_the_fla_path_follows_the_torch_one_on_cores_defined_here(cores, name, monkeypatch):
    """As the backend tests' fla_as_if_on_cuda: fla "installed" and "on CUDA", its pure-PyTorch
    references in place of its Triton kernels."""
    pytest.importorskip("fla")
    module = cores("attention/test_attention_backend.py")
    for target in (module.recurrent_core, module.layers_base, module.backends):
        monkeypatch.setattr(target, "fla_installed", lambda: True)
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(module.fla, "load_kernels", lambda device: module.reference_kernels())
    module.test_the_fla_path_follows_the_torch_one(fla_as_if_on_cuda=None, name=name)


ROTARY_TESTS = [
    ("models/test_positions.py", "test_every_variant_with_rope_matches_the_rotated_reference",
     {"causal": [False, True], "masked": [False, True]}),
    ("models/test_position_properties.py", "test_padding_changes_no_real_output_or_gradient",
     {"causal": [False, True], "kind": ["rope"]}),
]


@pytest.mark.parametrize("name", list(CORES))
@pytest.mark.parametrize(("path", "test", "grid"), ROTARY_TESTS,
                         ids=[t for _, t, _ in ROTARY_TESTS])
def test_the_rotary_tests_pass_on_cores_defined_here(cores, name, path, test, grid):
    run_grid(getattr(cores(path), test), name, grid)


GENERIC_TESTS = [
    ("attention/test_attention_exact.py", "test_matches_float64_reference",
     {"causal": [False, True], "masked": [False, True]}),
    ("attention/test_attention_exact.py", "test_float32_close_to_reference",
     {"causal": [False, True]}),
    ("attention/test_attention_exact.py", "test_padding_never_changes_real_outputs",
     {"causal": [False, True]}),
    ("attention/test_attention_exact.py", "test_causal_outputs_ignore_the_future", {}),
    ("attention/test_attention_exact.py", "test_recurrent_step_equals_parallel_causal",
     {"dtype": [torch.float32, torch.float64]}),
    ("attention/test_attention_exact.py", "test_gradcheck_float64", {"causal": [False, True]}),
    ("attention/test_attention_padding_grads.py", "test_nonfinite_padding_changes_no_gradient",
     {"which": ["q", "k", "v"], "causal": [False, True], "poison": ["nan", "inf"]}),
    ("attention/test_attention_padding_grads.py", "test_no_tokens_give_an_empty_output",
     {"causal": [False, True], "masked": [False, True]}),
    ("attention/test_attention_state.py", "test_split_forward_with_state_equals_whole",
     {"split": [13, 16]}),
    ("attention/test_attention_state.py", "test_returned_state_leaves_padded_tokens_out", {}),
    ("attention/test_attention_properties.py",
     "test_autocast_long_sequence_is_finite_and_close_to_fp32",
     {"causal": [False, True], "dtype": [torch.bfloat16, torch.float16]}),
    ("attention/test_attention_properties.py",
     "test_nan_and_inf_in_padded_positions_never_reach_real_tokens", {"causal": [False, True]}),
    ("attention/test_gated_variants.py", "test_recurrent_state_accumulates_in_fp32", {}),
]


def run_grid(function, name: str, grid: dict) -> None:
    """Call a generic test for the core `name` at every point of `grid` (its other parameters)."""
    axes = {(key,): [(value,) for value in values] for key, values in grid.items()}
    keys = list(axes)
    for combination in itertools.product(*(axes[key] for key in keys)):
        kwargs = {"name": name}
        for names, values in zip(keys, combination, strict=True):
            kwargs.update(zip(names, values, strict=True))
        try:
            function(**kwargs)
        except pytest.skip.Exception:
            continue
        except BaseException as error:
            raise AssertionError(f"{function.__name__}({kwargs}) failed: {error}") from error


@pytest.mark.parametrize("name", list(CORES))
@pytest.mark.parametrize(("path", "test", "grid"), GENERIC_TESTS,
                         ids=[f"{p.split('/')[-1][:-3]}::{t}" for p, t, _ in GENERIC_TESTS])
def test_the_generic_recurrence_tests_pass_on_cores_defined_here(cores, name, path, test, grid):
    run_grid(getattr(cores(path), test), name, grid)


def test_a_core_that_leaves_the_plumbing_to_the_base_accepts_it_from_its_config() -> None:
    """The config check reads a core's signature (training.config_checks.check_keys): a YAML
    with `backend: auto`, as every shipped core's has, must be accepted for a core whose
    __init__ does not name backend or rotary."""
    config = OmegaConf.create({"_target_": f"{__name__}.PlainCore", "_partial_": True,
                               "head_dim": 8, "causal": True, "backend": "auto"})
    check_keys(config, "attention")
    assert {"backend", "rotary"} <= set(inspect.signature(PlainCore).parameters)
