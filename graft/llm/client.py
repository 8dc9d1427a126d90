"""A small OpenAI-compatible chat-completions client (vLLM, Ollama, llama.cpp server, hosted APIs).

Standard library only: one POST to `{base_url}/chat/completions` per attempt, bounded concurrency,
retries with exponential back-off on rate limits (429), server errors (5xx), connection errors and
timeouts, and an optional persistent cache (`LLMCache`) consulted before any request is sent. Each
retry is logged as a warning (logger `graft.llm`). Once a request has used up its retries without any
HTTP answer (the server is down or unreachable), or has been answered with a redirect (the server is
not at `base_url`), the client's later requests fail at once with the same `LLMError` (`unreachable`
set) instead of each being sent and failing the same way; cached answers are still served.

What the server answers is not trusted: each attempt has one deadline (`timeout_s`) for connecting,
the headers and the whole body, however slowly the server trickles them; a body larger than
`max_response_bytes` is refused; a redirect is never followed (the request, with its API key, goes
only to `base_url`'s origin); and credentials in `base_url` (`user:pass@`) are sent as Basic auth and
never shown in a message or a log line.
"""

from __future__ import annotations

import email.utils
import http.client
import ipaddress
import json
import logging
import os
import random
import socket
import threading
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor, as_completed
from dataclasses import asdict, dataclass, field, fields
from datetime import datetime, timezone
from typing import Any, cast

from graft import jsonio
from graft.config import type_problems
from graft.errors import GraftError, InputValidationError
from graft.llm.cache import LLMCache, canonical_request, request_key
from graft.redact import redact_url

_log = logging.getLogger("graft.llm")

#: One chat message, e.g. {"role": "user", "content": "..."}.
Message = Mapping[str, Any]

# How much of an error body goes into an exception message: enough to read the server's reason.
_BODY_EXCERPT_CHARS = 300

# Bytes read from the response at a time (each read is also bounded by the attempt's deadline).
_READ_CHUNK = 1 << 16

# Hints for the 4xx statuses that are not worth retrying, so the message says what to fix.
_STATUS_HINTS = {
    400: "the server rejected the request (unsupported response_format, max_tokens too large, or a "
    "prompt longer than the model's context?)",
    401: "set a valid API key in the environment variable named by api_key_env",
    403: "the API key is not allowed to use this model",
    404: "check base_url (it usually ends in /v1) and that the server serves this model",
    422: "the server could not parse the request; check the model name and parameters",
}


class LLMError(GraftError):
    """An LLM request failed: a non-retryable HTTP status, an unusable response, or retries used up.

    Attributes:
        url: the endpoint that was called.
        status: the last HTTP status, if the server answered at all.
        attempts: how many HTTP attempts were made.
        unreachable: the server cannot be used at `base_url`, so other requests would fail the same
            way: retries were used up without any HTTP answer (refused or failed connections,
            timeouts), or it answered with a redirect (it is not at that address).
    """

    def __init__(
        self, message: str, *, url: str | None = None, status: int | None = None, attempts: int | None = None,
        unreachable: bool = False,
    ) -> None:
        super().__init__(message)
        self.url = url
        self.status = status
        self.attempts = attempts
        self.unreachable = unreachable


