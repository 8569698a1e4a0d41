"""Model catalog, sources and GGUF files. No UI imports here."""
