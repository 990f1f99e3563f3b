"""Helpers for radixkv's own tests and benchmarks (need the `test` or `bench` extra)."""
