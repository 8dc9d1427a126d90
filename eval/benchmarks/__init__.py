"""Benchmark scripts: each prints a table and writes Markdown + JSON into eval/results/."""