@dataclass
class LLMConfig:
    """How to reach an OpenAI-compatible chat endpoint and how hard to try.

    Example: `LLMConfig(model="Qwen2.5-7B-Instruct", base_url="http://127.0.0.1:8000/v1")`.
    """

    model: str  # model name as the server knows it (vLLM: the --served-model-name)
    base_url: str = "http://127.0.0.1:8000/v1"  # URL up to /v1; default = vLLM's local address
    api_key_env: str = "OPENAI_API_KEY"  # name of the env variable holding the key; unset = no key
    max_concurrency: int = 4  # requests in flight at once (threads), across all callers
    max_retries: int = 5  # re-sends after the first attempt, so at most max_retries + 1 attempts
    timeout_s: float = 60.0  # seconds per attempt (connect + full response)
    backoff_base_s: float = 1.0  # seconds; retry n waits base * 2**n * uniform(0.5, 1.5)
    max_backoff_s: float = 60.0  # seconds; cap on one wait, Retry-After included
    temperature: float = 0.0  # sampling temperature; 0 = greedy, so cached answers are reproducible
    max_tokens: int | None = 1024  # tokens per completion; None = leave it to the server
    max_response_bytes: int = 16 * 2**20  # largest response body accepted; a larger one is an error

    def __post_init__(self) -> None:
        problems = type_problems(self)
        if problems:
            raise InputValidationError("invalid LLM config: " + "; ".join(problems))
        if not self.model.strip():
            problems.append(f"model={self.model!r} (a non-empty model name is required)")
        parsed = urllib.parse.urlparse(str(self.base_url))
        if parsed.scheme not in ("http", "https") or not parsed.hostname:
            problems.append(f"base_url={redact_url(str(self.base_url))!r} (expected http(s)://host:port/v1)")
        else:
            try:
                parsed.port  # noqa: B018 - raises on a port that is not a number
            except ValueError:
                problems.append(f"base_url={redact_url(str(self.base_url))!r} (the port is not a number)")
        if self.max_concurrency < 1:
            problems.append(f"max_concurrency={self.max_concurrency!r} (an integer >= 1)")
        if self.max_retries < 0:
            problems.append(f"max_retries={self.max_retries!r} (an integer >= 0)")
        for name in ("timeout_s", "backoff_base_s", "max_backoff_s", "temperature"):
            value = getattr(self, name)
            if value < 0 or (name == "timeout_s" and value == 0):
                problems.append(f"{name}={value!r} (a number {'> 0' if name == 'timeout_s' else '>= 0'})")
        if self.max_tokens is not None and self.max_tokens < 1:
            problems.append(f"max_tokens={self.max_tokens!r} (an integer >= 1, or None)")
        if self.max_response_bytes < 1024:
            problems.append(f"max_response_bytes={self.max_response_bytes!r} (an integer >= 1024)")
        if problems:
            raise InputValidationError("invalid LLM config: " + "; ".join(problems))

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> LLMConfig:
        """Build a config from a mapping (e.g. a TOML/JSON section), rejecting unknown keys.

        Args:
            data: field name -> value; `model` is required, everything else has a default.
        Returns:
            the validated config.
        Raises:
            InputValidationError: an unknown key, a missing model, or an out-of-range value.
        """
        allowed = [f.name for f in fields(cls)]
        unknown = sorted(set(data) - set(allowed))
        if unknown:
            raise InputValidationError(
                f"unknown LLM config key(s) {unknown}; allowed: {allowed}. Fix the spelling or remove them"
            )
        if "model" not in data:
            raise InputValidationError(f"LLM config needs 'model' (the served model name); got keys {sorted(data)}")
        return cls(**dict(data))

    def to_dict(self) -> dict[str, Any]:
        """Plain dict for the manifest (holds the env variable's name, never the key itself)."""
        return asdict(self)

    def api_key(self) -> str | None:
        """The API key from the environment variable `api_key_env`, or None when it is unset/empty."""
        return os.environ.get(self.api_key_env) or None


@dataclass(frozen=True)
class ChatRequest:
    """One chat call for `ChatClient.complete_many`."""

    messages: Sequence[Message]
    response_format: Mapping[str, Any] | None = field(default=None)


class _Retryable(Exception):
    """Internal: an attempt failed in a way worth retrying (429, 5xx, network, timeout)."""

    def __init__(self, reason: str, *, status: int | None = None, retry_after: float | None = None) -> None:
        super().__init__(reason)
        self.reason = reason
        self.status = status
        self.retry_after = retry_after


def _excerpt(raw: bytes | str, limit: int = _BODY_EXCERPT_CHARS) -> str:
    text = raw.decode("utf-8", errors="replace") if isinstance(raw, bytes) else raw
    text = " ".join(text.split())
    return text if len(text) <= limit else text[:limit] + " ..."


