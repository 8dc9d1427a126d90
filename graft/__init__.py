"""GRAFT: a typed facet graph over papers and retrieval over it.

`graft` is the query-time engine and the shared model. It imports none of `graphbuild`,
`training`, `eval` or `cli`. `Index` is imported lazily so that light modules (prompts, DocIDs)
load without the table stack.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from graft.errors import GraftError, IndexFormatError, InputValidationError
from graft.facets import FACETS

if TYPE_CHECKING:
    from graft.index import Index

__version__ = "0.1.0"

__all__ = ["FACETS", "GraftError", "Index", "IndexFormatError", "InputValidationError", "__version__"]


def __getattr__(name: str) -> Any:
    if name == "Index":
        from graft.index import Index

        return Index
    raise AttributeError(f"module 'graft' has no attribute {name!r}")
