"""Exception classes. Messages name the bad value, the allowed values and the fix."""

from __future__ import annotations


class GraftError(Exception):
    """Base class of every error GRAFT raises on purpose."""


class InputValidationError(GraftError):
    """Input data (corpus records, LLM responses, query records) does not fit the schema."""


class IndexFormatError(GraftError):
    """An index directory is missing, incomplete or of an incompatible format version."""


class ConfigError(GraftError, ValueError):
    """A value given to GRAFT is out of range or of the wrong type: a setting (build, training, query,
    survey) or an argument."""


class QueryError(ConfigError):
    """A query cannot be asked as given: a bad setting (`graft.query.QueryConfig`), a bad query
    record, or a combination the retrievers do not answer."""
