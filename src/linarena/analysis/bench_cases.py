"""One benchmark case: its spec (CaseSpec: attention, length, what, batch, device, dtype,
threads, model shape) and the callables it times: a full training step of the classifier, or the
attention module alone (the same model's step under the self-pretraining objective is
analysis.bench_pretrain's). bench_measure measures a case.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Callable
from contextlib import AbstractContextManager, nullcontext
from functools import partial
from pathlib import Path

import torch
import torch.nn.functional as F

from linarena.attention.layers import AttentionLayer, build_attention
from linarena.attention.variants import load_variant
from linarena.models import TransformerClassifier

WHATS = ("model_step", "attention_fwd_bwd")
# Not in WHATS, which is what benchmark_model.py times by default: scripts/benchmark_pretrain.py
# times it beside model_step (it needs the task's vocabulary and masking fraction).
PRETRAIN_STEP = "pretrain_step"
DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16}


@dataclasses.dataclass(frozen=True)
class ModelShape:
    """Size of the benchmarked classifier (sequence classification): bidirectional with CLS
    pooling, or with `causal` causal attention and mean pooling (the model of pretrain=lm)."""

    num_layers: int
    d_model: int
    num_heads: int
    mlp_dim: int
    vocab_size: int = 257  # bytes shifted by +1, plus the pad id 0
    num_classes: int = 2
    dropout: float = 0.1
    causal: bool = False


# The LRA byte-level text model (REFERENCE section 2) and a tiny one for tests.
TEXT_MODEL = ModelShape(num_layers=4, d_model=256, num_heads=4, mlp_dim=1024)
TINY_MODEL = ModelShape(num_layers=1, d_model=32, num_heads=2, mlp_dim=64)


@dataclasses.dataclass(frozen=True)
class CaseSpec:
    """Everything needed to measure one attention x length x what case."""

    attention: str
    length: int
    what: str
    batch: int
    device: str
    dtype: str
    threads: int  # torch's CPU threads (intra-op)
    warmup: int
    repeats: int
    shape: ModelShape
    conf_dir: str
    backend: str = "auto"  # attention.backend (linarena.attention.engine.backend)
    # pretrain_step of a bidirectional model: the fraction of real tokens masked (the task's).
    mask_fraction: float | None = None

    def to_json(self) -> str:
        return json.dumps(dataclasses.asdict(self))

    @classmethod
    def from_json(cls, text: str) -> CaseSpec:
        fields = json.loads(text)
        fields["shape"] = ModelShape(**fields["shape"])
        return cls(**fields)


def model_config(spec: CaseSpec) -> dict:
    """The ``model`` config keys of the benchmarked classifier (conf/model/transformer.yaml)."""
    shape = spec.shape
    return {
        "d_model": shape.d_model, "num_heads": shape.num_heads, "num_layers": shape.num_layers,
        "mlp_dim": shape.mlp_dim, "dropout": shape.dropout, "max_length": spec.length,
        "pooling": "mean" if shape.causal else "cls", "positions": "sinusoidal",
        "causal": shape.causal,
    }


def load_attention_partial(spec: CaseSpec) -> Callable[..., torch.nn.Module]:
    """The attention factory that ``attention=<spec.attention>`` gives in training.

    Built from ``<conf_dir>/attention/<name>.yaml`` so that the benchmark measures the settings a
    training run uses; its interpolations of ``model.*`` keys (e.g. cosFormer's max_length)
    resolve against :func:`model_config`. Returns ``(head_dim=..., causal=...) -> nn.Module``.
    """
    factory = load_variant(spec.attention, model_config(spec), Path(spec.conf_dir))
    return partial(factory, backend=spec.backend)


def build_classifier(spec: CaseSpec) -> torch.nn.Module:
    """The classifier of ``spec.shape`` with ``spec.attention`` in every layer, on the device."""
    shape = spec.shape
    model = TransformerClassifier(
        vocab_size=shape.vocab_size,
        num_classes=shape.num_classes,
        head_kind="sequence",
        attention=load_attention_partial(spec),
        **model_config(spec),
    )
    return model.to(spec.device).train()


def _autocast(spec: CaseSpec) -> AbstractContextManager:
    """bf16 autocast when asked for (as a bf16-mixed training run does), else nothing."""
    if spec.dtype == "float32":
        return nullcontext()
    return torch.autocast(device_type=torch.device(spec.device).type, dtype=DTYPES[spec.dtype])


def make_model_step(spec: CaseSpec) -> tuple[Callable[[], None], torch.nn.Module]:
    """One training step on random full-length byte sequences: forward, loss, backward, AdamW;
    and the model it trains."""
    model = build_classifier(spec)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4)
    generator = torch.Generator().manual_seed(0)
    tokens = torch.randint(1, spec.shape.vocab_size, (spec.batch, spec.length), generator=generator)
    labels = torch.randint(0, spec.shape.num_classes, (spec.batch,), generator=generator)
    tokens, labels = tokens.to(spec.device), labels.to(spec.device)
    mask = torch.ones_like(tokens, dtype=torch.bool)

    def step() -> None:
        optimizer.zero_grad(set_to_none=True)
        with _autocast(spec):
            logits = model(tokens, mask)
        loss = F.cross_entropy(logits.float(), labels)
        loss.backward()
        optimizer.step()

    return step, model


def make_attention_fwd_bwd(spec: CaseSpec) -> tuple[Callable[[], None], torch.nn.Module]:
    """Forward and backward of one attention module with the model's head shapes, and the
    module.

    A core gets q, k, v: (batch, num_heads, length, d_model // num_heads), in the compute dtype
    (as the model's projections produce them under autocast), and the token x if it reads it;
    a whole layer (linarena.attention.layers) gets x (batch, length, d_model) alone, since its
    projections are its own. The mask marks every token as real.
    """
    shape = spec.shape
    head_dim = shape.d_model // shape.num_heads
    attention = build_attention(load_attention_partial(spec), head_dim, causal=False)
    attention = attention.to(spec.device).train()
    generator = torch.Generator().manual_seed(0)
    dtype = DTYPES[spec.dtype]

    def random(*size: int, grad: bool = False) -> torch.Tensor:
        tensor = torch.randn(size, generator=generator).to(device=spec.device, dtype=dtype)
        return tensor.requires_grad_() if grad else tensor

    mask = torch.ones(spec.batch, spec.length, dtype=torch.bool, device=spec.device)
    x = random(spec.batch, spec.length, shape.d_model, grad=isinstance(attention, AttentionLayer))
    if isinstance(attention, AttentionLayer):
        inputs, grad_out = (x,), random(spec.batch, spec.length, shape.d_model)

        def call() -> torch.Tensor:
            return attention(x, mask)
    else:
        size = (spec.batch, shape.num_heads, spec.length, head_dim)
        inputs = tuple(random(*size, grad=True) for _ in range(3))
        grad_out = random(*size)
        # A core that computes gates from the token (reads_token) gets one, as in the model.
        token = {"x": x} if getattr(attention, "reads_token", False) else {}

        def call() -> torch.Tensor:
            return attention(*inputs, mask=mask, **token)

    def fwd_bwd() -> None:
        for tensor in inputs:
            tensor.grad = None
        with _autocast(spec):
            out = call()
        out.backward(grad_out.to(out.dtype))

    return fwd_bwd, attention
