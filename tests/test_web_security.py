"""`graft serve` against a malicious web page and a hostile surveys folder, in process (Starlette's
TestClient) and as a command: no write and no read without the server's token, none from another
origin or under another host name (DNS rebinding), no file served through a symbolic link, a
warning when it listens beyond loopback, and JSON errors for what is malformed. The same attacks
from a real page of another origin, in headless Chromium: tests/test_web_browser.py."""

from __future__ import annotations

import json
import os
import signal
import threading
import urllib.error
import urllib.request
from pathlib import Path

import pytest

pytest.importorskip("starlette")
pytest.importorskip("httpx")

from starlette.testclient import TestClient  # noqa: E402

from graft.web.app import create_app  # noqa: E402

ORIGIN = "http://127.0.0.1:8765"
SECRET = "-----BEGIN OPENSSH PRIVATE KEY----- not-a-real-key 4f1c2d"


@pytest.fixture(scope="module")
def app(web_index, tmp_path_factory):
    """The explorer of the web index (not warmed: no test here needs a view), its surveys folder empty."""
    return create_app(web_index, tmp_path_factory.mktemp("surveys"), warm=False)


@pytest.fixture()
def client(app):
    """A client that names the server as the page does (Host 127.0.0.1:8765) and sends no token."""
    with TestClient(app, base_url=ORIGIN, raise_server_exceptions=False) as c:
        yield c


def token(app) -> str:
    return getattr(app.state, "token", "no-token-on-this-server")


def _surveys_asked(app) -> list[str]:
    """The surveys asked for since the server started."""
    return list(app.state.surveys._jobs)


def _refused(res, status: int = 403) -> str:
    assert res.status_code == status, (res.status_code, res.text)
    assert res.headers["content-type"].startswith("application/json")
    return res.json()["error"]


def test_a_post_from_another_origin_starts_nothing(app, client):
    """The CSRF of issue 47: a text/plain POST from another origin started a survey (202)."""
    body = b'{"topic": "cross site request forgery"}'
    before = _surveys_asked(app)
    attacks = [  # what a page of another origin can send without a CORS preflight, and more
        {"content-type": "text/plain", "origin": "http://evil.example"},
        {"content-type": "text/plain;charset=UTF-8", "origin": "http://127.0.0.1:9999", "sec-fetch-site": "same-site"},
        {"content-type": "application/x-www-form-urlencoded", "origin": "null"},
        {"content-type": "multipart/form-data; boundary=x", "origin": "http://evil.example",
         "sec-fetch-site": "cross-site"},
        {"content-type": "text/plain"},  # no Origin at all (an old browser, curl)
        {"content-type": "application/json"},  # JSON, but no token
        {"content-type": "application/json", "x-graft-token": "x" * len(token(app))},  # a wrong token
        {"content-type": "application/json", "x-graft-token": token(app)[:-1]},
        {"content-type": "application/json", "authorization": "Bearer " + token(app)[::-1]},
        # the token (say it leaked) does not make another origin's request the page's own
        {"content-type": "application/json", "x-graft-token": token(app), "origin": "http://evil.example"},
        {"content-type": "application/json", "x-graft-token": token(app), "origin": "http://127.0.0.1:9999"},
        {"content-type": "application/json", "x-graft-token": token(app), "sec-fetch-site": "same-site"},
        {"content-type": "application/json", "x-graft-token": token(app), "sec-fetch-site": "cross-site"},
    ]
    for headers in attacks:
        message = _refused(client.post("/api/surveys", content=body, headers=headers))
        assert "origin" in message or "site" in message or "token" in message, (headers, message)
    # with the token, a form's content type is still not JSON
    message = _refused(client.post("/api/surveys", content=body, headers={"x-graft-token": token(app),
                                                                            "content-type": "text/plain"}), 415)
    assert "must be JSON" in message
    assert _surveys_asked(app) == before
    # the page's own request passes every check (an empty topic, so no survey is written)
    for own in ({}, {"origin": ORIGIN, "sec-fetch-site": "same-origin"}, {"authorization": "Bearer " + token(app)}):
        headers = {"x-graft-token": token(app), **own} if "authorization" not in own else own
        res = client.post("/api/surveys", json={"topic": ""}, headers=headers)
        assert res.status_code == 400 and "empty" in res.json()["error"], (own, res.text)


def test_every_api_read_needs_the_token_and_the_page_does_not(app, client):
    for path in ("/api/info", "/api/surveys", "/api/search?q=translation", f"/api/paper/{app.state.explorer.index.paper_ids[0]}"):
        assert "token" in _refused(client.get(path))
        assert "token" in _refused(client.get(path, headers={"x-graft-token": "é".encode() * 22}))  # not ASCII: refused, no fault
        assert client.get(path, headers={"x-graft-token": token(app)}).status_code == 200
    assert client.get("/api/info", headers={"authorization": f"Bearer {token(app)}"}).status_code == 200
    # a cross-site read with the token (no browser sends one, but a leaked one is no pass)
    assert "site" in _refused(client.get("/api/info", headers={"x-graft-token": token(app),
                                                                "sec-fetch-site": "cross-site"}))
    for path in ("/", "/static/app.js"):  # the page holds no data: it opens, then asks with its URL's token
        assert client.get(path).status_code == 200


