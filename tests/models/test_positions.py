"""model.positions as a seam (linarena.models.positions), generic over the kinds of its registry:
absolute kinds embed at an offset as in the whole sequence and reach no attention; rotating kinds
give q . k scores that depend on i - j only, continue a causal state (a second forward or step())
from its position, and run in every attention variant in both modes against a float64 reference
(q and k rotated by the rotation matrices written here, then the quadratic or recurrent
reference); RoPE's base sets its angles; train.py runs with rope and none and records the kind;
an unknown kind is refused at once. Padding, for every relative kind: test_position_properties.py.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
import torch
from helpers.attention import (
    LINEAR_VARIANTS,
    VARIANTS,
    TokenFromQ,
    assert_close_float64,
    build,
    core,
    inputs,
    padding_mask,
    quadratic_reference,
    recurrence_reference,
)
from helpers.training import compose_config
from hydra.core.hydra_config import HydraConfig

from linarena.analysis.compare import main as compare
from linarena.attention.recurrent import RecurrentAttention
from linarena.attention.variants import load_variant
from linarena.models import TransformerClassifier
from linarena.models.positions import POSITIONS, Positions, RotaryPositions, build_positions
from linarena.training import ConfigError, train
from linarena.training.config_checks import check_config

KINDS = list(POSITIONS)
ROTATING = [kind for kind in KINDS if POSITIONS[kind].rotates]
# What a causal state is continued under: nothing in attention, or each rotating kind.
ATTENTION_KINDS = ["none", *ROTATING]


def positions(kind: str, d_model: int = 16, num_positions: int = 64) -> Positions:
    torch.manual_seed(0)
    return build_positions(kind, d_model, num_positions)


def rotary(kind: str) -> Positions | None:
    """What the model passes its attention cores under model.positions=kind."""
    made = positions(kind)
    return made if made.rotates else None


def rotation_matrix(position: int, head_dim: int, base: float = 10000.0) -> torch.Tensor:
    """RoFormer's R_p (eq. 15), float64: block diagonal, the pair (2i, 2i+1) turned by
    p * base^(-2i / head_dim); an odd last dimension left as it is."""
    matrix = torch.eye(head_dim, dtype=torch.float64)
    for i in range(head_dim // 2):
        angle = position * base ** (-2 * i / head_dim)
        pair = slice(2 * i, 2 * i + 2)
        matrix[pair, pair] = torch.tensor([[math.cos(angle), -math.sin(angle)],
                                           [math.sin(angle), math.cos(angle)]], dtype=torch.float64)
    return matrix


def reference_rotate(x: torch.Tensor, base: float = 10000.0) -> torch.Tensor:
    """x (batch, heads, n, d), token t multiplied by R_t of that base."""
    matrices = torch.stack([rotation_matrix(t, x.shape[-1], base) for t in range(x.shape[2])])
    return torch.einsum("nij,bhnj->bhni", matrices, x.double())


@pytest.mark.parametrize("kind", KINDS)
def test_every_kind_embeds_at_an_offset_as_in_the_whole_sequence(kind: str) -> None:
    made = positions(kind)
    x = torch.randn(2, 30, 16)
    whole = made.embed(x)
    assert whole.shape == x.shape
    for offset in (1, 13):
        torch.testing.assert_close(made.embed(x[:, offset:], offset), whole[:, offset:])
    if made.rotates or made.biases:  # applied once, in attention: nothing added here
        assert torch.equal(whole, x)
    else:  # and nothing rotated in attention
        q, k = torch.randn(2, 1, 3, 5, 8)
        rotated_q, rotated_k = made.rotate(q, k, torch.arange(5))
        assert torch.equal(rotated_q, q) and torch.equal(rotated_k, k)


@pytest.mark.parametrize("head_dim", [16, 7])  # 7: an odd last dimension, not rotated
@pytest.mark.parametrize("kind", ROTATING)
def test_rotated_scores_depend_only_on_the_distance(kind: str, head_dim: int) -> None:
    q, k = torch.randn(2, 2, 3, 12, head_dim, dtype=torch.float64)
    made = positions(kind)
    index = torch.arange(12)
    rotated_q, rotated_k = made.rotate(q, k, index)
    torch.testing.assert_close(rotated_q, reference_rotate(q), rtol=0, atol=1e-13)
    torch.testing.assert_close(rotated_k, reference_rotate(k), rtol=0, atol=1e-13)
    scores = rotated_q @ rotated_k.transpose(-1, -2)
    for shift in (1, 37, 1000):
        shifted_q, shifted_k = made.rotate(q, k, index + shift)
        torch.testing.assert_close(shifted_q @ shifted_k.transpose(-1, -2), scores)
    # Same position, same angle: the rotation is orthogonal; other positions move the scores.
    torch.testing.assert_close(scores.diagonal(dim1=-2, dim2=-1), (q * k).sum(-1))
    assert not torch.allclose(scores, q @ k.transpose(-1, -2))


@pytest.mark.parametrize("base", [500.0, 1e6])
def test_ropes_base_sets_its_angles_and_keeps_the_scores_relative(base: float) -> None:
    """theta_i = base^(-2i / head_dim): another base turns the pairs by other angles, as the
    rotation matrices of that base say, and q_i . k_j still depends on i - j only."""
    q, k = torch.randn(2, 2, 3, 12, 16, dtype=torch.float64)
    made, index = RotaryPositions(16, 64, base=base), torch.arange(12)
    rotated_q, rotated_k = made.rotate(q, k, index)
    torch.testing.assert_close(rotated_q, reference_rotate(q, base), rtol=0, atol=1e-13)
    torch.testing.assert_close(rotated_k, reference_rotate(k, base), rtol=0, atol=1e-13)
    assert not torch.allclose(rotated_q, positions("rope").rotate(q, k, index)[0])
    scores = rotated_q @ rotated_k.transpose(-1, -2)
    for shift in (1, 37, 1000):
        shifted_q, shifted_k = made.rotate(q, k, index + shift)
        torch.testing.assert_close(shifted_q @ shifted_k.transpose(-1, -2), scores)
    assert positions("rope").base == 10000.0  # the registry's rope: RoFormer's base


@pytest.mark.parametrize(("name", "relative"), [("taylor", True), ("elu", False)])
def test_rotating_before_the_map_keeps_the_weights_relative_for_maps_of_q_dot_k(name, relative):
    """linear.py's claim: Based's Taylor map is a function of q . k, so phi(q_i) . phi(k_j)
    after the rotation depends on i - j only; elu+1, elementwise, does not."""
    feature_map = build(name, causal=False).feature_map
    q, k = torch.randn(2, 1, 2, 10, 16, dtype=torch.float64)

    def weights(shift: int) -> torch.Tensor:
        rotated_q, rotated_k = positions("rope").rotate(q, k, torch.arange(10) + shift)
        return feature_map(rotated_q) @ feature_map(rotated_k).transpose(-1, -2)

    assert torch.allclose(weights(0), weights(123)) == relative


@pytest.mark.parametrize("causal", [False, True])
def test_a_map_reading_fewer_components_gets_a_rope_of_that_width(causal: bool) -> None:
    """Taylor reads the first feature_dim (16) components of a 64-wide head: those are rotated as
    a 16-wide RoPE, angles p * 10000^(-2i / 16), as in Based's layer (a 16-wide projection). A
    64-wide RoPE would turn them by its 8 fastest pairs only (down to 0.13 rad per token), leaving
    the map no slow pair to match a key's content across distance: with it the mixture's Taylor
    rows did not even learn the training lengths."""
    q, k, v = inputs(length=21, head_dim=64)
    attn = build("taylor", causal, head_dim=64, rotary=positions("rope", d_model=64))
    assert attn.feature_map.input_dim(64) == 16
    plain = build("taylor", causal, head_dim=64)

    def rotate_first_16(x: torch.Tensor) -> torch.Tensor:
        return torch.cat([reference_rotate(x[..., :16]), x[..., 16:].double()], dim=-1)

    expected = quadratic_reference(plain, rotate_first_16(q), rotate_first_16(k), v)
    assert_close_float64(attn(q, k, v), expected, 21 * 273)
    if causal:  # step() rotates the same components at the state's position
        _, state = attn(q[:, :, :9], k[:, :, :9], v[:, :, :9], return_state=True)
        stepped = []
        for t in range(9, 21):
            out, state = attn.step(q[:, :, t], k[:, :, t], v[:, :, t], state)
            stepped.append(out)
        assert_close_float64(torch.stack(stepped, dim=2), expected[:, :, 9:], 21 * 273)


@pytest.mark.parametrize("split", [13, 16])  # inside a chunk and on a chunk boundary
@pytest.mark.parametrize("kind", ATTENTION_KINDS)
@pytest.mark.parametrize("name", LINEAR_VARIANTS)
def test_a_state_continued_from_offset_p_gives_the_outputs_of_the_whole(name, kind, split):
    """A causal sequence's tokens from position p on, run by step() (or a second forward) from
    the state of its first p tokens, equal the forward pass's outputs at those positions: they
    are rotated at p, p + 1, ..., not from 0."""
    q, k, v = inputs(length=30, scale=2.0)
    attn = build(name, causal=True, max_length=30, rotary=rotary(kind))
    whole = attn(q, k, v)
    _, state = attn(q[:, :, :split], k[:, :, :split], v[:, :, :split], return_state=True)
    rest = attn(q[:, :, split:], k[:, :, split:], v[:, :, split:], initial_state=state)
    stepped = []
    for t in range(split, 30):
        out, state = attn.step(q[:, :, t], k[:, :, t], v[:, :, t], state)
        stepped.append(out)
    for tail in (rest, torch.stack(stepped, dim=2)):  # 30 tokens of up to 273 features
        assert_close_float64(tail, whole[:, :, split:], 30 * 273)


def rotated_reference(name: str, causal: bool, q, k, v, mask) -> torch.Tensor:
    """The float64 reference of the variant with RoPE: for a recurrence, its own q, k transforms
    (recurrence_inputs of the module built without positions), then q and k rotated, then the
    token-by-token recurrence; otherwise q and k rotated, then the quadratic reference."""
    plain = build(name, causal)  # the same parameters: same seed, no positions
    if not isinstance(core(plain), RecurrentAttention):
        return quadratic_reference(plain, reference_rotate(q), reference_rotate(k), v, mask)
    token = TokenFromQ.token(q) if isinstance(plain, TokenFromQ) else None
    r = core(plain).recurrence_inputs(q, k, v, token)
    r = r._replace(q=reference_rotate(r.q), k=reference_rotate(r.k))
    return recurrence_reference(core(plain), r, mask)


@pytest.mark.parametrize("masked", [False, True])
@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("name", VARIANTS)
def test_every_variant_with_rope_matches_the_rotated_reference(name, causal, masked) -> None:
    q, k, v = inputs()
    mask = padding_mask([37, 23], 37) if masked else None
    attn = build(name, causal, rotary=positions("rope"))
    out = attn(q, k, v, mask)
    expected = rotated_reference(name, causal, q, k, v, mask)
    real = mask[:, None, :, None].expand_as(out) if masked else torch.ones_like(out, dtype=bool)
    torch.testing.assert_close(out[real], expected[real], rtol=1e-7, atol=1e-9)


def make_model(attention: str, kind: str, **kwargs) -> TransformerClassifier:
    factory = load_variant(attention, {"max_length": 24, "d_model": 16, "num_heads": 2})
    torch.manual_seed(0)
    settings = {"vocab_size": 12, "num_classes": 5, "head_kind": "sequence", "d_model": 16,
                "num_heads": 2, "num_layers": 1, "mlp_dim": 32, "dropout": 0.0,
                "max_length": 24, "positions": kind}
    return TransformerClassifier(attention=factory, **(settings | kwargs)).eval()


@pytest.mark.parametrize("name", VARIANTS)
def test_a_kind_applied_in_the_embedding_reaches_no_attention(name: str) -> None:
    """The model hands its positions object to its attention cores only when the kind rotates q
    and k or biases the scores (test_position_properties.py checks that it does then)."""
    for kind in KINDS:
        if not POSITIONS[kind].rotates and not POSITIONS[kind].biases:
            core = make_model(name, kind).blocks[0].attention.core
            assert core.rotary is None and getattr(core, "score_bias", None) is None, kind


def test_a_learned_table_saved_before_the_seam_still_loads() -> None:
    model = make_model("softmax", "learned")
    state = model.state_dict()
    old = {("embedding.learned_positions.weight" if key == "embedding.positions.table.weight"
            else key): value.clone() for key, value in state.items()}
    torch.nn.init.zeros_(model.embedding.positions.table.weight)
    model.load_state_dict(old)
    assert torch.equal(model.embedding.positions.table.weight,
                       old["embedding.learned_positions.weight"])


@pytest.mark.parametrize("kind", ["rope", "alibi", "none"])
def test_train_py_runs_with_the_kind_and_records_it(kind: str, tmp_path: Path) -> None:
    """python train.py model.positions=<kind> debug=smoke, on the causal MQAR task."""
    run = tmp_path / "run"
    cfg = compose_config(["debug=smoke", "data=mqar", "logger=none", f"model.positions={kind}",
                          "trainer.enable_progress_bar=false",
                          f"paths.data_dir={tmp_path / 'data'}"], output_dir=run)
    try:
        train(cfg)
    finally:
        HydraConfig.instance().cfg = None
    summary = json.loads((run / "summary.json").read_text())
    assert summary["hparams"]["positions"] == kind
    assert 0 <= summary["metrics"]["test/acc"] <= 1


def test_the_comparison_table_shows_the_kind(tmp_path: Path) -> None:
    for number, kind in enumerate(["sinusoidal", "rope"]):
        folder = tmp_path / "runs" / str(number)
        folder.mkdir(parents=True)
        (folder / "summary.json").write_text(json.dumps({
            "task": "mqar", "attention": "elu", "seed": 1, "sweep": f"runs: model.positions={kind}",
            "hparams": {"positions": kind, "max_steps": 10},
            "metrics": {"test/acc": 0.5, "perf/tokens_per_sec": 100.0,
                        "perf/peak_memory_mb": 10.0, "model/params": 1000}}))
    out = tmp_path / "out"
    assert compare(["--runs", str(tmp_path / "runs"), "--out", str(out)]) == 0
    table = (out / "results.csv").read_text()
    assert ",sinusoidal," in table and ",rope," in table
    header, _, *rows = (out / "results.md").read_text().splitlines()
    assert "| positions |" in header and any("| rope |" in row for row in rows)


def test_an_unknown_kind_is_refused_at_once_listing_the_kinds() -> None:
    with pytest.raises(ConfigError, match=r"model\.positions='xpos'") as refused:
        check_config(compose_config(["model.positions=xpos"]))
    assert all(kind in str(refused.value) for kind in KINDS)
    with pytest.raises(ValueError, match=r"model\.positions='xpos'"):
        make_model("softmax", "xpos")


def test_a_kind_in_a_new_file_of_the_package_is_collected_with_no_registry_line(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import linarena.models.positions as package
    from linarena.models.positions.registry import collect_kinds

    (tmp_path / "halfway.py").write_text(
        "from linarena.models.positions.base import Positions\n\n\n"
        "class HalfwayPositions(Positions):\n"
        '    """A kind a contributor adds."""\n\n'
        '    name = "halfway"\n'
        '    description = "a test kind"\n')
    monkeypatch.setattr(package, "__path__", [*package.__path__, str(tmp_path)])
    kinds = collect_kinds()
    assert kinds["halfway"].__name__ == "HalfwayPositions"
    assert set(POSITIONS) < set(kinds)  # the shipped kinds, and the new one besides
