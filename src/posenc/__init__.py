"""posenc: positional encodings for transformers."""

__version__ = "0.1.0"
