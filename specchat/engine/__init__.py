"""The inference engine: models, sampling, plain and speculative decoding. Never imports a UI."""
