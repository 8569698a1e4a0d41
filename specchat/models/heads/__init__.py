"""Heads trained on this machine for a GGUF target (Medusa heads, Kangaroo's adapter)."""