def parse_retry_after(value: str | None) -> float | None:
    """Seconds to wait from a Retry-After header (delta-seconds or an HTTP date); None if absent/bad."""
    if not value:
        return None
    try:
        return max(0.0, float(value))
    except ValueError:
        pass
    try:
        when = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    if when.tzinfo is None:
        when = when.replace(tzinfo=timezone.utc)
    return max(0.0, (when - datetime.now(timezone.utc)).total_seconds())


def _origin(url: str) -> tuple[str, str, int | None]:
    parsed = urllib.parse.urlsplit(url)
    default = {"http": 80, "https": 443}.get(parsed.scheme)
    try:
        port = parsed.port or default
    except ValueError:
        port = None
    return parsed.scheme, (parsed.hostname or "").lower(), port


class _Deadline:
    """One attempt's deadline: when it passes, the attempt's socket is shut down, so that a read
    blocked on a server that trickles (or sends nothing) returns at once."""

    def __init__(self, seconds: float) -> None:
        self.expired = False
        self._sock: socket.socket | None = None
        self._lock = threading.Lock()
        self._timer = threading.Timer(seconds, self._fire)
        self._timer.daemon = True
        self._timer.start()

    def attach(self, sock: socket.socket | None) -> None:
        with self._lock:
            self._sock = sock
            if self.expired:
                self._shut()

    def _fire(self) -> None:
        with self._lock:
            self.expired = True
            self._shut()

    def _shut(self) -> None:
        if self._sock is not None:
            try:
                self._sock.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass

    def cancel(self) -> None:
        self._timer.cancel()


# The deadline of the attempt running in this thread, found by the connections it opens.
_attempt = threading.local()


def _watch(conn: http.client.HTTPConnection) -> None:
    deadline = getattr(_attempt, "deadline", None)
    if deadline is not None:
        deadline.attach(conn.sock)


class _HTTPConnection(http.client.HTTPConnection):
    def connect(self) -> None:
        super().connect()
        _watch(self)


class _HTTPSConnection(http.client.HTTPSConnection):
    def connect(self) -> None:
        super().connect()
        _watch(self)


class _HTTPHandler(urllib.request.HTTPHandler):
    def http_open(self, req: urllib.request.Request) -> http.client.HTTPResponse:
        return self.do_open(_HTTPConnection, req)


class _HTTPSHandler(urllib.request.HTTPSHandler):
    def https_open(self, req: urllib.request.Request) -> http.client.HTTPResponse:
        return self.do_open(_HTTPSConnection, req, context=self._context)


class _NoRedirect(urllib.request.HTTPRedirectHandler):
    """Redirects are not followed: a 3xx answer reaches the client as an HTTPError (refused there)."""

    def redirect_request(self, req, fp, code, msg, headers, newurl):  # noqa: ANN001, ANN201
        return None


def _is_loopback(url: str) -> bool:
    host = urllib.parse.urlparse(url).hostname or ""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


