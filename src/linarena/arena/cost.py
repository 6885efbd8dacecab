"""What a variant costs: forward+backward time and memory against the length, beside softmax and
elu+1 timed in the same process, round-robin (analysis.bench_runner.run_round_robin, as
scripts/benchmark_attention.py times the published table), so the ratios are read within one
run; the crossover length against softmax; and the state it keeps per layer to decode.

A core is timed on q, k, v (batch, heads, n, head_dim), as the published attention benchmark
times the cores; a whole layer on x (batch, n, heads * head_dim), as benchmark_model.py times a
layer alone, its projections included. Beside a layer the baselines are timed as the block runs
them (models.blocks.MultiHeadAttention: their q, k, v and output projections around the core),
so the ratios compare like with like (timed_as "layer"); a hybrid, each of its variants.
"""

from __future__ import annotations

from argparse import Namespace
from collections.abc import Callable, Sequence
from functools import partial
from pathlib import Path

import pandas as pd
import torch

from linarena.analysis.attention_benchmark import prepare
from linarena.analysis.bench_runner import run_round_robin
from linarena.analysis.timing import peak_allocated_mb
from linarena.attention.layers import AttentionLayer, build_attention
from linarena.attention.variants import CONF_DIR, is_layer, is_linear, load_variant
from linarena.models import TransformerClassifier
from linarena.models.blocks import MultiHeadAttention
from linarena.studies.runs import model_state

BASELINES = ("softmax", "elu")


def build_timed(name: str, causal: bool, heads: int, head_dim: int, max_length: int,
                conf_dir: Path = CONF_DIR, as_layer: bool = False) -> torch.nn.Module:
    """Variant `name` as the benchmark times it: a core (head_dim=..., causal=...), or with
    `as_layer` the core inside the block's projections, or a whole layer of d_model
    heads * head_dim; built after the seed is set."""
    torch.manual_seed(0)  # Performer's seedless projection, learned maps
    model = {"max_length": max_length, "d_model": heads * head_dim, "num_heads": heads}
    factory = load_variant(name, model, conf_dir)
    if is_layer(name, conf_dir):
        return build_attention(factory, head_dim, causal)
    core = factory(head_dim=head_dim, causal=causal)
    return MultiHeadAttention(heads * head_dim, heads, core) if as_layer else core


def _prepare_layer(layer: torch.nn.Module, length: int, args: Namespace
                   ) -> tuple[Callable, Callable, float]:
    """As attention_benchmark.prepare, for a layer on x (batch, length, d_model)."""
    x = torch.randn(args.batch, length, args.heads * args.head_dim, requires_grad=True)

    def forward() -> None:
        with torch.no_grad():
            layer(x, None)

    def run_forward_backward() -> None:
        layer(x, None).sum().backward()

    def forward_backward() -> None:
        x.grad = None
        run_forward_backward()

    for _ in range(max(args.warmup, 1)):
        forward()
        forward_backward()
    return forward, forward_backward, peak_allocated_mb(run_forward_backward, args.device)


def time_variants(parts: Sequence[str], lengths: Sequence[int], causal: bool = False,
                  heads: int = 8, head_dim: int = 64, repeats: int = 5,
                  max_seconds: float = 30.0, conf_dir: Path = CONF_DIR) -> pd.DataFrame:
    """fwd and fwd+bwd ms and peak MB of `parts` and the BASELINES at each length, one
    round-robin run on CPU in fp32, batch 1: the columns of run_round_robin's rows, and
    timed_as: "layer" when a part is a whole layer (every variant then runs on x, a core inside
    the block's projections), else "core"."""
    names = list(dict.fromkeys([*BASELINES, *parts]))
    as_layer = any(is_layer(name, conf_dir) for name in parts)
    modules = {name: build_timed(name, causal, heads, head_dim, max(lengths),
                                 conf_dir if name in parts else CONF_DIR, as_layer)
               for name in names}
    args = Namespace(batch=1, heads=heads, head_dim=head_dim, device=torch.device("cpu"),
                     dtype="fp32", warmup=1)

    def prepare_case(name: str, length: int):
        module = modules[name]
        if isinstance(module, AttentionLayer | MultiHeadAttention):
            return _prepare_layer(module, length, args)
        return prepare(module, length, args)

    linear = {name: is_linear(name, conf_dir if name in parts else CONF_DIR) for name in names}
    fields = {"causal": causal, "heads": heads, "head_dim": head_dim, "device": "cpu",
              "dtype": "fp32", "threads": torch.get_num_threads(),
              "timed_as": "layer" if as_layer else "core"}
    rows = run_round_robin(linear, list(lengths), prepare_case, repeats, args.device,
                           max_seconds, fields)
    return pd.DataFrame(rows)


def crossover(times: pd.DataFrame, name: str, baseline: str = "softmax") -> int | None:
    """The shortest measured length from which `name` is faster (fwd+bwd) than `baseline` at
    every longer measured length; None when it is not faster at the longest."""
    ok = times[times["status"] == "ok"].pivot(index="length", columns="variant",
                                               values="fwd_bwd_ms")
    if name not in ok or baseline not in ok or name == baseline:
        return None
    both = ok[[name, baseline]].dropna().sort_index()
    faster = both[name] < both[baseline]
    found = None
    for length in reversed(both.index):
        if not faster[length]:
            break
        found = int(length)
    return found


def ratios(times: pd.DataFrame, name: str) -> pd.DataFrame:
    """Per length: the variant's fwd+bwd ms and peak MB, softmax's time over it and its time
    over elu+1's (the published benchmark's ratios), and its memory over elu+1's."""
    ok = times[times["status"] == "ok"]
    ms = ok.pivot(index="length", columns="variant", values="fwd_bwd_ms")
    mb = ok.pivot(index="length", columns="variant", values="peak_memory_mb")
    table = pd.DataFrame({"length": ms.index})
    table["ms"] = ms.get(name, pd.Series(dtype=float)).reindex(ms.index).to_numpy()
    table["peak_mb"] = mb.get(name, pd.Series(dtype=float)).reindex(ms.index).to_numpy()
    for baseline in BASELINES:
        table[f"{baseline}_ms"] = ms.get(baseline).reindex(ms.index).to_numpy()
    table["softmax_over_variant"] = table["softmax_ms"] / table["ms"]
    table["variant_over_elu"] = table["ms"] / table["elu_ms"]
    table["memory_over_elu"] = table["peak_mb"] / mb.get("elu").reindex(ms.index).to_numpy()
    return table


def state_per_layer(parts: Sequence[str], d_model: int, num_heads: int, length: int,
                    conf_dir: Path = CONF_DIR) -> tuple[int, str]:
    """(numbers, "recurrent" or "kv_cache") a causal model with one layer of each of `parts`
    keeps per sequence after `length` tokens (studies.runs.model_state: the state-size
    study's count), at this width and heads."""
    model = {"max_length": length, "d_model": d_model, "num_heads": num_heads}
    factories = [partial(load_variant(name, model, conf_dir)) for name in parts]
    classifier = TransformerClassifier(
        vocab_size=2, num_classes=2, head_kind="token", attention=factories, d_model=d_model,
        num_heads=num_heads, num_layers=len(parts), mlp_dim=d_model, max_length=length,
        positions="none", causal=True)
    return model_state(classifier, length)
