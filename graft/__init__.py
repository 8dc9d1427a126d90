"""GRAFT: a typed facet graph over papers and retrieval over it.

`graft` is the query-time engine and the shared model. It imports none of `graphbuild`,
`training`, `eval` or `cli`.
"""

from __future__ import annotations

from graft.errors import GraftError, IndexFormatError, InputValidationError
from graft.facets import FACETS
from graft.index import Index

__version__ = "0.1.0"

__all__ = ["FACETS", "GraftError", "Index", "IndexFormatError", "InputValidationError", "__version__"]
