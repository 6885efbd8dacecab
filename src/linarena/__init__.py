"""linarena: softmax and linear attention variants (conf/attention/ lists them) compared on Long
Range Arena and MQAR."""

__version__ = "0.1.0"
