"""Helpers for tests, benchmarks and the GPU check script (not used by the app itself)."""
