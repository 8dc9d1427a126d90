"""Where secrets and a model's words meet GRAFT's files: a build with the LLM extractor and a survey
with an LLM backend against a scripted loopback server (`test_faults.LoopbackServer`), with a
password in the base URL and an API key in the environment.

What must hold: no file written (the index, INDEX/cache/llm.sqlite, the build cache, survey.json,
the manifest) and no line printed holds the password or the key, in any encoding; and every string
the server answers is data: escaped as paper text is before it reaches survey.md (parsed with
markdown-it), references.bib (pybtex, BibTeX) and the terminal."""

from __future__ import annotations

import base64
import json
import re
import shutil
import urllib.parse
from pathlib import Path
from typing import Any

import pytest
import test_faults
from hypothesis import HealthCheck, Phase, example, given, settings
from hypothesis import strategies as st
from test_faults import KEY, KEY_ENV, Act, LoopbackServer, run_cli, tiny_corpus
from test_hostile_text import PIECES, RAW_CONTROL

from graft.llm.prompt import read_data_block

servers, quick_models = test_faults.servers, test_faults.quick_models  # its fixtures, used here too

PASSWORD = "s3cr3tPW-at-rest"
#: What survey.md never holds: C0 and C1 controls and the bidirectional embeddings, overrides and isolates
CONTROLS = "[\x00-\x1f\x7f-\x9f\u202a-\u202e\u2066-\u2069]"
FACET_SYSTEM = "You extract the research facets"


def with_credentials(url: str) -> str:
    return url.replace("http://", f"http://alice:{PASSWORD}@")


def secret_forms() -> list[bytes]:
    """The key and the password as any file might hold them: plain, URL-encoded, in Basic auth."""
    basic = base64.b64encode(f"alice:{PASSWORD}".encode()).decode()
    texts = [KEY, PASSWORD, urllib.parse.quote(PASSWORD), basic, f"alice:{PASSWORD}"]
    return sorted({t.encode("utf-8") for t in texts} | {t.encode("utf-16-le") for t in texts})


def files_holding_secrets(root: Path) -> list[str]:
    found = []
    for path in sorted(p for p in root.rglob("*") if p.is_file()):
        data = path.read_bytes()
        found += [f"{path.relative_to(root)}: {s!r}" for s in secret_forms() if s in data]
    return found


def facet_answer(body: dict[str, Any], extra: str = "") -> str:
    """The facet extractor's answer for the paper of the request: one item per facet naming the
    paper's title, `extra` appended to its result."""
    title = read_data_block(body["messages"][-1]["content"])["title"]
    items = {f: [f"{f} of {title[:40]}"] for f in ("problem", "method", "result", "contribution")}
    items["result"] = [items["result"][0] + extra]
    return json.dumps(items)


def survey_script(body: dict[str, Any]) -> Act:
    from test_survey_pipeline import scripted_model

    reply = scripted_model(0, body)
    return Act(status=reply.status, content=reply.content, body=None if reply.status == 200 else b"{}")


def test_no_secret_is_written_anywhere(llm_index, servers, quick_models, monkeypatch, tmp_path) -> None:
    """survey.json held `"base_url": "http://alice:s3cr3tPW@..."` although the terminal and the
    manifest showed `alice:***@`. Every file the build (`llm_index`, made with the same credentials)
    and a survey wrote, the LLM cache included, is searched for the key and the password."""
    a, b = servers
    monkeypatch.setenv(KEY_ENV, KEY)
    monkeypatch.chdir(tmp_path)  # anything written to the working folder is searched too
    a.script = lambda hit, method, path, body: survey_script(body)
    index = tmp_path / "idx"
    shutil.copytree(llm_index, index)
    res, _ = run_cli(["survey", str(index), "named entity recognition", "--out", str(tmp_path / "survey"),
                      "--llm", "openai", "--model", "m", "--base-url", with_credentials(a.url),
                      "--api-key-env", KEY_ENV, "--sections", "1"])
    assert res.exit_code == 0, res.output
    survey = json.loads((tmp_path / "survey" / "survey.json").read_text())
    assert survey["config"]["base_url"] == a.url.replace("http://", "http://alice:***@")
    assert survey["config"]["api_key_env"] == KEY_ENV
    manifest = json.loads((index / "manifest.json").read_text())
    assert manifest["stages"]["build"]["config"]["llm"]["base_url"].startswith("http://alice:***@127.0.0.1:")
    assert set(a.auth_headers) == {f"Bearer {KEY}"} and b.seen == []
    assert files_holding_secrets(tmp_path) == []
    assert not [s for s in secret_forms() if s.decode("utf-8", "ignore") in res.output]


