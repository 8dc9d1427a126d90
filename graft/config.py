"""Helpers shared by the per-stage config dataclasses."""

from __future__ import annotations

import dataclasses
import functools
import math
import types
import typing
from typing import Any, TypeVar

from graft.errors import ConfigError
from graft.redact import redact

T = TypeVar("T")


def config_from_dict(cls: type[T], data: dict[str, Any]) -> T:
    """Build dataclass `cls` from `data`; unknown keys are an error naming the allowed ones."""
    allowed = {f.name for f in dataclasses.fields(cls)}  # type: ignore[arg-type]
    unknown = sorted(set(data) - allowed)
    if unknown:
        raise ConfigError(f"{cls.__name__}: unknown key(s) {unknown}; allowed: {sorted(allowed)}")
    return cls(**data)


def config_to_dict(obj: Any) -> dict[str, Any]:
    """A config dataclass as the plain dict that manifests, survey.json and training records hold,
    and that reruns compare against them: a password in any URL of it is replaced by `***`
    (`graft.redact`), so no record holds one."""
    return redact(dataclasses.asdict(obj))


def is_whole(value: Any) -> bool:
    """An int and not a bool (`True` is an int to Python, never a count to a user)."""
    return isinstance(value, int) and not isinstance(value, bool)


def is_number(value: Any) -> bool:
    """A finite int or float, not a bool (NaN and infinity pass every `<` test the wrong way)."""
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


#: What each checked annotation accepts, and how a problem names it.
_KINDS: dict[Any, tuple[Any, str]] = {
    int: (is_whole, "a whole number"),
    float: (is_number, "a finite number"),
    bool: (lambda v: isinstance(v, bool), "True or False"),
    str: (lambda v: isinstance(v, str), "a string"),
    list[str]: (lambda v: isinstance(v, (list, tuple)) and all(isinstance(x, str) for x in v),
                "a list of strings"),
}


@functools.cache
def _field_kinds(cls: type) -> tuple[tuple[str, Any, str, bool], ...]:
    """(field, accepts, description, None allowed) for each field whose annotation is in `_KINDS`,
    alone or `| None`; other annotations (paths, mappings, Any) are left to the class."""
    hints = typing.get_type_hints(cls)
    out = []
    for f in dataclasses.fields(cls):
        hint, optional = hints[f.name], False
        if isinstance(hint, types.UnionType) or typing.get_origin(hint) is typing.Union:
            args = [a for a in typing.get_args(hint) if a is not type(None)]
            optional = len(args) < len(typing.get_args(hint))
            if len(args) != 1:
                continue
            hint = args[0]
        if hint in _KINDS:
            accepts, what = _KINDS[hint]
            out.append((f.name, accepts, what, optional))
    return tuple(out)


def type_problems(obj: Any) -> list[str]:
    """Each field of dataclass `obj` holding a value of another type than its annotation says:
    "k=2.5 (a whole number)", "seed='a' (a whole number)", "lr=nan (a finite number)",
    "systems='teacher' (a list of strings)". A config checks these before its ranges, so that
    2.5 steps, a string seed or a NaN weight is named instead of failing later or passing."""
    problems = []
    for name, accepts, what, optional in _field_kinds(type(obj)):
        value = getattr(obj, name)
        if value is None and optional:
            continue
        if not accepts(value):
            problems.append(f"{name}={value!r} ({what}{' or None' if optional else ''})")
    return problems
