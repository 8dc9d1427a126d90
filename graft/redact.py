"""Credentials kept out of everything GRAFT shows or writes.

An LLM server's URL may carry a user and password (`http://alice:pw@host/v1`); the chat client
sends them as Basic auth. Wherever such a URL is shown (messages, warnings) or recorded (the
manifest, survey.json, training records: every config passes through `graft.config.config_to_dict`),
the password is replaced by `***`. The API key itself is read from the environment when a request is
sent and is never part of a config.

Standard library only: the config helpers and the chat client both import it.
"""

from __future__ import annotations

import urllib.parse
from typing import Any


def redact_url(url: str) -> str:
    """`url` with any password in it replaced by `***` (`http://user:***@host/v1`), for messages
    and records; a URL without credentials is returned as it is."""
    try:
        parsed = urllib.parse.urlsplit(url)
    except ValueError:
        return "<unparsable URL>"
    if parsed.password is None and "@" not in parsed.netloc:
        return url
    user = parsed.username or ""
    host = parsed.netloc.rsplit("@", 1)[1]
    return urllib.parse.urlunsplit(parsed._replace(netloc=f"{user}:***@{host}" if user else f"***@{host}"))


def redact(value: Any) -> Any:
    """`value` (a config's dict form: dicts, lists, tuples, strings, numbers) with every string that
    is a URL holding credentials passed through `redact_url`; the rest is returned unchanged."""
    if isinstance(value, str):
        return redact_url(value) if "://" in value and "@" in value else value
    if isinstance(value, dict):
        return {k: redact(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [redact(v) for v in value] if isinstance(value, list) else tuple(redact(v) for v in value)
    return value
