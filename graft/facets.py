"""The four facet types and the per-paper facet record."""

from __future__ import annotations

from collections.abc import Mapping

from graft.errors import ConfigError

#: Facet types, in a fixed order used for every per-facet artefact and loop.
FACETS: tuple[str, ...] = ("problem", "method", "result", "contribution")

#: A paper's facets: facet name -> short bullet items (at least one per facet).
FacetItems = dict[str, list[str]]


def check_facet_items(items: Mapping[str, list[str]], *, where: str = "facets") -> FacetItems:
    """Validate one paper's facet items and return them as a plain dict in `FACETS` order.

    Raises:
        ValueError: a facet is missing, unknown, empty, or holds a non-string / blank item.
    """
    unknown = set(items) - set(FACETS)
    if unknown:
        raise ConfigError(f"{where}: unknown facet(s) {sorted(unknown)}; allowed: {list(FACETS)}")
    out: FacetItems = {}
    for facet in FACETS:
        values = items.get(facet)
        if not values:
            raise ConfigError(f"{where}: facet '{facet}' has no items (every facet needs at least one)")
        clean = []
        for v in values:
            if not isinstance(v, str) or not v.strip():
                raise ConfigError(f"{where}: facet '{facet}' holds a blank or non-string item: {v!r}")
            clean.append(" ".join(v.split()))
        out[facet] = clean
    return out
