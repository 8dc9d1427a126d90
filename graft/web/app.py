"""The explorer's web app (Starlette): the page, its static assets and a JSON API over `Explorer`.

Every answer is JSON (or a file download); every text the page shows is set as text, never as HTML,
except a survey, which is rendered here from Markdown with raw HTML disabled. Errors are JSON
`{"error": message}` with status 400 (bad input), 404 (unknown paper or survey), 413 (too long)
or 409 (too many surveys waiting).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from starlette.applications import Starlette
from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import FileResponse, JSONResponse, Response
from starlette.routing import Mount, Route
from starlette.staticfiles import StaticFiles

from graft.errors import GraftError
from graft.web.data import DEFAULT_K, MAX_TEXT_CHARS, Explorer, NotFound
from graft.web.surveys import Surveys

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


def _int(value: str | None, default: int, name: str) -> int:
    if value is None or value == "":
        return default
    try:
        return int(value)
    except ValueError:
        raise BadRequest(f"{name} must be a whole number, got {value[:40]!r}") from None


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
    except (UnicodeDecodeError, ValueError):
        raise BadRequest("the request body is not JSON") from None
    if not isinstance(body, dict):
        raise BadRequest("the request body must be a JSON object")
    return body


def _too_long(exc: GraftError) -> int:
    return 413 if "characters long" in str(exc) else 400


def create_app(index_dir: str | Path, surveys_dir: str | Path, *, warm: bool = True, survey_config: Any = None,
               encoder: Any = None) -> Starlette:
    """The explorer of `index_dir` (read-only), writing surveys under `surveys_dir` (with
    `survey_config`, a `SurveyConfig`, or `graft survey`'s defaults; `encoder`: the sentence encoder
    the surveys use, else their own)."""
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
            except NotFound as exc:
                return _error(str(exc), 404)
            except GraftError as exc:
                return _error(str(exc), _too_long(exc))
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
        params = dict(request.query_params)
        if request.method == "POST":
            params.update({k: v for k, v in (await _body(request)).items() if v is not None})
        paper, text = params.get("paper"), params.get("text")
        if paper is not None and not isinstance(paper, str) or text is not None and not isinstance(text, str):
            raise BadRequest("paper and text must be strings")
        k = params.get("k")
        k = k if isinstance(k, int) else _int(k, DEFAULT_K, "k")
        return {"paper": paper, "text": text, "k": k, "mode": params.get("mode") or "related"}

    async def graph(request: Request) -> Response:
        return _json(await run_in_threadpool(explorer.view, **await view_args(request)))

    async def paper(request: Request) -> Response:
        return _json(await run_in_threadpool(explorer.card, request.path_params["paper_id"]))

    async def export(request: Request) -> Response:
        fmt = request.path_params["fmt"]
        view = await run_in_threadpool(explorer.view, **await view_args(request))
        name = (view["centre"]["paper_id"] or "query").replace("/", "_")
        if fmt == "bib":
            ids = ([view["centre"]["paper_id"]] if view["centre"]["paper_id"] else []) + \
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
        try:
            return _json(surveys.status(request.path_params["name"]))
        except GraftError as exc:
            raise NotFound(str(exc)) from None

    async def survey_bib(request: Request) -> Response:
        try:
            path = surveys.bibtex(request.path_params["name"])
        except GraftError as exc:
            raise NotFound(str(exc)) from None
        return FileResponse(path, media_type="application/x-bibtex", filename=f"{path.parent.name}.bib",
                            headers=_HEADERS)

    async def not_found(request: Request, exc: Exception) -> Response:
        return _error(f"nothing at {request.url.path[:200]}", 404)

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
    app = Starlette(routes=routes, exception_handlers={404: not_found})
    app.state.explorer, app.state.surveys = explorer, surveys
    return app
