"""`backend=auto|torch|fla` on every variant of conf/attention/: auto and torch agree on CPU,
fla is refused at construction where it cannot run (with the reason), a config check reports
it, the module records the backend a call ran on (backend_used); the recurrences' fla path
against the torch one, on CPU with fla's own pure-PyTorch references standing in for its
Triton kernels, and on CUDA with the kernels themselves."""

from __future__ import annotations

import pytest
import torch
from helpers.attention import (
    HEAD_DIM,
    HEADS,
    LAYER_VARIANTS,
    VARIANTS,
    TokenFromQ,
    build_layer,
    inputs,
    padding_mask,
)
from helpers.fla_reference import reference_kernels
from helpers.training import compose_config

from linarena.attention.engine import backend as backends
from linarena.attention.engine import backend as fla
from linarena.attention.layers import base as layers_base
from linarena.attention.recurrent import RecurrentAttention
from linarena.attention.recurrent import core as recurrent_core
from linarena.attention.variants import load_variant
from linarena.training import ConfigError
from linarena.training.config_checks import check_config


def build(name: str, causal: bool, backend: str, head_dim: int = HEAD_DIM) -> torch.nn.Module:
    """The module `attention=<name> attention.backend=<backend>` builds, seeded, a core that
    reads the token wrapped in TokenFromQ (as helpers.attention.build)."""
    factory = load_variant(name, {"max_length": 512, "num_heads": HEADS,
                                  "d_model": HEADS * head_dim})
    torch.manual_seed(0)
    attn = factory(head_dim=head_dim, causal=causal, backend=backend)
    return TokenFromQ(attn) if getattr(attn, "reads_token", False) else attn


def core(attn: torch.nn.Module) -> torch.nn.Module:
    return attn.core if isinstance(attn, TokenFromQ) else attn


def is_recurrent(name: str) -> bool:
    return isinstance(core(build(name, True, "torch")), RecurrentAttention)


RECURRENT = [name for name in VARIANTS if is_recurrent(name)]


@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("name", VARIANTS)
def test_auto_and_torch_give_identical_outputs_on_cpu(name, causal):
    q, k, v = (x.float().requires_grad_(True) for x in inputs(length=29))
    mask = padding_mask([29, 20], 29)
    results = []
    for backend in ("torch", "auto"):
        attn = build(name, causal, backend)
        assert core(attn).backend_used is None
        out = attn(q, k, v, mask)
        grads = torch.autograd.grad((out * torch.cos(out)).sum(), (q, k, v),
                                    materialize_grads=True)
        assert core(attn).backend_used == "torch"
        results.append((out, *grads))
    for a, b in zip(*results, strict=True):
        assert torch.equal(a, b)


def expected_refusal(name: str, causal: bool) -> str:
    """What backend='fla' is refused for on this machine, first reason first."""
    if not is_recurrent(name):
        return "has no kernel for it" if name in ("softmax", "swa") else "no kernel for feature-map"
    if not causal:
        return "no kernel for bidirectional attention"
    return "not installed" if not backends.fla_installed() else "CUDA device"


@pytest.mark.skipif(torch.cuda.is_available() and backends.fla_installed(),
                    reason="fla can run here: only the variants without a kernel are refused")
@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("name", VARIANTS)
def test_fla_is_refused_at_construction_where_it_cannot_run(name, causal):
    with pytest.raises(ValueError, match=expected_refusal(name, causal)) as error:
        build(name, causal, "fla")
    assert "backend='fla'" in str(error.value) and "backend=auto or torch" in str(error.value)


@pytest.mark.parametrize("name", ["softmax", "elu", "gla"])
def test_an_unknown_backend_is_refused(name):
    with pytest.raises(ValueError, match="backend must be one of auto, torch, fla; got 'triton'"):
        build(name, False, "triton")


def test_the_config_check_reports_a_refused_backend_at_once():
    with pytest.raises(ConfigError, match="no kernel for bidirectional attention"):
        check_config(compose_config(["attention=gla", "attention.backend=fla"]))
    with pytest.raises(ConfigError, match="no kernel for feature-map attention"):
        check_config(compose_config(["attention=elu", "attention.backend=fla"]))
    check_config(compose_config(["attention=gla", "attention.backend=torch"]))


@pytest.fixture
def fla_as_if_on_cuda(monkeypatch):
    """backend='fla' buildable here (fla "installed", "CUDA" at construction), with fla's
    pure-PyTorch references (tests/attention/test_ops_fla.py) in place of its Triton kernels."""
    pytest.importorskip("fla")
    monkeypatch.setattr(recurrent_core, "fla_installed", lambda: True)
    monkeypatch.setattr(layers_base, "fla_installed", lambda: True)
    monkeypatch.setattr(backends, "fla_installed", lambda: True)
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(fla, "load_kernels", lambda device: reference_kernels())


def relative_error(a: torch.Tensor, b: torch.Tensor) -> float:
    """|a - b| / |b|; where b is zero (the gradient of an input a core ignores), |a - b| itself:
    a zero is compared as zero, never divided by."""
    difference, size = (a.float() - b.float()).norm().item(), b.float().norm().item()
    return difference if size == 0 else difference / size


