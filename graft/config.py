"""Helpers shared by the per-stage config dataclasses."""

from __future__ import annotations

import dataclasses
from typing import Any, TypeVar

T = TypeVar("T")


def config_from_dict(cls: type[T], data: dict[str, Any]) -> T:
    """Build dataclass `cls` from `data`; unknown keys are an error naming the allowed ones."""
    allowed = {f.name for f in dataclasses.fields(cls)}  # type: ignore[arg-type]
    unknown = sorted(set(data) - allowed)
    if unknown:
        raise ValueError(f"{cls.__name__}: unknown key(s) {unknown}; allowed: {sorted(allowed)}")
    return cls(**data)


def config_to_dict(obj: Any) -> dict[str, Any]:
    return dataclasses.asdict(obj)
