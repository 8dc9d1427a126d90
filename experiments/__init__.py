"""Reproducible experiments, each run from the repository root as `python -m experiments.NAME`; each
prints a table and writes it as Markdown + JSON into docs/results/ (`experiments.common`)."""
