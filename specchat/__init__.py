"""specchat: speculative decoding you can see, for local GGUF models."""

__version__ = "0.1.0"
