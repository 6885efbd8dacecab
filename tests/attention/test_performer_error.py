"""The inputs of the Performer approximation-error benchmark do what its table claims."""

from __future__ import annotations

import torch
import torch.nn.functional as F

from linarena.analysis.performer_error import (
    approximation_errors,
    clustered_inputs,
    random_inputs,
)
from linarena.attention import PerformerAttention


def softmax_weights(q, k):
    return torch.softmax(q @ k.transpose(-1, -2) / q.shape[-1] ** 0.5, dim=-1)


def test_clustered_inputs_make_attention_favour_the_own_cluster():
    g = torch.Generator().manual_seed(0)
    q, k, v = clustered_inputs((1, 2, 512, 64), scale=1.0, generator=g, clusters=16)
    # Keys of one cluster share their value: same value <=> same cluster.
    same_cluster = (v[..., :, None, :] == v[..., None, :, :]).all(dim=-1)  # key x key
    # A query's cluster is the cluster of the key nearest to it.
    nearest_key = torch.cdist(q, k).argmin(dim=-1)  # (1, 2, n)
    own = torch.gather(same_cluster, 2, nearest_key[..., None].expand(-1, -1, -1, 512))
    mass_on_own_cluster = (softmax_weights(q, k) * own).sum(dim=-1).mean()
    assert mass_on_own_cluster > 0.8  # one cluster in 16 holds ~1/16 of the keys
    exact = F.scaled_dot_product_attention(q, k, v)
    assert (exact - v.mean(dim=2, keepdim=True)).abs().mean() > 0.5  # far from uniform


def test_random_inputs_make_attention_nearly_uniform():
    g = torch.Generator().manual_seed(0)
    q, k, _ = random_inputs((1, 2, 512, 64), scale=0.5, generator=g)
    assert softmax_weights(q, k).max() < 10 / 512  # no key gets more than 10x its share


def test_errors_leave_the_module_as_it_was():
    performer = PerformerAttention(8, num_features=16, seed=0, redraw_interval=1).train()
    before = performer.projection.clone()
    rows = approximation_errors(performer, length=32, heads=1, scales=[0.5],
                                device=torch.device("cpu"), with_performer_pytorch=False)
    assert [row["inputs"] for row in rows] == ["random", "clustered"]
    assert all(row["performer"] > 0 for row in rows)
    assert torch.equal(performer.projection, before)
    assert performer.training and performer.training_calls == 0
