"""Leaf readers of on-disk formats (no specchat imports but errors): the GGUF header reader."""
