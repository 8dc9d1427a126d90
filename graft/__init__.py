"""GRAFT: a typed facet graph over papers and retrieval over it.

`graft` is the query-time engine and the shared model: the index (`graft.index`), the query front
door (`graft.query`: `QueryConfig`, `Searcher`), and what both the build and queries outside the
corpus use (`graft.encoder`, `graft.extract`, `graft.edges`, `graft.citations`). It imports none of
`graphbuild`, `training`, `eval` or `cli` (tests/test_layout.py). `Index`, `QueryConfig` and
`Searcher` are imported lazily so that light modules (prompts, DocIDs) load without the table stack.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from graft.errors import ConfigError, GraftError, IndexFormatError, InputValidationError, QueryError
from graft.facets import FACETS

if TYPE_CHECKING:
    from graft.index import Index
    from graft.query import QueryConfig, Searcher

__version__ = "0.1.0"

__all__ = ["FACETS", "ConfigError", "GraftError", "Index", "IndexFormatError", "InputValidationError", "QueryConfig",
           "QueryError", "Searcher", "__version__"]


def __getattr__(name: str) -> Any:
    if name == "Index":
        from graft.index import Index

        return Index
    if name in ("QueryConfig", "Searcher"):
        import graft.query

        return getattr(graft.query, name)
    raise AttributeError(f"module 'graft' has no attribute {name!r}")
