"""The explorer's web app (Starlette): the page, its static assets and a JSON API over `Explorer`.

Every answer is JSON (or a file download); every text the page shows is set as text, never as HTML,
except a survey, which is rendered here from Markdown with raw HTML disabled. Errors are JSON
`{"error": message}` with status 400 (bad input), 403 (refused: see `graft.web.guard`, or a survey
file that is a symbolic link), 404 (unknown paper or survey), 405 (wrong method), 409 (too many
surveys waiting), 413 (too long), 415 (a POST that is not JSON) or 500 (a survey file that cannot be
read, or a fault of the explorer's own, its message kept).

Every request passes `graft.web.guard.Guard` first: its `Host` must name this server, and an
`/api/` request must carry the server's token and come from the explorer's own page.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from starlette.applications import Starlette
from starlette.concurrency import run_in_threadpool
from starlette.exceptions import HTTPException
from starlette.middleware import Middleware
from starlette.requests import Request
from starlette.responses import FileResponse, JSONResponse, Response
from starlette.routing import Mount, Route
from starlette.staticfiles import StaticFiles

from graft.errors import GraftError
from graft.web.data import DEFAULT_K, MAX_TEXT_CHARS, Explorer, Filters, NotFound
from graft.web.guard import LOOPBACK_NAMES, Guard, check_token, new_token
from graft.web.surveys import NoSuchSurvey, QueueFull, Refused, Surveys, Unreadable

log = logging.getLogger("graft.web")

STATIC = Path(__file__).parent / "static"
#: Largest request body read, in bytes (a pasted abstract, with room for JSON escapes).
MAX_BODY = 4 * MAX_TEXT_CHARS + 4096

#: The page may load scripts, styles and images from this server only, and talk to it only.
_HEADERS = {
    "Content-Security-Policy": "default-src 'self'; script-src 'self'; style-src 'self' 'unsafe-inline'; img-src 'self' data:; "
                               "connect-src 'self'; object-src 'none'; base-uri 'none'; frame-ancestors 'none'",
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "no-referrer",
}


class BadRequest(Exception):
    def __init__(self, message: str, status: int = 400) -> None:
        super().__init__(message)
        self.status = status


def _error(message: str, status: int) -> JSONResponse:
    return JSONResponse({"error": message}, status_code=status, headers=_HEADERS)


def _json(payload: Any) -> Response:
    return Response(json.dumps(payload, default=str), media_type="application/json", headers=_HEADERS)


def _int(value: Any, default: int | None, name: str) -> int | None:
    """A whole number given as a URL parameter or a JSON value (an integer, or its digits as text)."""
    if value is None or value == "":
        return default
    if isinstance(value, int) and not isinstance(value, bool):
        return value
    if isinstance(value, str) and value.strip().lstrip("+-").isdigit() and len(value) <= 20:
        return int(value)
    shown = value[:40] if isinstance(value, str) else json.dumps(value, default=str)[:40]
    raise BadRequest(f"{name} must be a whole number, got {shown!r}")


async def _body(request: Request) -> dict[str, Any]:
    size = int(request.headers.get("content-length") or 0)
    if size > MAX_BODY:
        raise BadRequest(f"the request is {size:,} bytes; paste a title and abstract of at most "
                         f"{MAX_TEXT_CHARS:,} characters", 413)
    raw = b""
    async for chunk in request.stream():
        raw += chunk
        if len(raw) > MAX_BODY:
            raise BadRequest(f"the request is over {MAX_BODY:,} bytes; paste a title and abstract of at most "
                             f"{MAX_TEXT_CHARS:,} characters", 413)
    try:
        body = json.loads(raw.decode("utf-8") or "{}")
    except (UnicodeDecodeError, ValueError, RecursionError):
        raise BadRequest("the request body is not JSON (or is nested too deeply)") from None
    if not isinstance(body, dict):
        raise BadRequest("the request body must be a JSON object")
    return body


def _too_long(exc: GraftError) -> int:
    return 413 if "characters long" in str(exc) else 400


def create_app(index_dir: str | Path, surveys_dir: str | Path, *, warm: bool = True, survey_config: Any = None,
               encoder: Any = None, token: str | None = None,
               hosts: Iterable[str] = LOOPBACK_NAMES) -> Starlette:
    """The explorer of `index_dir` (read-only), writing surveys under `surveys_dir` (with
    `survey_config`, a `SurveyConfig`, or `graft survey`'s defaults; `encoder`: the sentence encoder
    the surveys use, else their own). Every `/api/` request must carry `token` (a new random one when
    None; `app.state.token` holds it) and every request's `Host` must name one of `hosts`
    (`graft.web.guard.allowed_hosts`).

    Raises:
        ValueError: a `token` that is not 16 to 256 URL-safe characters.
    """
    token = new_token() if token is None else check_token(token)
    explorer = Explorer(index_dir, survey_config=survey_config, encoder=encoder)
    if warm:
        explorer.warm()
    surveys = Surveys(Path(surveys_dir), explorer.write_survey, explorer.check_topic)

    def guarded(handler):
        async def run(request: Request) -> Response:
            try:
                return await handler(request)
            except BadRequest as exc:
                return _error(str(exc), exc.status)
            except (NotFound, NoSuchSurvey) as exc:
                return _error(str(exc), 404)
            except Refused as exc:
                return _error(str(exc), 403)
            except QueueFull as exc:
                return _error(str(exc), 409)
            except Unreadable as exc:
                return _error(str(exc), 500)
            except GraftError as exc:
                return _error(str(exc), _too_long(exc))
            except Exception as exc:  # a fault of the explorer: said as JSON, the server goes on
                log.exception("the explorer failed on %s %s", request.method, request.url.path[:200])
                return _error(f"the explorer failed: {type(exc).__name__}: {str(exc)[:300]}", 500)
        return run

    async def page(request: Request) -> Response:
        return FileResponse(STATIC / "index.html", headers=_HEADERS)

    async def info(request: Request) -> Response:
        return _json(await run_in_threadpool(explorer.summary))

    async def search(request: Request) -> Response:
        if request.method == "POST":
            q = (await _body(request)).get("q")
        else:
            q = request.query_params.get("q")
        if q is None:
            raise BadRequest("give the search text as q")
        return _json(await run_in_threadpool(explorer.search, q))

    async def view_args(request: Request) -> dict[str, Any]:
        params: dict[str, Any] = dict(request.query_params)
        venues: Any = request.query_params.getlist("venue")
        seeds: Any = request.query_params.getlist("seed")
        if request.method == "POST":
            body = await _body(request)
            params.update({k: v for k, v in body.items() if v is not None})
            venues = body.get("venues") or venues
            seeds = body.get("seeds") or seeds
        paper, text, mode = params.get("paper"), params.get("text"), params.get("mode")
        if any(v is not None and not isinstance(v, str) for v in (paper, text, mode)):
            raise BadRequest("paper, text and mode must be strings")
        if not isinstance(venues, list) or not all(isinstance(v, str) for v in venues) or len(venues) > 200:
            raise BadRequest("venues must be a list of up to 200 venue names (strings); in a URL, one venue= each")
        since = _int(params.get("since"), None, "since")
        until = _int(params.get("until"), None, "until")
        filters = Filters(since, until, tuple(v.strip() for v in venues if v.strip())).check()
        return {"paper": paper, "text": text, "k": _int(params.get("k"), DEFAULT_K, "k"), "mode": mode or "related",
                "filters": filters, "seeds": seeds or None}

    async def graph(request: Request) -> Response:
        return _json(await run_in_threadpool(explorer.view, **await view_args(request)))

    async def paper(request: Request) -> Response:
        return _json(await run_in_threadpool(explorer.card, request.path_params["paper_id"]))

    async def export(request: Request) -> Response:
        fmt = request.path_params["fmt"]
        view = await run_in_threadpool(explorer.view, **await view_args(request))
        name = ("seeds-" if view["seeds"] else "") + (view["centre"]["paper_id"] or "query").replace("/", "_")
        if fmt == "bib":
            ids = ([s["paper_id"] for s in view["seeds"]]
                   or ([view["centre"]["paper_id"]] if view["centre"]["paper_id"] else [])) + \
                [h["paper_id"] for h in view["hits"]]
            body, media = explorer.bibtex(ids), "application/x-bibtex"
        elif fmt == "graphml":
            body, media = explorer.graphml(view), "application/graphml+xml"
        else:
            raise NotFound(f"unknown export format {fmt[:20]!r}; use bib or graphml")
        safe = "".join(ch if ch.isalnum() or ch in "-._" else "_" for ch in name)[:80]
        return Response(body, media_type=media, headers={
            **_HEADERS, "Content-Disposition": f'attachment; filename="graft-{safe}.{fmt}"'})

    async def survey_list(request: Request) -> Response:
        if request.method == "POST":
            job = surveys.start((await _body(request)).get("topic"))
            return JSONResponse(Surveys.status_of(job), status_code=202, headers=_HEADERS)
        return _json(surveys.listing())

    async def survey_one(request: Request) -> Response:
        return _json(await run_in_threadpool(surveys.status, request.path_params["name"]))

    async def survey_bib(request: Request) -> Response:
        name = request.path_params["name"]
        body = await run_in_threadpool(surveys.bibtex, name)
        return Response(body, media_type="application/x-bibtex", headers={
            **_HEADERS, "Content-Disposition": f'attachment; filename="{name}.bib"'})

    async def not_found(request: Request, exc: Exception) -> Response:
        return _error(f"nothing at {request.url.path[:200]}", 404)

    async def http_error(request: Request, exc: Exception) -> Response:
        if not isinstance(exc, HTTPException):
            return _error("the explorer failed", 500)
        res = _error(f"{exc.detail} ({request.method} {request.url.path[:200]})", exc.status_code)
        res.headers.update(exc.headers or {})  # 405's Allow
        return res

    async def server_error(request: Request, exc: Exception) -> Response:
        return _error(f"the explorer failed: {type(exc).__name__}", 500)

    routes = [
        Route("/", page),
        Route("/api/info", guarded(info)),
        Route("/api/search", guarded(search), methods=["GET", "POST"]),
        Route("/api/graph", guarded(graph), methods=["GET", "POST"]),
        Route("/api/paper/{paper_id:path}", guarded(paper)),
        Route("/api/export/{fmt}", guarded(export), methods=["GET", "POST"]),
        Route("/api/surveys", guarded(survey_list), methods=["GET", "POST"]),
        Route("/api/surveys/{name}", guarded(survey_one)),
        Route("/api/surveys/{name}/references.bib", guarded(survey_bib)),
        Mount("/static", StaticFiles(directory=STATIC), name="static"),
    ]
    app = Starlette(routes=routes, exception_handlers={404: not_found, HTTPException: http_error,
                                                        Exception: server_error},
                    middleware=[Middleware(Guard, token=token, hosts=hosts)])
    app.state.explorer, app.state.surveys, app.state.token = explorer, surveys, token
    return app
