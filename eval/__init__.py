"""Splits, metrics, baselines, experiment runner and benchmarks."""
