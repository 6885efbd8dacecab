"""Build, download or generate a task's data ahead of training, with progress bars.

    python scripts/prepare_data.py data=listops
    python scripts/prepare_data.py data=pathfinder data.num_train=16000
    python scripts/prepare_data.py experiment=lra/text

Uses the same conf/ as train.py, so data.* overrides and experiment presets mean the same thing:
what this prepares is exactly what `python train.py` with the same arguments will load from the
cache under paths.data_dir.
"""

from __future__ import annotations

import logging
import os
import sys
import time
from pathlib import Path

import hydra
from omegaconf import DictConfig

REPO_ROOT = Path(__file__).resolve().parent.parent
# A variable set to an empty string means unset, as in the shell idiom `VAR= command`: Hydra would
# resolve an empty LINARENA_DATA_DIR to the working directory, an empty LINARENA_ROOT to /data.
for _name in ("LINARENA_DATA_DIR", "LINARENA_ROOT"):
    if os.environ.get(_name) == "":
        del os.environ[_name]
# paths.root_dir falls back to the working directory; anchor it at the repository instead, as
# train.py does, so that data lands in <repo>/data wherever this is run from.
os.environ.setdefault("LINARENA_ROOT", str(REPO_ROOT))

log = logging.getLogger("prepare_data")


@hydra.main(config_path=str(REPO_ROOT / "conf"), config_name="prepare_data",
            version_base="1.3")
def main(cfg: DictConfig) -> None:
    from hydra.core.hydra_config import HydraConfig
    from hydra.errors import InstantiationException

    from linarena.errors import LinarenaError

    start = time.perf_counter()
    try:
        datamodule = hydra.utils.instantiate(cfg.data)
        datamodule.prepare_data()
        datamodule.setup()
    except (LinarenaError, InstantiationException) as error:
        # The message says what is wrong and how to fix it; a traceback would only bury it.
        # A constructor's own message (which names the data.* key) is the cause Hydra wraps.
        cause = error.__cause__ if isinstance(error, InstantiationException) else None
        print(f"error: {cause or error}", file=sys.stderr)
        sys.exit(1)
    sizes = ", ".join(f"{split} {len(dataset)}" for split, dataset in datamodule.datasets.items())
    log.info(
        "data=%s ready in %.1f s: %s examples; vocab %d, %d classes, max_length %d; cache %s",
        HydraConfig.get().runtime.choices.data,
        time.perf_counter() - start,
        sizes,
        datamodule.vocab_size,
        datamodule.num_classes,
        datamodule.max_length,
        datamodule.cache_path,
    )


if __name__ == "__main__":
    main()
