"""The facet-extractor interface and the factory that picks one by name."""

from __future__ import annotations

from collections.abc import Callable
from typing import Protocol

import polars as pl

from graft.facets import FacetItems

#: Extractors selectable with `graft build --extractor`.
EXTRACTORS = ("heuristic", "llm")


class FacetExtractor(Protocol):
    """Turns corpus rows into facet items, one `FacetItems` per row, every facet non-empty."""

    name: str

    def extract(
        self, papers: pl.DataFrame, *, progress: Callable[[int], None] | None = None
    ) -> list[FacetItems]:
        """Args:
            papers: corpus table (columns paper_id, title, abstract, full_text, ...).
            progress: called with the number of papers finished since the last call.
        Returns:
            one dict per row, in row order, with at least one item for each of `FACETS`.
        """
        ...

    def extract_counted(
        self, papers: pl.DataFrame, *, progress: Callable[[int], None] | None = None
    ) -> tuple[list[FacetItems], list[dict[str, int]]]:
        """`extract`, and each row's share of the per-paper counters of `stats()` (one dict per
        row), so that the counters of papers extracted in different runs add up."""
        ...

    def stats(self) -> dict[str, int]:
        """Counters for the manifest and the summary table (e.g. discarded LLM responses)."""
        ...