class ChatClient:
    """Chat completions with caching, bounded concurrency and retries.

    Args:
        config: endpoint, model and retry settings.
        cache: optional persistent cache; a hit returns the stored text without any HTTP request.
    """

    def __init__(self, config: LLMConfig, cache: LLMCache | None = None) -> None:
        self.config = config
        self.cache = cache
        parsed = urllib.parse.urlsplit(config.base_url.rstrip("/") + "/chat/completions")
        # credentials in the URL go as Basic auth (unless an API key is set), never in the URL or a message
        self._basic: str | None = None
        if parsed.username is not None or parsed.password is not None:
            import base64

            pair = f"{urllib.parse.unquote(parsed.username or '')}:{urllib.parse.unquote(parsed.password or '')}"
            self._basic = base64.b64encode(pair.encode("utf-8")).decode("ascii")
            parsed = parsed._replace(netloc=parsed.netloc.rsplit("@", 1)[1])
        self.url = urllib.parse.urlunsplit(parsed)
        self._api_key = config.api_key()
        # A local server must not be sent through an HTTP(S)_PROXY from the environment.
        handlers: list[urllib.request.BaseHandler] = [_HTTPHandler(), _HTTPSHandler(), _NoRedirect()]
        if _is_loopback(self.url):
            handlers.append(urllib.request.ProxyHandler({}))
        self._opener = urllib.request.build_opener(*handlers)
        # The semaphore bounds in-flight requests even when several threads call complete().
        self._slots = threading.BoundedSemaphore(config.max_concurrency)
        self._lock = threading.Lock()
        self._rng = random.Random()
        self._stats = {"calls": 0, "requests": 0, "cache_hits": 0, "retries": 0, "failures": 0}
        self._down: LLMError | None = None  # set once a request found the server unreachable

    def stats(self) -> dict[str, int]:
        """Counters since construction.

        Returns:
            calls (complete() calls), requests (HTTP attempts sent), cache_hits, retries
            (attempts after the first), failures (calls that ended in LLMError).
        """
        with self._lock:
            return dict(self._stats)

    def _bump(self, name: str, by: int = 1) -> None:
        with self._lock:
            self._stats[name] += by

    def complete(self, messages: Sequence[Message], *, response_format: Mapping[str, Any] | None = None) -> str:
        """Send one chat request (or answer it from the cache) and return the message content.

        Args:
            messages: chat messages, e.g. [{"role": "system", ...}, {"role": "user", ...}].
            response_format: passed through, e.g. {"type": "json_object"}; part of the cache key.
        Returns:
            the content of the first choice's message.
        Raises:
            LLMError: a 4xx other than 429 (at once), an answer that is not a chat completion, or
                no usable answer after `max_retries` retries; at once, with `unreachable` set, once an
                earlier request of this client found the server unreachable or was redirected.
        """
        cfg = self.config
        msgs = [dict(m) for m in messages]
        canonical = canonical_request(
            model=cfg.model,
            messages=msgs,
            temperature=cfg.temperature,
            max_tokens=cfg.max_tokens,
            response_format=response_format,
        )
        key = request_key(canonical)
        self._bump("calls")
        if self.cache is not None:
            hit = self.cache.get(key)
            if hit is not None:
                self._bump("cache_hits")
                return hit.text
        if self._down is not None:
            self._bump("failures")
            raise self._stopped()
        body: dict[str, Any] = {"model": cfg.model, "messages": msgs, "temperature": cfg.temperature}
        if cfg.max_tokens is not None:
            body["max_tokens"] = cfg.max_tokens
        if response_format is not None:
            body["response_format"] = dict(response_format)
        text, meta = self._post_with_retries(json.dumps(body).encode("utf-8"))
        if self.cache is not None:
            self.cache.put(key, model=cfg.model, request=canonical, text=text, meta=meta)
        return text

    def complete_many(
        self,
        requests: Sequence[ChatRequest | Sequence[Message]],
        progress: Callable[[int], None] | None = None,
    ) -> list[str | Exception]:
        """Run many chat requests with at most `max_concurrency` in flight.

        Args:
            requests: `ChatRequest`s, or bare message lists (no response_format).
            progress: called with 1 each time a request finishes (success or failure).
        Returns:
            one entry per request, in order: the content, or the `LLMError` that request ended with.
            Other exceptions (bugs) propagate.
        """
        reqs = [r if isinstance(r, ChatRequest) else ChatRequest(messages=r) for r in requests]
        results: list[str | Exception | None] = [None] * len(reqs)
        if not reqs:
            return []
        pool = ThreadPoolExecutor(
            max_workers=min(self.config.max_concurrency, len(reqs)), thread_name_prefix="graft-llm"
        )
        try:
            futures = {
                pool.submit(self.complete, r.messages, response_format=r.response_format): i
                for i, r in enumerate(reqs)
            }
            for fut in as_completed(futures):
                try:
                    results[futures[fut]] = fut.result()
                except LLMError as exc:
                    results[futures[fut]] = exc
                if progress is not None:
                    progress(1)
        except BaseException:
            # Ctrl-C or a bug: do not wait for the queued rest; finished answers are already cached.
            pool.shutdown(wait=False, cancel_futures=True)
            raise
        pool.shutdown(wait=True)
        return cast("list[str | Exception]", results)

    def _backoff(self, retry: int, retry_after: float | None) -> float:
        cfg = self.config
        if retry_after is not None:
            return min(retry_after, cfg.max_backoff_s)
        with self._lock:
            jitter = self._rng.uniform(0.5, 1.5)
        return min(cfg.backoff_base_s * (2**retry) * jitter, cfg.max_backoff_s)

    def _post_with_retries(self, data: bytes) -> tuple[str, dict[str, Any]]:
        attempts = self.config.max_retries + 1
        last: _Retryable | None = None
        made = 0  # attempts sent
        for attempt in range(attempts):
            if last is not None:
                if self._down is not None:  # another request found the server unreachable meanwhile
                    break
                self._bump("retries")
                wait = self._backoff(attempt - 1, last.retry_after)
                _log.warning("%s: %s; retry %d of %d in %.1f s", self.url, last.reason, attempt,
                             self.config.max_retries, wait)
                time.sleep(wait)
            made += 1
            try:
                text, meta = self._post_once(data)
            except _Retryable as exc:
                last = exc
                continue
            except LLMError as exc:
                exc.attempts = exc.attempts if exc.attempts == 0 else attempt + 1
                self._bump("failures")
                if exc.unreachable:  # a redirect: every other request would be redirected too
                    with self._lock:
                        self._down = self._down or exc
                raise
            meta["attempts"] = attempt + 1
            return text, meta
        self._bump("failures")
        assert last is not None
        unreachable = last.status is None
        error = LLMError(
            f"{self.url}: no usable answer after {made} attempt(s) (max_retries="
            f"{self.config.max_retries}); last error: {last.reason}. Check that the server is up and "
            "not overloaded, or, from Python, raise LLMConfig.max_retries / timeout_s",
            url=self.url,
            status=last.status,
            attempts=made,
            unreachable=unreachable,
        )
        if unreachable:
            with self._lock:
                self._down = self._down or error
        raise error

    def _stopped(self) -> LLMError:
        """The error of a request not sent because an earlier one found the server unusable."""
        down = self._down
        assert down is not None
        return LLMError(str(down), url=down.url, status=None, attempts=0, unreachable=True)

    def _post_once(self, data: bytes) -> tuple[str, dict[str, Any]]:
        headers = {"Content-Type": "application/json", "Accept": "application/json"}
        if self._api_key:
            headers["Authorization"] = f"Bearer {self._api_key}"
        elif self._basic:
            headers["Authorization"] = f"Basic {self._basic}"
        request = urllib.request.Request(self.url, data=data, headers=headers, method="POST")
        with self._slots:
            if self._down is not None:  # found unusable while this request waited for a slot
                raise self._stopped()
            self._bump("requests")
            start = time.monotonic()
            deadline = _Deadline(self.config.timeout_s)
            _attempt.deadline = deadline
            try:
                with self._opener.open(request, timeout=self.config.timeout_s) as resp:
                    status = resp.status
                    raw = self._read_body(resp, deadline)
            except urllib.error.HTTPError as exc:
                if 300 <= exc.code < 400:
                    exc.close()
                    raise self._redirect_error(exc) from None
                try:
                    body = _excerpt(exc.read(4 * _BODY_EXCERPT_CHARS))  # an error body is not read whole
                except (OSError, http.client.HTTPException):
                    body = "<body unreadable>"
                if exc.code == 429 or exc.code >= 500:
                    raise _Retryable(
                        f"HTTP {exc.code}: {body}",
                        status=exc.code,
                        retry_after=parse_retry_after(exc.headers.get("Retry-After") if exc.headers else None),
                    ) from exc
                hint = _STATUS_HINTS.get(exc.code, "the request was refused; retrying would not help")
                raise LLMError(
                    f"{self.url} answered HTTP {exc.code}: {body!r}; {hint}", url=self.url, status=exc.code
                ) from exc
            except (OSError, http.client.HTTPException) as exc:
                # URLError, socket timeouts, refused/reset connections, truncated responses.
                if deadline.expired:
                    raise _Retryable(f"no complete answer within timeout_s={self.config.timeout_s:g} s "
                                     "(connect, headers and body together)") from None
                reason = getattr(exc, "reason", None) or exc
                raise _Retryable(f"{type(exc).__name__}: {reason}") from exc
            finally:
                deadline.cancel()
                _attempt.deadline = None
        return self._parse(status, raw, time.monotonic() - start)

    def _read_body(self, resp: http.client.HTTPResponse, deadline: _Deadline) -> bytes:
        """The whole response body, at most `max_response_bytes` of it (LLMError beyond); a body cut
        short (the deadline passed, the connection closed early) is a retryable failure."""
        cap = self.config.max_response_bytes
        length = resp.headers.get("Content-Length")
        if length is not None and length.strip().isdigit() and int(length) > cap:
            raise LLMError(f"{self.url}: the answer would be {int(length):,} bytes, more than max_response_bytes="
                           f"{cap:,}; refused unread", url=self.url, status=resp.status)
        chunks: list[bytes] = []
        size = 0
        while True:
            chunk = resp.read1(_READ_CHUNK)
            if not chunk:
                if deadline.expired:
                    raise _Retryable(f"no complete answer within timeout_s={self.config.timeout_s:g} s "
                                     "(connect, headers and body together)")
                if length is not None and length.strip().isdigit() and size < int(length):
                    raise _Retryable(f"the answer was cut short ({size:,} of {int(length):,} bytes)")
                return b"".join(chunks)
            size += len(chunk)
            if size > cap:
                raise LLMError(f"{self.url}: the answer is more than max_response_bytes={cap:,} bytes; refused",
                               url=self.url, status=resp.status)
            chunks.append(chunk)

    def _redirect_error(self, exc: urllib.error.HTTPError) -> LLMError:
        """A redirect is refused, not followed: the request carries the API key, which must reach no
        address but `base_url`'s, and what another address answers is not this server's completion."""
        target = exc.headers.get("Location", "") if exc.headers else ""
        where = urllib.parse.urljoin(self.url, target) if target else ""
        other = bool(where) and _origin(where) != _origin(self.url)
        shown = redact_url(where)[:200] if where else "nowhere (no Location header)"
        what = "another origin" if other else "another path"
        return LLMError(
            f"{self.url} answered HTTP {exc.code}, a redirect to {what}: {shown!r}; redirects are not followed "
            f"(the request carries the API key){'' if not where else ': if that address is the server, set base_url to it'}",
            url=self.url, status=exc.code, unreachable=True)

    def _parse(self, status: int, raw: bytes, latency_s: float) -> tuple[str, dict[str, Any]]:
        try:
            payload = jsonio.loads(raw, f"{self.url}'s answer")
            choice = payload["choices"][0]
            content = choice["message"]["content"]
        except (ValueError, KeyError, IndexError, TypeError) as exc:
            raise LLMError(
                f"{self.url} answered HTTP {status} but not with a chat completion "
                f"({type(exc).__name__}: {exc}): {_excerpt(raw)!r}; is base_url an OpenAI-compatible /v1 endpoint?",
                url=self.url,
                status=status,
            ) from exc
        if not isinstance(content, str):
            raise LLMError(
                f"{self.url}: the chat completion has no text content (finish_reason="
                f"{choice.get('finish_reason')!r}): {_excerpt(raw)!r}",
                url=self.url,
                status=status,
            )
        meta = {
            "finish_reason": choice.get("finish_reason"),
            "usage": payload.get("usage"),
            "id": payload.get("id"),
            "served_model": payload.get("model"),
            "latency_s": round(latency_s, 3),
        }
        return content, meta
