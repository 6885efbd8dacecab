"""model.compile: the model torch.compiled in place, so its weights, state_dict and checkpoints
are eager's and a run resumes with or without it."""

from __future__ import annotations

from pathlib import Path

import torch
from helpers.training import compose_config

from linarena.training.build import build_components
from linarena.training.checkpoint_identity import run_identity


def test_a_compiled_model_keeps_eager_weights_keys_and_outputs(tmp_path: Path) -> None:
    built = {}
    for backend in ("null", "aot_eager"):
        cfg = compose_config(["debug=fdr", "logger=none", f"model.compile={backend}"],
                             output_dir=tmp_path / backend)
        built[backend] = build_components(cfg, tmp_path / backend, None, "32-true").module.model
    eager, compiled = built["null"], built["aot_eager"]
    assert eager._compiled_call_impl is None and compiled._compiled_call_impl is not None
    assert eager.state_dict().keys() == compiled.state_dict().keys()  # no _orig_mod. prefix
    for name, tensor in eager.state_dict().items():
        assert torch.equal(tensor, compiled.state_dict()[name]), name  # same seed, same init
    tokens = torch.randint(1, 10, (2, 16))
    mask = torch.ones_like(tokens, dtype=torch.bool)
    eager.eval(), compiled.eval()
    with torch.no_grad():
        torch.testing.assert_close(compiled(tokens, mask), eager(tokens, mask))


def test_compiling_is_not_part_of_a_runs_identity(tmp_path: Path) -> None:
    """A checkpoint written eager resumes compiled and the other way round, and one written
    before model.compile existed resumes too."""
    # output_dir installs Hydra's runtime config, which the identity resolves: without it the
    # test would pass only after another test on its worker had installed one.
    eager, compiled = (run_identity(compose_config([f"model.compile={backend}"],
                                                   output_dir=tmp_path), "c0ffee")
                       for backend in ("null", "inductor"))
    assert eager == compiled and "model.compile" not in eager