@pytest.mark.parametrize("name", RECURRENT)
def test_the_fla_path_follows_the_torch_one(fla_as_if_on_cuda, name):
    """The module's fla path (inputs in their own dtype, fla's layout, scale, gates, the
    denominator column, the state) against its torch path, on bf16 inputs as autocast gives."""
    q, k, v = (x.bfloat16().requires_grad_(True) for x in inputs(length=13))
    mask = padding_mask([13, 9], 13)
    results = []
    for backend in ("fla", "torch"):
        attn = build(name, True, backend)
        out, state = attn(q, k, v, mask, return_state=True)
        grads = torch.autograd.grad((out.float() * torch.cos(out.float())).sum(), (q, k, v),
                                    materialize_grads=True)
        assert core(attn).backend_used == backend
        results.append((out, state.state, *grads))
    errors = [relative_error(a, b) for a, b in zip(*results, strict=True)]
    # bf16 inputs to fla: ~1e-2; a wrong layout, scale or convention: ~1.
    assert max(errors) < 5e-2, f"relative errors (out, state, grads) {errors}"


def test_fla_refuses_a_dtype_it_has_no_kernel_for(fla_as_if_on_cuda):
    q, k, v = inputs(length=5, dtype=torch.float32)
    with pytest.raises(ValueError, match=r"no kernel for torch\.float32 inputs"):
        build("deltanet", True, "fla")(q, k, v)
    with pytest.raises(ValueError, match=r"no kernel for torch\.float64 inputs"):
        build("gla", True, "fla")(q.double(), k.double(), v.double())


def fla_layers() -> list[str]:
    """The whole layers whose recurrence has an fla kernel (buildable with backend='fla')."""
    return [name for name in LAYER_VARIANTS if _builds_with_fla(name)]


def _builds_with_fla(name: str) -> bool:
    factory = load_variant(name, {"max_length": 64, "num_heads": 2, "d_model": 32})
    try:
        with pytest.MonkeyPatch.context() as patch:
            patch.setattr(backends, "fla_installed", lambda: True)
            patch.setattr(torch.cuda, "is_available", lambda: True)
            factory(causal=True, backend="fla")
    except (ConfigError, ValueError):  # refused at construction: no fla kernel for it
        return False
    return True


@pytest.mark.parametrize("name", fla_layers())
def test_a_layers_fla_path_follows_its_torch_path_and_refuses_what_fla_cannot_run(
    fla_as_if_on_cuda, name,
):
    """The one rule of every core and layer (engine.backend.runs_fla): bf16-mixed inputs run fla's
    kernels (here its references) and agree with the torch path; float64 is refused."""
    x = torch.randn(2, 11, 32, generator=torch.Generator().manual_seed(0))
    mask = padding_mask([11, 7], 11)
    results = []
    for backend in ("fla", "torch"):
        layer = build_layer(name, True, d_model=32, num_heads=2)
        layer.backend = backend
        with torch.autocast("cpu", dtype=torch.bfloat16):
            out = layer(x, mask)
        assert layer.backend_used == backend
        results.append(out.float())
    assert relative_error(*results) < 5e-2  # bf16 into fla: ~1e-2; a wrong convention: ~1
    layer = build_layer(name, True, d_model=32, num_heads=2)
    layer.backend = "fla"
    with pytest.raises(ValueError, match=r"no kernel for torch\.float64 inputs"):
        layer.double()(x.double(), mask)


def test_auto_runs_torch_off_cuda_even_where_fla_is_installed(fla_as_if_on_cuda):
    attn = build("gla", True, "auto")
    attn(*(x.bfloat16() for x in inputs(length=5)))
    assert core(attn).backend_used == "torch"


@pytest.mark.skipif(not (torch.cuda.is_available() and backends.fla_installed()),
                    reason="fla's Triton kernels need CUDA and fla-core")
@pytest.mark.parametrize("name", RECURRENT)
def test_fla_and_torch_agree_on_cuda(name):
    g = torch.Generator(device="cuda").manual_seed(0)
    shape = (2, HEADS, 300, 64)  # 300: not a multiple of the chunks
    q, k, v = (torch.randn(*shape, generator=g, device="cuda").bfloat16().requires_grad_(True)
               for _ in range(3))
    results = []
    for backend in ("fla", "auto", "torch"):
        attn = build(name, True, backend, head_dim=64).cuda()
        out = attn(q, k, v)
        grads = torch.autograd.grad((out.float() * torch.cos(out.float())).sum(), (q, k, v),
                                    materialize_grads=True)
        assert core(attn).backend_used == ("torch" if backend == "torch" else "fla")
        results.append((out, *grads))
    for fla_result in results[:2]:
        errors = [relative_error(a, b) for a, b in zip(fla_result, results[2], strict=True)]
        assert max(errors) < 5e-2, f"{name}: relative errors (out, grads) {errors}"
