"""Compare training runs: accuracy against throughput and memory, per sweep, task and attention.

The logic and the full description are in linarena.analysis.compare (``--help`` lists the
options).

    python scripts/compare.py --runs outputs/
    python scripts/compare.py --runs outputs/ --sweep multiruns/2025-01-01_10-00-00 --published
    python scripts/compare.py --wandb my-team/linarena --filter task=text --filter tags=final
"""

from __future__ import annotations

import sys
from pathlib import Path

from linarena.analysis.compare import main

if __name__ == "__main__":
    sys.exit(main(default_out=Path(__file__).resolve().parents[1] / "outputs" / "compare"))
