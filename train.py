"""Train a Transformer classifier: `python train.py attention=performer data=listops`.

Configs live in conf/ (Hydra); the work is done by linarena.training.run.train.
"""

from __future__ import annotations

import os
from pathlib import Path

import hydra
from omegaconf import DictConfig, OmegaConf

RESUME_SUBDIR = ".hydra/resume"


def hydra_output_subdir(ckpt_path: str | None, output_dir: str) -> str:
    """Where Hydra writes a job's own config files (conf/hydra/default.yaml: output_subdir). A
    resumed run (ckpt_path set, or the job of a sweep run again that continues its run:
    linarena.training.sweep_resume) writes them to .hydra/resume/, so that the run's
    .hydra/config.yaml and overrides.yaml, the record of how it started, stay untouched. So
    does a new run aimed at a folder that already holds a run (or a finished job skipped): it
    writes them to a folder of their own, which the refusal (or the skip) removes
    (linarena.run_lock)."""
    from linarena.run_lock import REFUSED_HYDRA_SUBDIR, existing_run, is_other_rank
    from linarena.training.sweep_resume import RESTART, RESUME, job_state

    state = job_state(Path(output_dir)) if ckpt_path is None else None
    if ckpt_path is not None or state == RESUME:
        return RESUME_SUBDIR
    if state == RESTART:
        return ".hydra"
    if not is_other_rank() and existing_run(Path(output_dir)):
        return REFUSED_HYDRA_SUBDIR
    return ".hydra"


@hydra.main(config_path="conf", config_name="config", version_base="1.3")
def main(cfg: DictConfig) -> float:
    # Imported here so that --help and config-composition errors do not wait for torch to load.
    from linarena.quiet import silence_library_noise
    from linarena.training.entry import run_job

    silence_library_noise(resuming=cfg.get("ckpt_path") is not None)
    return run_job(cfg)


if __name__ == "__main__":
    from linarena.run_folder_names import RESOLVER, run_folder_name
    from linarena.training.environment import normalise_environment

    # Before Hydra composes the config: an empty LINARENA_DATA_DIR means unset, not "here".
    normalise_environment()
    # paths.root_dir (and so the default data/ and outputs/ folders) is this repository.
    os.environ.setdefault("LINARENA_ROOT", str(Path(__file__).resolve().parent))
    OmegaConf.register_new_resolver("linarena.hydra_output_subdir", hydra_output_subdir)
    OmegaConf.register_new_resolver(RESOLVER, run_folder_name)
    main()
