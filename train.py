"""Train a Transformer classifier: `python train.py attention=performer data=listops`.

Configs live in conf/ (Hydra); the work is done by linarena.training.run.train.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

import hydra
from omegaconf import DictConfig

# paths.root_dir (and so the default data/ and outputs/ folders) is this repository.
os.environ.setdefault("LINARENA_ROOT", str(Path(__file__).resolve().parent))


@hydra.main(config_path="conf", config_name="config", version_base="1.3")
def main(cfg: DictConfig) -> float:
    # Imported here so that --help and config-composition errors do not wait for torch to load.
    from linarena.quiet import silence_library_noise
    from linarena.training.entry import run_job

    silence_library_noise(resuming=cfg.get("ckpt_path") is not None)
    return run_job(cfg)


def write_resume_files_apart(argv: list[str]) -> None:
    """A resumed run (ckpt_path=...) writes its own Hydra files to .hydra/resume/, so that the
    run's .hydra/config.yaml and overrides.yaml, the record of how it started, stay untouched."""
    resuming = any(
        a.startswith("ckpt_path=") and a not in ("ckpt_path=null", "ckpt_path=") for a in argv
    )
    if resuming and not any(a.startswith("hydra.output_subdir=") for a in argv):
        argv.append("hydra.output_subdir=.hydra/resume")


if __name__ == "__main__":
    write_resume_files_apart(sys.argv)
    main()
