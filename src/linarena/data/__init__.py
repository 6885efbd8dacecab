"""Long Range Arena tasks, associative recall and your own sequences as LightningDataModules.

Each module reads official files when present and generates or downloads what it can otherwise;
see data/README.md for the layouts and `python scripts/prepare_data.py data=<task>`.
"""

from linarena.data.base import TaskDataModule
from linarena.data.errors import (
    DataConfigError,
    DataDirError,
    DataError,
    DataFormatError,
    DataNotFoundError,
)
from linarena.data.image import ImageDataModule
from linarena.data.listops import ListOpsDataModule
from linarena.data.mqar import MQARDataModule, MQARMixtureDataModule
from linarena.data.pathfinder import PathfinderDataModule
from linarena.data.retrieval import RetrievalDataModule
from linarena.data.sequences import SequencesDataModule
from linarena.data.spec import TaskSpec
from linarena.data.text import TextDataModule

__all__ = [
    "DataConfigError",
    "DataDirError",
    "DataError",
    "DataFormatError",
    "DataNotFoundError",
    "ImageDataModule",
    "ListOpsDataModule",
    "MQARDataModule",
    "MQARMixtureDataModule",
    "PathfinderDataModule",
    "RetrievalDataModule",
    "SequencesDataModule",
    "TaskDataModule",
    "TaskSpec",
    "TextDataModule",
]