@pytest.mark.parametrize("host", ["attacker.example", "attacker.example:8765", "127.0.0.1.attacker.example:8765",
                                  "127.0.0.1@attacker.example", "", "[::1", "10.0.0.1:8765"])
def test_a_foreign_host_header_is_refused_everywhere(app, client, host):
    """DNS rebinding: a page whose name now resolves to 127.0.0.1 reaches the server with its own
    name in Host. Refused on every path, even with the token."""
    headers = {"host": host, "x-graft-token": token(app)}
    before = _surveys_asked(app)
    for res in (client.get("/", headers=headers), client.get("/api/info", headers=headers),
                client.get("/static/app.js", headers=headers),
                client.post("/api/surveys", json={"topic": "rebinding"}, headers=headers)):
        assert "answers requests to" in _refused(res)
    assert _surveys_asked(app) == before


@pytest.mark.parametrize("host", ["127.0.0.1:8765", "localhost:8765", "LOCALHOST:9000", "[::1]:8765", "127.0.0.1", "localhost.",
                                  "localhost"])
def test_the_servers_own_names_are_accepted_on_any_port(app, client, host):
    """An SSH tunnel (`ssh -L 9000:127.0.0.1:8765`) changes the port the browser names, not the name."""
    assert client.get("/api/info", headers={"host": host, "x-graft-token": token(app)}).status_code == 200


def test_the_guard_alone():
    """graft.web.guard: hosts allowed for a --host, --allow-host names, tokens, and what a refusal is."""
    from starlette.applications import Starlette
    from starlette.responses import PlainTextResponse
    from starlette.routing import Route

    from graft.web.guard import Guard, allowed_hosts, check_token, host_name, is_loopback, new_token

    assert is_loopback("127.0.0.1") and is_loopback("::1") and is_loopback("localhost") and is_loopback("127.1.2.3")
    assert not is_loopback("0.0.0.0") and not is_loopback("192.168.1.5") and not is_loopback("example.org")
    assert host_name("[::1]:8765") == "::1" and host_name("LocalHost.:1") == "localhost"
    assert host_name("a b") is None and host_name("x:y") is None and host_name("user@host") is None
    assert allowed_hosts("127.0.0.1") == {"localhost", "127.0.0.1", "::1"}
    assert allowed_hosts("192.168.1.5", ["Graft.Example."]) == {"localhost", "127.0.0.1", "::1", "192.168.1.5",
                                                                 "graft.example"}
    assert len(new_token()) >= 43 and new_token() != new_token()
    for bad in ("short", "x" * 257, "has space in it!!", "ünïcødé-ünïcødé-ü", "a/b?c=d&e#fghijklmn"):
        with pytest.raises(ValueError, match="16 to 256"):
            check_token(bad)
    assert check_token("my-scripts-token.2024~x") == "my-scripts-token.2024~x"

    inner = Starlette(routes=[Route("/api/x", lambda r: PlainTextResponse("ok"), methods=["GET", "POST"])])
    app = Guard(inner, "t" * 20, allowed_hosts("192.168.1.5", ["graft.example"]))
    with TestClient(app, base_url="http://graft.example:8765", raise_server_exceptions=False) as c:
        ok = {"x-graft-token": "t" * 20}
        assert c.get("/api/x", headers=ok).text == "ok"
        assert c.get("/api/x", headers={**ok, "host": "192.168.1.5:8765"}).text == "ok"
        assert c.get("/api/x", headers={**ok, "host": "192.168.1.6:8765"}).status_code == 403
        assert c.post("/api/x", json={}, headers={**ok, "origin": "http://graft.example:8765"}).text == "ok"
        assert c.post("/api/x", json={}, headers={**ok, "origin": "https://graft.example:8765"}).text == "ok"
        assert c.post("/api/x", json={}, headers={**ok, "origin": "http://graft.example:8766"}).status_code == 403
        assert c.post("/api/x", content=b"{}", headers={**ok, "content-type": "text/plain"}).status_code == 415


