"""Models: the Transformer classifier used for every task and attention variant."""

from linarena.models.transformer import SequenceTooLongError, TransformerClassifier

__all__ = ["SequenceTooLongError", "TransformerClassifier"]