def test_a_redirecting_server_stops_the_build_at_once(servers, quick_models, monkeypatch, tmp_path) -> None:
    """Every request redirected: the build asked for all of its papers before it stopped; now the
    first redirect ends the rest (at most the requests already in flight are sent)."""
    a, b = servers
    monkeypatch.setenv(KEY_ENV, KEY)
    a.script = lambda hit, method, path, body: Act(status=308, headers={"Location": b.url + "/chat/completions"},
                                                   body=b"")
    corpus = tiny_corpus(tmp_path)
    res, took = run_cli(["build", str(corpus), "--out", str(tmp_path / "idx"), "--extractor", "llm",
                         "--llm-base-url", a.url, "--llm-model", "m", "--llm-api-key-env", KEY_ENV,
                         "--llm-concurrency", "2", "--quiet"])
    assert res.exit_code == 2 and "no usable answer for 11 of 11 papers" in res.output, res.output
    assert 1 <= len(a.seen) <= 2 and b.seen == [] and took < 60


# ---- a model's words as data ---------------------------------------------------------------------

def markdown_problems(md: str) -> list[str]:
    """What in `md` markdown-it reads as something other than text, emphasis, headings, lists and
    tables (the survey's own structure): raw HTML, links, images, code."""
    from markdown_it import MarkdownIt

    tokens = MarkdownIt("commonmark").enable("table").parse(md)
    inline = [c for t in tokens if t.children for c in t.children]
    bad = [t for t in tokens + inline if t.type in ("html_block", "html_inline", "link_open", "image", "fence",
                                                   "code_block")]
    problems = [f"{t.type}: {t.content or t.attrs}" for t in bad]
    found = RAW_CONTROL.search(md.replace("\n", " ").replace("\t", " "))
    return problems + ([f"control character {found.group()!r}"] if found else [])


def rendered_text(md: str) -> str:
    """survey.md as a reader sees it: the text of every inline token, markup removed."""
    from markdown_it import MarkdownIt

    tokens = MarkdownIt("commonmark").enable("table").parse(md)
    return " ".join(c.content for t in tokens if t.children for c in t.children if c.type == "text")


#: Markup the model puts in its section headings. The writer keeps a model's heading only when the
#: section's papers share its content words, so the markup holds none (each word is under three
#: letters): the heading is the topic's words, which the papers share, with HTML, a link, an image,
#: code, a terminal escape, braces and a bidirectional override around them.
HEADING_MARKUP = "<b>x</b> [a](j:1) ![i](y) `c` \x1b]0;t\x07 {b} \u202e <!-- *x* _"


def hostile_script(words: str, lead: str) -> Any:
    """The scripted survey model with `words` in every string it answers: descriptions, section
    descriptions, clause texts, the connective of a second clause, rewrites; and in the facet items
    of a build. Its headings are a paper's title with `HEADING_MARKUP`."""
    def script(hit: int, method: str, path: str, body: dict[str, Any] | None) -> Act:
        assert body is not None
        content = body["messages"][-1]["content"]
        if body["messages"][0]["content"].startswith(FACET_SYSTEM):
            return Act(content=facet_answer(body, f" {words}"))
        data = read_data_block(content)
        if content.startswith("Write ") and "example_papers" in data:
            out: dict[str, Any] = {"descriptions": [f"{data['topic']} {words}"]}
        elif content.startswith("Propose"):
            out = {"sections": [{"title": f"{p['title']} {HEADING_MARKUP} {i}",
                                 "description": f"{words} {p['title']}"}
                                for i, p in enumerate(data["papers"][:2])]}
        elif content.startswith("Write this section"):
            ps = [p for p in data["papers"] if p["method"]]
            pairs = [{"clauses": [{"text": x["method"][0], "cite": x["key"]},
                                  {"lead": lead, "text": y["method"][0], "cite": y["key"]}]}
                     for x, y in zip(ps[::2], ps[1::2])]
            worded = [{"clauses": [{"text": f"{p['method'][0]} {words}", "cite": p["key"]}]} for p in ps[:2]]
            out = {"paragraphs": [{"part": "method", "sentences": pairs + worded}]}
        elif content.startswith("Does the paper say"):
            out = {"supported": True}
        elif content.startswith("Rewrite the claim"):
            out = {"text": f"{data['paper']['sentences'][0]} {words}"}
        else:
            out = {"order": [p["key"] for p in data.get("papers", [])]}
        return Act(content=json.dumps(out))

    return script


