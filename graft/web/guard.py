"""What the explorer lets in: the browser security model of a local web app (as Jupyter's).

Every request's `Host` must name this server (`localhost`, `127.0.0.1`, `[::1]`, the `--host` it
listens on, or a name given with `--allow-host`), so a page whose own name was rebound to this
machine's address (DNS rebinding) is answered with nothing but a refusal. Every `/api/` request,
read or write, must also carry the server's token (`X-Graft-Token: T` or `Authorization: Bearer T`,
compared in constant time), must not come from another origin (`Origin`, when sent, is this very
server; `Sec-Fetch-Site`, when sent, is `same-origin` or `none`), and a POST must be
`application/json`: a page of another origin cannot send the header without a CORS preflight,
which this server never grants (it sends no CORS header), and a form or a `no-cors` fetch can send
neither the header nor that content type. The page itself and its static files need no token:
they hold no data.
"""

from __future__ import annotations

import hmac
import ipaddress
import json
import re
import secrets
import socket
from collections.abc import Iterable
from typing import Any

#: The request header that carries the token (or `Authorization: Bearer TOKEN`).
TOKEN_HEADER = "X-Graft-Token"
#: What a token given by the user may be: URL-safe characters (it goes into the page's URL), 16 to 256.
TOKEN_RE = re.compile(r"^[A-Za-z0-9._~-]{16,256}$")
#: Names of this machine's loopback interface, always accepted in `Host`.
LOOPBACK_NAMES = ("localhost", "127.0.0.1", "::1")
#: Answers of the guard carry the same headers as every other answer of the app.
_HEADERS = [(b"content-type", b"application/json"), (b"x-content-type-options", b"nosniff"),
            (b"referrer-policy", b"no-referrer"),
            (b"content-security-policy", b"frame-ancestors 'none'")]


def new_token() -> str:
    """A fresh per-server token: 32 random bytes, URL-safe base64 (43 characters)."""
    return secrets.token_urlsafe(32)


def check_token(token: str) -> str:
    """A token given by the user (`--token`, `GRAFT_SERVE_TOKEN`), as it is.

    Raises:
        ValueError: too short, too long, or with characters a URL would have to escape.
    """
    if not isinstance(token, str) or not TOKEN_RE.match(token):
        raise ValueError("the token must be 16 to 256 characters of letters, digits, '-', '_', '.' and '~' "
                         "(e.g. python -c 'import secrets; print(secrets.token_urlsafe(32))')")
    return token


def is_loopback(host: str) -> bool:
    """Whether listening on `host` keeps the explorer on this machine (a loopback address or `localhost`)."""
    name = host.strip("[]").lower()
    if name == "localhost":
        return True
    try:
        return ipaddress.ip_address(name).is_loopback
    except ValueError:
        return False


def is_wildcard(host: str) -> bool:
    """Whether `host` means every address of this machine (`0.0.0.0`, `::`)."""
    try:
        return ipaddress.ip_address(host.strip("[]")).is_unspecified
    except ValueError:
        return False


def allowed_hosts(host: str, extra: Iterable[str] = ()) -> set[str]:
    """The names a request's `Host` may give when the server listens on `host`: the loopback names,
    `host` itself, and `extra`; for a wildcard `host` (0.0.0.0, ::) also this machine's name, its
    fully qualified name and the addresses that name resolves to (each reaches every address)."""
    names = {*LOOPBACK_NAMES, host, *extra}
    if is_wildcard(host):
        try:
            own = {socket.gethostname(), socket.getfqdn()}
            for name in list(own):
                own |= {info[4][0] for info in socket.getaddrinfo(name, None)}
            names |= own
        except OSError:  # a machine whose own name does not resolve: its loopback names and `extra` only
            pass
    return {_name(n) for n in names if n}


def _name(host: str) -> str:
    """A host name or address in the one form compared: lower case, no brackets, no trailing dot."""
    return host.strip().strip("[]").rstrip(".").lower()


def host_name(header: str) -> str | None:
    """The name of a `Host` header (`name`, `name:port`, `[v6]`, `[v6]:port`), or None when it is malformed."""
    header = header.strip()
    m = re.fullmatch(r"\[([0-9A-Fa-f:.]+)\](?::(\d{1,5}))?", header) or \
        re.fullmatch(r"([^\s:/\\@\[\]]+)(?::(\d{1,5}))?", header)
    return _name(m.group(1)) if m else None


class Guard:
    """ASGI middleware in front of the explorer's app: the Host check on every request; the origin,
    token and content-type checks on every `/api/` request. A refused request gets a JSON
    `{"error": ...}` with 403 (415 for a POST that is not JSON) and never reaches the app."""

    def __init__(self, app: Any, token: str, hosts: Iterable[str]) -> None:
        self.app = app
        self.token = token.encode("ascii")
        self.hosts = {_name(h) for h in hosts}

    async def __call__(self, scope: dict, receive: Any, send: Any) -> None:
        if scope["type"] not in ("http", "websocket"):
            return await self.app(scope, receive, send)
        headers: dict[str, bytes] = {}
        for key, value in scope.get("headers", []):
            headers.setdefault(key.decode("latin-1").lower(), value)
        refusal = self.refusal(scope, headers)
        if refusal is None:
            return await self.app(scope, receive, send)
        if scope["type"] == "websocket":
            return await send({"type": "websocket.close", "code": 1008})
        status, message = refusal
        body = json.dumps({"error": message}, ensure_ascii=False).encode("utf-8")
        await send({"type": "http.response.start", "status": status,
                    "headers": [*_HEADERS, (b"content-length", str(len(body)).encode())]})
        await send({"type": "http.response.body", "body": body})

    def refusal(self, scope: dict, headers: dict[str, bytes]) -> tuple[int, str] | None:
        """Why a request is refused (its status and message), or None to let it in."""
        host = headers.get("host", b"").decode("latin-1")
        name = host_name(host)
        if name is None or name not in self.hosts:
            return 403, (f"this explorer answers requests to {', '.join(sorted(self.hosts))} only, not to "
                         f"{host[:100]!r} (a page of another site reaching it under its own name is refused; "
                         "to reach it by another name, start it with --allow-host NAME)")
        if not scope.get("path", "").startswith("/api/"):
            return None
        site = headers.get("sec-fetch-site", b"").decode("latin-1").lower()
        if site and site not in ("same-origin", "none"):
            return 403, f"a request from another site ({site}) is refused: use the explorer's own page"
        origin = headers.get("origin")
        if origin is not None:
            own = origin.decode("latin-1").lower()
            if own not in (f"http://{host.lower()}", f"https://{host.lower()}"):
                return 403, (f"a request from another origin ({own[:100]}) is refused: use the explorer's own "
                             "page")
        if not self._has_token(headers):
            return 403, (f"this request needs the explorer's token (header {TOKEN_HEADER}): open the page at "
                         "the URL `graft serve` printed, which carries it (…/?token=…)")
        if scope.get("method") == "POST":
            kind = headers.get("content-type", b"").split(b";")[0].strip().lower()
            if kind != b"application/json":
                return 415, "a POST to the explorer must be JSON (Content-Type: application/json)"
        return None

    def _has_token(self, headers: dict[str, bytes]) -> bool:
        given = headers.get(TOKEN_HEADER.lower())
        if given is None:
            auth = headers.get("authorization", b"")
            if auth[:7].lower() == b"bearer ":
                given = auth[7:]
        # compare_digest takes as long for any wrong token of a given length as for another
        return given is not None and hmac.compare_digest(given.strip(), self.token)
