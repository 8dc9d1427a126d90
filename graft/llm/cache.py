"""A persistent request -> response cache for LLM calls (`<index>/cache/llm.sqlite`).

Every finished response is committed as soon as it arrives, so a killed build or survey run resumes
by re-asking only the requests that had not finished. The key is a hash of everything that decides
the answer (model, messages, sampling parameters, response format), never of the server URL or the
API key: the same model served elsewhere gives the same cached answer.
"""

from __future__ import annotations

import hashlib
import json
import os
import sqlite3
import threading
import time
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from graft import jsonio

#: Version of the key scheme; bumping it makes old entries unreachable instead of wrong.
CACHE_KEY_VERSION = 1

#: Path of the cache inside an index directory (DESIGN.md, "The index directory").
CACHE_RELPATH = Path("cache") / "llm.sqlite"

_SCHEMA = """
CREATE TABLE IF NOT EXISTS responses (
    key      TEXT PRIMARY KEY,
    model    TEXT NOT NULL,
    request  TEXT NOT NULL,
    response TEXT NOT NULL,
    meta     TEXT NOT NULL,
    created  REAL NOT NULL
)
"""


def canonical_request(
    *,
    model: str,
    messages: list[Mapping[str, Any]],
    temperature: float,
    max_tokens: int | None,
    response_format: Mapping[str, Any] | None,
) -> str:
    """The canonical JSON text of a chat request: sorted keys, no whitespace, UTF-8 kept as is."""
    payload = {
        "v": CACHE_KEY_VERSION,
        "model": model,
        "messages": [dict(m) for m in messages],
        "temperature": float(temperature),
        "max_tokens": max_tokens,
        "response_format": dict(response_format) if response_format is not None else None,
    }
    return json.dumps(payload, sort_keys=True, separators=(",", ":"), ensure_ascii=False)


def request_key(canonical: str) -> str:
    """SHA-256 hex digest of a canonical request (see `canonical_request`)."""
    return hashlib.sha256(canonical.encode("utf-8")).hexdigest()


@dataclass(frozen=True)
class CachedResponse:
    """One cached answer: the response text and what the server said about it."""

    text: str
    meta: dict[str, Any]


class LLMCache:
    """Thread-safe sqlite3 cache of chat responses, keyed by `request_key`.

    One connection guarded by a lock: LLM calls take seconds, so cache access is never the
    bottleneck, and a single connection keeps `close()` simple. WAL mode lets another process
    (a second `graft` command on the same index) read while this one writes.

    Args:
        path: the sqlite file, usually `<index>/cache/llm.sqlite` (see `for_index`); parent
            directories are created.
    """

    def __init__(self, path: str | os.PathLike[str]) -> None:
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._lock = threading.Lock()
        # isolation_level=None: autocommit, so each put is durable the moment it returns.
        self._conn: sqlite3.Connection | None = sqlite3.connect(
            self.path, isolation_level=None, check_same_thread=False, timeout=30.0
        )
        with self._lock:
            self._conn.execute("PRAGMA journal_mode=WAL")
            self._conn.execute(_SCHEMA)

    @classmethod
    def for_index(cls, index_dir: str | os.PathLike[str]) -> LLMCache:
        """Open (or create) the cache of an index directory: `<index_dir>/cache/llm.sqlite`."""
        return cls(Path(index_dir) / CACHE_RELPATH)

    def _connection(self) -> sqlite3.Connection:
        if self._conn is None:
            raise RuntimeError(f"LLM cache {self.path} is closed")
        return self._conn

    def get(self, key: str) -> CachedResponse | None:
        """The cached response for `key`, or None.

        Args:
            key: a `request_key` digest.
        Returns:
            the response text and its metadata, or None when the request was never answered.
        """
        with self._lock:
            row = self._connection().execute(
                "SELECT response, meta FROM responses WHERE key = ?", (key,)
            ).fetchone()
        if row is None:
            return None
        return CachedResponse(text=row[0], meta=jsonio.loads(row[1], "a cached answer's record"))

    def put(self, key: str, *, model: str, request: str, text: str, meta: Mapping[str, Any]) -> None:
        """Store (or replace) one response and commit it at once.

        Args:
            key: the `request_key` of `request`.
            model: model name, kept for inspection (`sqlite3 llm.sqlite 'select model, count(*) ...'`).
            request: the canonical request JSON, kept so an entry can be audited or replayed.
            text: the response content.
            meta: JSON-serialisable metadata (finish reason, token usage, latency, ...).
        """
        row = (key, model, request, text, json.dumps(dict(meta), default=str), time.time())
        with self._lock:
            self._connection().execute(
                "INSERT OR REPLACE INTO responses (key, model, request, response, meta, created) "
                "VALUES (?, ?, ?, ?, ?, ?)",
                row,
            )

    def __contains__(self, key: object) -> bool:
        if not isinstance(key, str):
            return False
        with self._lock:
            row = self._connection().execute("SELECT 1 FROM responses WHERE key = ?", (key,)).fetchone()
        return row is not None

    def __len__(self) -> int:
        with self._lock:
            return int(self._connection().execute("SELECT COUNT(*) FROM responses").fetchone()[0])

    def close(self) -> None:
        """Close the connection; later calls raise RuntimeError. Closing twice is harmless."""
        with self._lock:
            if self._conn is not None:
                self._conn.close()
                self._conn = None

    def __enter__(self) -> LLMCache:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
