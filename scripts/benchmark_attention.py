"""Time every attention variant of conf/attention/, forward and forward+backward, against
sequence length: see linarena.analysis.attention_benchmark (`--help` for the options)."""

from linarena.analysis.attention_benchmark import main

if __name__ == "__main__":
    main()