@pytest.fixture(scope="module")
def hostile_surveys(app):
    """A surveys folder holding a written survey `good`, and surveys whose files or folders are links
    to a secret outside it (what `ln -s ~/.ssh/id_rsa SURVEYS/x/references.bib` makes)."""
    folder = app.state.surveys.folder
    folder.mkdir(parents=True, exist_ok=True)
    outside = folder.parent / f"outside-{folder.name}"
    outside.mkdir(exist_ok=True)
    secret = outside / "id_rsa"
    secret.write_text(SECRET)
    (outside / "secret.json").write_text(json.dumps({"topic": SECRET, "references": []}))

    def survey(name: str, **files: str) -> Path:
        d = folder / name
        d.mkdir()
        record = {"topic": name, "title": name, "references": [{"number": 1, "paper_id": "P1"}]}
        defaults = {"survey.md": f"# {name}\n\nA claim [1].\n", "survey.json": json.dumps(record),
                    "references.bib": "@misc{P1, title={A}}\n"}
        for fname, text in {**defaults, **files}.items():
            (d / fname).write_text(text)
        return d

    survey("good")
    (survey("bib-link", **{"references.bib": "x"}) / "references.bib").unlink()
    (folder / "bib-link" / "references.bib").symlink_to(secret)
    (survey("md-link", **{"survey.md": "x"}) / "survey.md").unlink()
    (folder / "md-link" / "survey.md").symlink_to(secret)
    (survey("json-link") / "survey.json").unlink()
    (folder / "json-link" / "survey.json").symlink_to(outside / "secret.json")
    real = outside / "folder-link"
    real.mkdir()
    for fname in ("survey.md", "references.bib"):
        (real / fname).write_text(SECRET)
    (real / "survey.json").write_text(json.dumps({"topic": SECRET, "references": []}))
    (folder / "folder-link").symlink_to(real, target_is_directory=True)
    (survey("fifo", **{"references.bib": "x"}) / "references.bib").unlink()
    os.mkfifo(folder / "fifo" / "references.bib")
    survey("broken-json", **{"survey.json": '{"topic": "broken", "references": [1, 2'})
    survey("bad-refs", **{"survey.json": json.dumps({"topic": "bad refs", "references": [{"no": 1}]})})
    survey("not-object", **{"survey.json": "[1, 2]"})
    return folder


def test_no_survey_file_is_served_through_a_symbolic_link(app, client, hostile_surveys):
    """Issue 47: a references.bib linked to ~/.ssh/id_rsa was served (a linked folder was not)."""
    ok = {"x-graft-token": token(app)}
    good = client.get("/api/surveys/good/references.bib", headers=ok)
    assert good.status_code == 200 and good.text == "@misc{P1, title={A}}\n"
    assert "attachment" in good.headers["content-disposition"]
    assert client.get("/api/surveys/good", headers=ok).json()["references"] == {"1": "P1"}
    for path in ("/api/surveys/bib-link/references.bib", "/api/surveys/md-link", "/api/surveys/json-link",
                 "/api/surveys/folder-link", "/api/surveys/folder-link/references.bib"):
        res = client.get(path, headers=ok)
        assert SECRET not in res.text and "not-a-real-key" not in res.text, path
        assert "symbolic link" in _refused(res), path
    res = client.get("/api/surveys/fifo/references.bib", headers=ok)  # answered at once, never blocks on it
    assert "not a plain file" in _refused(res)
    listed = client.get("/api/surveys", headers=ok)
    assert SECRET not in listed.text
    names = {s["name"] for s in listed.json()}
    assert {"good", "md-link", "broken-json"} <= names and not names & {"json-link", "folder-link"}


def test_a_broken_survey_json_is_a_json_error_naming_the_file(app, client, hostile_surveys):
    ok = {"x-graft-token": token(app)}
    for name, words in (("broken-json", "not valid JSON"), ("bad-refs", "not what `graft survey` writes"),
                        ("not-object", "not a JSON object")):
        res = client.get(f"/api/surveys/{name}", headers=ok)
        assert res.status_code == 500 and res.headers["content-type"] == "application/json", res.text
        error = res.json()["error"]
        assert "survey.json" in error and words in error and name in error, error
    listed = {s["name"]: s for s in client.get("/api/surveys", headers=ok).json()}
    assert listed["broken-json"]["topic"] is None  # listed, so that opening it says what is wrong


@pytest.mark.parametrize("body", [b'{"k": [1]}', b'{"k": Infinity}', b'{"k": 1e400}', b'{"k": 2.5}',
                                  b'{"paper": "x", "k": {"a": 1}}', b'{"mode": ["related"]}', b'{"q": 5}',
                                  b'{"topic": {"a": 1}}', b"[" * 100_000 + b"]" * 100_000, b"\xff\xfe{",
                                  b'{"text": "' + b"\\ud800" * 3 + b'"}'])
def test_malformed_bodies_get_a_json_4xx(app, client, body):
    """They gave a plain-text 500 (`Internal Server Error`) from /api/graph and /api/export/bib."""
    before = _surveys_asked(app)
    for path in ("/api/graph", "/api/export/bib", "/api/search", "/api/surveys"):
        res = client.post(path, content=body, headers={"x-graft-token": token(app),
                                                       "content-type": "application/json"})
        assert 400 <= res.status_code < 500 and res.headers["content-type"] == "application/json", \
            (path, body[:40], res.status_code, res.text[:200])
        assert res.json()["error"]
    assert _surveys_asked(app) == before