#: What the build's model adds to every paper's result item: markup, control characters, braces,
#: a terminal escape, HTML, a fake BibTeX entry.
BUILD_WORDS = "".join(p for p in PIECES if len(p) < 100)


@pytest.fixture(scope="module")
def llm_index(tmp_path_factory, encoder):
    """An index built with the LLM extractor through a base URL with a password and an API key in
    the environment; its model's result items hold `BUILD_WORDS` (what the survey's tables and
    `graft query --explain` then print)."""
    import os

    from graft.llm import LLMCache
    from graphbuild.build import BuildConfig, build_index

    server = LoopbackServer(hostile_script(BUILD_WORDS, "while"))
    os.environ[KEY_ENV] = KEY
    try:
        folder = tmp_path_factory.mktemp("llm-text")
        config = BuildConfig(extractor="llm", llm={"model": "m", "base_url": with_credentials(server.url),
                                                   "api_key_env": KEY_ENV})
        build_index(tiny_corpus(folder), folder / "idx", config, encoder=encoder)
    finally:
        os.environ.pop(KEY_ENV, None)
        server.close()
    with LLMCache(folder / "idx" / "cache" / "llm.sqlite") as cache:
        assert len(cache) == 11  # every paper's facets came from the model
    assert set(server.auth_headers) == {f"Bearer {KEY}"}
    return folder / "idx"


def test_model_text_is_data_in_every_output(llm_index, quick_models, tmp_path_factory) -> None:
    """Hostile strings in everything the scripted model answers (hypothesis): survey.md parses to
    text, headings and tables only, with the model's words shown as written; references.bib formats
    in the plain style; nothing raw reaches the terminal."""
    from bib_check import assert_formats_in_plain_style

    written: list[str] = []

    @settings(max_examples=2, deadline=None, derandomize=True, phases=[Phase.explicit, Phase.generate],
              suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
    @given(words=st.lists(st.sampled_from(PIECES[:-1]) | st.text(max_size=4), min_size=1, max_size=4).map("".join),
           lead=st.sampled_from(["<script>x", "[w](javascript:1)", "\x1b]0;pwn\x07", "![i](x) `c`", "while"]))
    @example(words="<script>x</script> [a](javascript:1) \x1b]0;t\x07 {b} \u202e", lead="[w](javascript:1)")
    def check(words: str, lead: str) -> None:
        folder = tmp_path_factory.mktemp("llm-survey")
        index = folder / "idx"
        shutil.copytree(llm_index, index)
        (index / "cache" / "llm.sqlite").unlink()  # each example's answers, not the cached ones
        server = LoopbackServer(hostile_script(words, lead))
        try:
            res, _ = run_cli(["survey", str(index), "named entity recognition", "--out", str(folder / "s"),
                              "--llm", "openai", "--model", "m", "--base-url", server.url, "--sections", "2"])
        finally:
            server.close()
        assert not RAW_CONTROL.search(res.output.replace("\n", " ").replace("\t", " ")), res.output
        assert res.exit_code == 0, res.output
        md = (folder / "s" / "survey.md").read_text(encoding="utf-8")
        assert markdown_problems(md) == [], md
        shown = " ".join(rendered_text(md).split())
        headings = [" ".join(re.sub(CONTROLS, " ", f"{HEADING_MARKUP} {i}").split()) for i in (0, 1)]
        assert any(h in shown for h in headings), (headings, md)  # as the model wrote it
        # a second clause that survives verification is printed after the model's lead, as written (its
        # escaping on every hostile lead: test_survey_units.test_model_text_in_a_sentence_is_data)
        survey = json.loads((folder / "s" / "survey.json").read_text(encoding="utf-8"))
        printed_leads = [c["lead"] for sec in survey["sections"] for p in sec["paragraphs"] for x in p["sentences"]
                         if not x["dropped"]
                         for c in [c for c in x["clauses"] if c["citation"]["status"] != "removed"][1:]]
        if lead == "[w](javascript:1)" and lead in printed_leads:
            assert ", [w](javascript:1) " in shown, md
        assert_formats_in_plain_style(folder / "s" / "references.bib", folder / "bibtex")
        written.append(md)

    check()
    assert written

    res, _ = run_cli(["query", str(llm_index), "--paper", "inject-1", "--explain"])
    assert res.exit_code == 0 and "result" in res.output and "\\x1b" in res.output, res.output
    assert not RAW_CONTROL.search(res.output.replace("\n", " ").replace("\t", " ")), res.output
