"""linarena: softmax, elu+1, Performer and cosFormer attention compared on Long Range Arena."""

__version__ = "0.1.0"
