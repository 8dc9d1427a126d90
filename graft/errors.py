"""Exception classes. Messages name the bad value, the allowed values and the fix."""

from __future__ import annotations


class GraftError(Exception):
    """Base class of every error GRAFT raises on purpose."""


class InputValidationError(GraftError):
    """Input data (corpus records, LLM responses, query records) does not fit the schema."""


class IndexFormatError(GraftError):
    """An index directory is missing, incomplete or of an incompatible format version."""