def test_a_wrong_method_is_a_json_405(app, client):
    res = client.put("/api/info", headers={"x-graft-token": token(app)})
    assert res.status_code == 405 and res.json()["error"].startswith("Method Not Allowed")
    assert res.headers["allow"]


def test_a_full_survey_queue_is_a_conflict_409(web_index, tmp_path):
    """The queue's docstring said 409 and it answered 400."""
    from graft.web.surveys import MAX_WAITING

    app = create_app(web_index, tmp_path / "surveys", warm=False)
    release = threading.Event()
    written: list[str] = []

    def write(topic, out, reporter):
        release.wait(60)
        written.append(topic)

    app.state.surveys._write = write
    with TestClient(app, base_url=ORIGIN, headers={"x-graft-token": token(app)}) as c:
        try:
            for n in range(MAX_WAITING + 1):  # one written, MAX_WAITING waiting
                assert c.post("/api/surveys", json={"topic": f"topic number {n}"}).status_code == 202
            res = c.post("/api/surveys", json={"topic": "one too many"})
            assert res.status_code == 409 and "already being written or waiting" in res.json()["error"]
        finally:
            release.set()


def test_a_link_named_as_a_new_survey_is_never_written_through(tmp_path):
    """A link (even one pointing nowhere) where a new survey's folder would go: the survey gets the
    next name, and the link's target stays untouched."""
    from graft.web.surveys import Surveys

    folder = tmp_path / "surveys"
    folder.mkdir()
    (folder / "machine-translation").symlink_to(tmp_path / "elsewhere", target_is_directory=True)
    done = threading.Event()
    surveys = Surveys(folder, lambda topic, out, rep: (out.mkdir(), done.set()), lambda t: t)
    job = surveys.start("Machine translation")
    assert done.wait(10) and job.name == "machine-translation-2"
    assert not (tmp_path / "elsewhere").exists()


def _get(url: str, host: str | None = None, tok: str | None = None) -> tuple[int, str]:
    headers = {k: v for k, v in (("Host", host), ("X-Graft-Token", tok)) if v}
    try:
        with urllib.request.urlopen(urllib.request.Request(url, headers=headers), timeout=30) as res:
            return res.status, res.read().decode()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read().decode()


def test_serve_beyond_loopback_warns_and_still_needs_the_token(web_index, tmp_path):
    """`graft serve --host 0.0.0.0` served the index to the network without a word. Now it warns,
    says how to use an SSH tunnel instead, and every API request still needs the token (here one
    given in GRAFT_SERVE_TOKEN, as a script would)."""
    from experiments.browser import start_server, token_of

    given = "scripted-token-0123456789"
    proc, url = start_server(web_index, tmp_path / "surveys", args=("--host", "0.0.0.0"),
                             env={"GRAFT_SERVE_TOKEN": given})
    try:
        printed = proc.printed
        assert "warning: --host 0.0.0.0 is not a loopback address" in printed and "ssh -L" in printed
        assert token_of(url) == given
        port = url.split("?")[0].rstrip("/").rsplit(":", 1)[1]
        local = f"http://127.0.0.1:{port}"
        assert _get(local + "/api/info")[0] == 403
        status, text = _get(local + "/api/info", tok=given)
        assert status == 200 and json.loads(text)["papers"] == 40
        assert _get(local + "/api/info", host=f"attacker.example:{port}", tok=given)[0] == 403
    finally:
        proc.send_signal(signal.SIGINT)
        proc.communicate(timeout=60)


def test_serve_on_loopback_prints_its_url_with_a_token_and_no_warning(web_index, tmp_path):
    from experiments.browser import start_server, token_of

    proc, url = start_server(web_index, tmp_path / "surveys")
    try:
        assert "warning" not in proc.printed
        assert url.startswith("http://127.0.0.1:") and len(token_of(url)) >= 43
        assert _get(url.split("?")[0] + "api/info", tok=token_of(url))[0] == 200
    finally:
        proc.send_signal(signal.SIGINT)
        proc.communicate(timeout=60)


def test_serve_refuses_a_weak_token_before_loading_anything(tmp_path, monkeypatch):
    from typer.testing import CliRunner

    from cli.app import app

    monkeypatch.setenv("GRAFT_SERVE_TOKEN", "short")
    run = CliRunner().invoke(app, ["serve", str(tmp_path / "no-index"), "--port", "0"])
    assert run.exit_code == 2 and "GRAFT_SERVE_TOKEN" in run.output and "16 to 256" in run.output
    assert "loading" not in run.output
