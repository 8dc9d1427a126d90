"""`graft serve`'s JSON API, in process (Starlette's TestClient): find, views, cards, exports,
surveys, and bad input answered with a message."""

from __future__ import annotations

import io
import json
import re
import time
from pathlib import Path

import networkx as nx
import numpy as np
import pytest

pytest.importorskip("starlette")
pytest.importorskip("httpx")

from starlette.testclient import TestClient  # noqa: E402

from graft.facets import FACETS  # noqa: E402
from graft.survey.config import SurveyConfig  # noqa: E402
from graft.web.app import create_app  # noqa: E402
from graft.web.data import MAX_TEXT_CHARS  # noqa: E402

pytestmark = pytest.mark.usefixtures("torch_one_thread")

SURVEY = SurveyConfig(sections=2, pool=20, section_pool=8, papers_per_section=5)


def _snapshot(folder: Path) -> dict[str, tuple[int, int]]:
    return {str(p.relative_to(folder)): (p.stat().st_mtime_ns, p.stat().st_size)
            for p in folder.rglob("*") if p.is_file()}


@pytest.fixture(scope="module")
def served(web_index, tmp_path_factory, encoder):
    from graft.index import Index

    before = _snapshot(web_index)
    surveys = tmp_path_factory.mktemp("surveys")
    app = create_app(web_index, surveys, survey_config=SURVEY, encoder=encoder)
    # as the page asks: this server's name in Host, its token in a header (tests/test_web_security.py
    # checks the requests without them)
    with TestClient(app, base_url="http://127.0.0.1:8765", headers={"X-Graft-Token": app.state.token}) as client:
        yield client, Index.open(web_index), surveys
    assert _snapshot(web_index) == before, "the explorer wrote into the index"


def test_page_and_assets_are_local(served):
    client, _, _ = served
    page = client.get("/")
    assert page.status_code == 200 and "text/html" in page.headers["content-type"]
    assert "script-src 'self'" in page.headers["content-security-policy"]
    scripts = re.findall(r'<script src="([^"]+)"', page.text)
    assert scripts == ["/static/vendor/cytoscape.min.js", "/static/vendor/layout-base.js",
                       "/static/vendor/cose-base.js", "/static/vendor/cytoscape-fcose.js", "/static/app.js"]
    for src in scripts:
        assert client.get(src).status_code == 200
    for name in ("index.html", "app.js", "style.css"):  # nothing fetched from elsewhere at run time
        text = (Path(create_app.__code__.co_filename).parent / "static" / name).read_text()
        assert not re.search(r"(src|href)=\"?(https?:)?//", text), name
        assert "fetch(\"http" not in text


def test_info(served):
    client, idx, _ = served
    info = client.get("/api/info").json()
    assert info["papers"] == idx.n == 40 and info["example"] in idx.row_of
    assert info["facets"] == list(FACETS)


def test_search_id_title_and_text(served):
    client, idx, _ = served
    pid = idx.paper_ids[5]
    title = idx.papers["title"][5]
    got = client.get("/api/search", params={"q": pid}).json()
    assert got["kind"] == "id" and got["matches"][0]["paper_id"] == pid
    fragment = " ".join(title.split()[1:4])
    got = client.get("/api/search", params={"q": fragment.lower()}).json()
    assert got["kind"] == "title"
    assert pid in [m["paper_id"] for m in got["matches"][:3]], (fragment, got)
    assert all(m["score"] <= got["matches"][0]["score"] for m in got["matches"])
    text = f"{title}. {idx.papers['abstract'][5]}"
    assert client.post("/api/search", json={"q": text}).json()["kind"] == "text"


def test_title_search_ranks_as_word_sets_do(web_index):
    """The title search (columnar: a regular expression a word over the lower-cased titles) ranks
    titles as the word-set reference below does: the idf share of the fragment's words a title
    holds, plus 1 where it holds the whole fragment; ties by the shorter title, then the row."""
    import math
    import re

    from graft.web.data import Explorer

    explorer = Explorer(web_index)
    idx = explorer.index
    titles = [str(t or "").lower() for t in idx.papers["title"].to_list()]
    words_of = [set(re.findall(r"\w+", t)) for t in titles]
    df: dict[str, int] = {}
    for ws in words_of:
        for w in ws:
            df[w] = df.get(w, 0) + 1
    idf = {w: math.log(1 + len(titles) / c) for w, c in df.items()}
    asked = ["summarization", "neural summar", " ".join(titles[3].split()[:3]), "of the", "zzzz qqqq",
             "Evaluation Metrics", "multi-document"]
    found = 0
    for q in asked:
        frag, qwords = " ".join(q.lower().split()), set(re.findall(r"\w+", q.lower()))
        total = sum(idf.get(w, 0.0) for w in qwords) or 1.0
        ranked = []
        for row, (title, ws) in enumerate(zip(titles, words_of)):
            whole = frag in title
            share = sum(idf.get(w, 0.0) for w in qwords & ws) / total
            if whole or share > 0:
                ranked.append((-(whole + share), len(title), row))
        want = [(idx.paper_ids[row], round(-s / 2, 4)) for s, _, row in sorted(ranked)[:10]]
        got = explorer.search(q)
        assert got["kind"] == "title"
        assert [(m["paper_id"], m["score"]) for m in got["matches"]] == want or not want, q
        found += bool(want)
    assert found >= 5


def test_view_holds_the_facts_of_query_json(served, web_index):
    """The results list is `graft query --paper ID --json --explain`'s answer, hit for hit."""
    from typer.testing import CliRunner

    from cli.app import app

    client, idx, _ = served
    pid = idx.paper_ids[0]
    view = client.get("/api/graph", params={"paper": pid, "k": 10}).json()
    run = CliRunner().invoke(app, ["query", str(web_index), "--paper", pid, "--k", "10", "--json", "--explain"])
    assert run.exit_code == 0, run.output
    cli = json.loads(run.stdout)["hits"]
    assert [h["paper_id"] for h in view["hits"]] == [h["paper_id"] for h in cli]
    for mine, theirs in zip(view["hits"], cli):
        for key in ("rank", "score", "facets", "evidence", "citation", "title", "year"):
            assert mine[key] == theirs[key], key
        assert mine["label"]  # the facet label shown beside each hit
    assert view["centre"]["paper_id"] == pid and len(view["hits"]) == 10
    # edges: each hit is linked to the centre by each facet that credits it, with that credit's weight
    shown = {(e["target"], e["facet"]): e for e in view["edges"] if e["centre"] and e["facet"] != "citation"}
    for h in view["hits"]:
        for facet, ev in h["evidence"].items():
            if ev["weight"] > 0:
                assert shown[(h["paper_id"], facet)]["weight"] == round(ev["weight"], 4)
                assert shown[(h["paper_id"], facet)]["source"] == pid
    ids = {pid, *(h["paper_id"] for h in view["hits"])}
    assert all(e["source"] in ids and e["target"] in ids for e in view["edges"])
    assert {e["facet"] for e in view["edges"]} <= {*FACETS, "citation"}
    # citation links: every one among the papers shown, dashed on the page
    wide = client.get("/api/graph", params={"paper": pid, "k": 39}).json()
    ids = {pid, *(h["paper_id"] for h in wide["hits"])}
    cites = {(e["source"], e["target"]) for e in wide["edges"] if e["facet"] == "citation"}
    links = zip(idx.citations["citing"].to_list(), idx.citations["cited"].to_list())
    expected = {(a, b) for a, b in links if a in ids and b in ids}
    assert {(pid, q) for q in idx.paper_ids[1:4]} & expected, "the planted citations are not in the view"
    assert cites == expected


def test_pivot_same_problem_different_method(served):
    client, idx, _ = served
    pid = idx.paper_ids[0]
    view = client.get("/api/graph", params={"paper": pid, "k": 8, "mode": "pivot"}).json()
    assert view["mode"] == "pivot" and view["hits"]
    gaps = [h["pivot"]["problem"] - h["pivot"]["method"] for h in view["hits"]]
    assert gaps == sorted(gaps, reverse=True)
    for h in view["hits"]:
        assert h["pivot"]["problem"] == round(h["evidence"]["problem"]["weight"], 4) > 0
        assert h["pivot"]["method"] == round(h["evidence"].get("method", {"weight": 0.0})["weight"], 4)
    related = client.get("/api/graph", params={"paper": pid, "k": 8}).json()
    assert [h["paper_id"] for h in view["hits"]] != [h["paper_id"] for h in related["hits"]]


def test_text_query_view(served):
    client, idx, _ = served
    text = f"{idx.papers['title'][7]}. {idx.papers['abstract'][7]}"
    view = client.post("/api/graph", json={"text": text, "k": 5}).json()
    assert view["centre"]["outside"] and view["centre"]["paper_id"] is None
    assert len(view["hits"]) == 5 and any(view["centre"]["facets"].values())
    assert all(e["source"] in {view["centre"]["id"], *(h["paper_id"] for h in view["hits"])} for e in view["edges"])
    assert all(e["centre"] for e in view["edges"] if view["centre"]["id"] in (e["source"], e["target"]))


def test_card(served):
    client, idx, _ = served
    pid = idx.paper_ids[0]
    card = client.get(f"/api/paper/{pid}").json()
    assert card["title"] == idx.papers["title"][0] and "<script>" in card["title"]
    assert card["facets"] == idx.paper_facets(pid)
    assert card["references_in_corpus"] == 3 and card["abstract"]


@pytest.mark.parametrize("path, status, words", [
    ("/api/paper/no-such-paper", 404, "not in index"),
    ("/api/paper/%3Cscript%3Ealert(1)%3C%2Fscript%3E", 404, "not in index"),
    ("/api/paper/..%2F..%2Fmanifest.json", 404, "not in index"),
    ("/api/graph?paper=no-such-paper", 404, "not in index"),
    ("/api/graph?paper=" + "%20" * 3, 404, "empty"),
    ("/api/graph", 400, "give a paper id or a text"),
    ("/api/graph?paper=X&k=0", 400, "k must be"),
    ("/api/graph?paper=X&k=1000", 400, "k must be"),
    ("/api/graph?paper=X&k=two", 400, "whole number"),
    ("/api/graph?paper=X&mode=drop-tables", 400, "unknown mode"),
    ("/api/search?q=", 400, "empty"),
    ("/api/search?q=%20%3F%3F%20", 400, "no words"),
    ("/api/search", 400, "give the search text"),
    ("/api/export/exe?paper=X", 404, "unknown export format"),
    ("/api/surveys/..%2F..%2Fetc", 404, "no survey|nothing at"),
    ("/api/surveys/no-such-survey", 404, "no survey"),
    ("/api/surveys/..%2Fidx/references.bib", 404, "no survey|nothing at"),
    ("/api/surveys/.hidden/references.bib", 404, "no survey"),
    ("/static/..%2F..%2Fdata.py", 404, ""),
    ("/static/../app.py", 404, ""),
    ("/no/such/page", 404, "nothing at"),
])
def test_bad_requests_get_a_message(served, path, status, words):
    client, idx, _ = served
    res = client.get(path.replace("paper=X", f"paper={idx.paper_ids[0]}"))
    assert res.status_code == status, res.text
    if words:
        assert res.headers["content-type"].startswith("application/json")
        assert re.search(words, res.json()["error"]), res.json()


def test_huge_and_malformed_bodies(served):
    client, _, _ = served
    abstract = "Title of a paper. " + "word " * (2**20 // 5)  # a 1 MB abstract
    for path, key in (("/api/graph", "text"), ("/api/search", "q")):
        res = client.post(path, json={key: abstract})
        assert res.status_code == 413 and f"{MAX_TEXT_CHARS:,}" in res.json()["error"]
    just_over = "a " * (MAX_TEXT_CHARS // 2 + 10)
    res = client.post("/api/graph", json={"text": just_over})
    assert res.status_code == 413 and "characters long" in res.json()["error"]
    res = client.post("/api/graph", content=b"{not json", headers={"content-type": "application/json"})
    assert res.status_code == 400 and "not JSON" in res.json()["error"]
    res = client.post("/api/graph", json=["a list"])
    assert res.status_code == 400 and "JSON object" in res.json()["error"]
    res = client.post("/api/graph", json={"paper": ["not", "a", "string"]})
    assert res.status_code == 400


def test_exports(served):
    from pybtex.database import parse_string

    client, idx, _ = served
    pid = idx.paper_ids[0]
    view = client.get("/api/graph", params={"paper": pid, "k": 6}).json()
    bib = client.post("/api/export/bib", json={"paper": pid, "k": 6})
    assert bib.status_code == 200 and "attachment" in bib.headers["content-disposition"]
    entries = parse_string(bib.text, "bibtex").entries
    assert len(entries) == 7
    notes = [e.fields["note"] for e in entries.values()]
    assert notes[0] == f"corpus id {pid}" and all(h["paper_id"] in " ".join(notes) for h in view["hits"])
    wide = client.get("/api/graph", params={"paper": pid, "k": 39}).json()  # with the planted citations
    gml = client.get("/api/export/graphml", params={"paper": pid, "k": 39})
    assert gml.status_code == 200
    g = nx.read_graphml(io.BytesIO(gml.content))
    assert g.number_of_nodes() == 1 + len(wide["hits"]) and g.number_of_edges() == len(wide["edges"])
    assert sorted((a, b, d["facet"] or "citation", d["weight"]) for a, b, d in g.edges(data=True)) == \
        sorted((e["source"], e["target"], e["facet"], e["weight"]) for e in wide["edges"])
    assert "<script>" in g.nodes[pid]["title"]  # kept as text, escaped by the XML writer
    assert {d["facet"] for _, _, d in g.edges(data=True)} <= {*FACETS, ""}
    assert {d["relation"] for _, _, d in g.edges(data=True)} == {"facet", "citation"}


def _wait(client, name: str, timeout: float = 600) -> dict:
    start = time.time()
    seen = set()
    while time.time() - start < timeout:
        s = client.get(f"/api/surveys/{name}").json()
        seen.add(s.get("stage"))
        if s["state"] in ("done", "failed"):
            s["seen_stages"] = seen
            return s
        time.sleep(0.5)
    raise AssertionError(f"survey {name} not written in {timeout} s")


def test_survey_from_the_page(served):
    client, idx, surveys = served
    # a topic the corpus covers: its best paper stays above SurveyConfig.min_relevance with the markup around it
    topic = "<script>window.__pwned=1</script> neural machine translation *bold* $x^2$ \"quoted\""
    res = client.post("/api/surveys", json={"topic": topic})
    assert res.status_code == 202, res.text
    job = res.json()
    assert job["name"] == "script-window-pwned-1-script-neural-machine-translation-bold-x-2-quoted"[:60]
    assert job["state"] in ("queued", "running")
    s = _wait(client, job["name"])
    assert s["state"] == "done", s
    assert "<script" not in s["html"] and "&lt;script&gt;" in s["html"]  # the topic in the title, as text
    folder = surveys / job["name"]
    assert {p.name for p in folder.iterdir()} >= {"survey.md", "survey.json", "references.bib"}
    refs = json.loads((folder / "survey.json").read_text())["references"]
    links = re.findall(r'<a href="#" class="cite" data-paper="([^"]+)">\[(\d+)\]</a>', s["html"])
    assert links and all(dict((str(r["number"]), r["paper_id"]) for r in refs)[n] == pid for pid, n in links)
    assert {pid for pid, _ in links} <= set(idx.row_of)
    bib = client.get(f"/api/surveys/{job['name']}/references.bib")
    assert bib.status_code == 200 and bib.text == (folder / "references.bib").read_text()
    listed = client.get("/api/surveys").json()
    assert job["name"] in [x["name"] for x in listed]
    # the same topic again: a new folder, never the old one overwritten
    again = client.post("/api/surveys", json={"topic": topic}).json()
    assert again["name"] == job["name"][:56].rstrip("-") + "-2"
    assert _wait(client, again["name"])["state"] == "done"


@pytest.mark.parametrize("topic, status, words", [("", 400, "empty"), ("   ", 400, "empty"), ("?? !!", 400, "no words"),
                                                  ("x" * 600, 413, "at most 500"), (None, 400, "must be a text"),
                                                  (["a"], 400, "must be a text")])
def test_bad_topics(served, topic, status, words):
    client, _, _ = served
    res = client.post("/api/surveys", json={"topic": topic})
    assert res.status_code == status and words in res.json()["error"]


def test_render_survey_escapes_html_and_links_citations():
    from graft.web.surveys import render_survey

    html = render_survey("# T <b>x</b>\n\nA claim [1], another [2] and [9].\n\n<script>alert(1)</script>\n",
                         {1: "P1", 2: 'Q"2'})
    assert "<script>" not in html and "<b>" not in html
    assert '<a href="#" class="cite" data-paper="P1">[1]</a>' in html
    assert 'data-paper="Q&quot;2"' in html and "[9]" in html and 'data-paper="None"' not in html


def test_serve_refuses_a_missing_index_and_a_busy_port(tmp_path, web_index):
    import socket

    from typer.testing import CliRunner

    from cli.app import app

    run = CliRunner().invoke(app, ["serve", str(tmp_path / "nothing"), "--port", "0"])
    assert run.exit_code == 2 and "graft build" in run.output
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        run = CliRunner().invoke(app, ["serve", str(web_index), "--port", str(port), "--surveys", str(tmp_path)])
    assert run.exit_code == 2 and f"cannot listen on 127.0.0.1:{port}" in run.output


def test_several_tabs_at_once(served):
    """Views asked for at the same time (several tabs) get the answers they get one at a time."""
    from concurrent.futures import ThreadPoolExecutor

    client, idx, _ = served
    asks = [{"paper": pid, "k": k, "mode": mode} for pid in idx.paper_ids[10:14] for k, mode in ((5, "related"),
                                                                                              (12, "pivot"))]
    alone = [client.get("/api/graph", params=a).json() for a in asks]
    with ThreadPoolExecutor(max_workers=4) as pool:
        together = list(pool.map(lambda a: client.get("/api/graph", params=a).json(), asks))
    assert together == alone


def test_year_and_venue_filters(served):
    """The filters are QueryConfig's since/until/venues: the view's results are the filtered query's."""
    from graft.query import QueryConfig

    client, idx, _ = served
    pid = idx.paper_ids[0]
    info = client.get("/api/info").json()
    years = sorted({y for y in idx.papers["year"].to_list() if y is not None})
    assert info["years"] == [years[0], years[-1]]
    assert sum(v["papers"] for v in info["venues"]) == sum(1 for v in idx.papers["venue"].to_list() if v)
    mid = years[len(years) // 2]
    sizes = []
    for params in ({"since": mid}, {"until": years[0]}, {"since": years[0], "until": mid}):
        view = client.get("/api/graph", params={"paper": pid, "k": 39, **params}).json()
        want = idx.searcher(QueryConfig(retriever="teacher", k=39, **params)).paper(pid)
        assert [h["paper_id"] for h in view["hits"]] == [h.paper_id for h in want.hits]
        assert view["hits"] and all(params.get("since", 0) <= h["year"] <= params.get("until", 9999)
                                    for h in view["hits"])
        assert view["filters"]["since"] == params.get("since")
        sizes.append(len(view["hits"]))
    everything = client.get("/api/graph", params={"paper": pid, "k": 39}).json()
    assert max(sizes[:2]) < len(everything["hits"])  # each year filter left some out
    venue = info["venues"][0]["venue"]
    by_venue = client.get("/api/graph", params={"paper": pid, "k": 39, "venue": venue.upper()}).json()
    venue_of = dict(zip(idx.paper_ids, idx.papers["venue"].to_list()))
    assert by_venue["hits"] and {venue_of[h["paper_id"]] for h in by_venue["hits"]} == {venue}
    posted = client.post("/api/graph", json={"paper": pid, "k": 39, "venues": [venue]}).json()
    assert [h["paper_id"] for h in posted["hits"]] == [h["paper_id"] for h in by_venue["hits"]]
    for params, words in (({"since": 2020, "until": 2010}, "is after until"), ({"since": "soon"}, "whole number")):
        res = client.get("/api/graph", params={"paper": pid, **params})
        assert res.status_code == 400 and words in res.json()["error"], res.text
    res = client.post("/api/graph", json={"paper": pid, "venues": "ACL"})
    assert res.status_code == 400 and "list" in res.json()["error"]


def test_one_link_per_pair_styled_by_its_strongest_facet(served):
    client, idx, _ = served
    pid = idx.paper_ids[0]
    view = client.get("/api/graph", params={"paper": pid, "k": 39}).json()
    pairs = [frozenset((lk["source"], lk["target"])) for lk in view["links"]]
    assert len(pairs) == len(set(pairs)) and len(pairs) >= len(view["hits"])
    facets: dict = {}
    cites: dict = {}
    for e in view["edges"]:
        key = frozenset((e["source"], e["target"]))
        if e["facet"] == "citation":
            cites.setdefault(key, set()).add((e["source"], e["target"]))
        else:
            facets.setdefault(key, {})[e["facet"]] = e["weight"]
    assert set(pairs) == set(facets) | set(cites)
    for lk in view["links"]:
        key = frozenset((lk["source"], lk["target"]))
        assert lk["facets"] == facets.get(key, {})
        if lk["facets"]:
            assert lk["facet"] == max(lk["facets"], key=lk["facets"].get) and lk["weight"] == max(lk["facets"].values())
        else:
            assert lk["facet"] == "citation"
        got = {(lk["source"], lk["target"]) if d == "forward" else (lk["target"], lk["source"]) for d in lk["cites"]}
        assert got == cites.get(key, set())
    # the planted citations (the centre cites the next three papers) ride on the centre's links
    centre_links = {lk["target"]: lk for lk in view["links"] if lk["source"] == pid}
    assert any("forward" in centre_links[q]["cites"] for q in idx.paper_ids[1:4] if q in centre_links)


def test_prior_and_derivative_works(served):
    """Over the view's papers, counted over in-corpus citation links (Connected Papers' definition)."""
    client, idx, _ = served
    links = list(zip(idx.citations["citing"].to_list(), idx.citations["cited"].to_list()))
    for pid in (idx.paper_ids[0], idx.paper_ids[2]):
        view = client.get("/api/graph", params={"paper": pid, "k": 39}).json()
        shown = {pid, *(h["paper_id"] for h in view["hits"])}
        prior = {b: sum(1 for a, c in links if c == b and a in shown) for _, b in links}
        derivative = {a: sum(1 for c, b in links if c == a and b in shown) for a, _ in links}
        for listed, counts in ((view["prior"], prior), (view["derivative"], derivative)):
            want = {p: n for p, n in counts.items() if n > 0}
            assert {p["paper_id"]: p["count"] for p in listed} == want  # fewer than LINEAGE_K here
            assert all(p["in_view"] == (p["paper_id"] in shown) for p in listed)
            assert [p["count"] for p in listed] == sorted((p["count"] for p in listed), reverse=True)
        assert view["prior"] or view["derivative"]
    first = client.get("/api/graph", params={"paper": idx.paper_ids[0], "k": 39}).json()
    assert {p["paper_id"] for p in first["prior"]} >= set(idx.paper_ids[1:4])  # what the centre cites


def test_node_facts_links_out_and_the_score_meaning(served, web_index):
    import polars as pl

    from graft.web.data import Explorer

    client, idx, _ = served
    pid = idx.paper_ids[0]
    view = client.get("/api/graph", params={"paper": pid, "k": 10}).json()
    cited_by = dict(zip(*np.unique(idx.citations["cited"].to_list(), return_counts=True)))
    for node in (view["centre"], *view["hits"]):
        assert node["cited_by"] == cited_by.get(node["paper_id"], 0)
        assert node["links"]["url"].startswith("https://aclanthology.org/")  # ACLSum's ids are ACL ids
    assert "rank" in view["score"]["meaning"] and view["score"]["name"]
    card = client.get(f"/api/paper/{pid}").json()
    assert card["links"] == view["centre"]["links"]
    # records with doi / arxiv / url fields link to them; an arXiv-like id links to arXiv
    explorer = Explorer(web_index)
    papers = explorer.index.papers.with_columns(
        pl.Series("doi", ["10.18653/v1/P19-1001"] + [None] * (idx.n - 1)),
        pl.Series("arxiv", [None, "arXiv:2106.04689v2"] + [None] * (idx.n - 2)),
        pl.Series("url", [None, None, "https://example.org/paper"] + [None] * (idx.n - 3)))
    explorer.index.__dict__["papers"] = papers
    ids = idx.paper_ids
    assert explorer.links_of(ids[0])["doi_url"] == "https://doi.org/10.18653/v1/p19-1001"
    assert explorer.links_of(ids[1])["arxiv_url"] == "https://arxiv.org/abs/2106.04689v2"
    assert explorer.links_of(ids[2])["url"] == "https://example.org/paper"
    assert "doi" not in explorer.links_of(ids[3]) and "arxiv" not in explorer.links_of(ids[3])


def test_seed_set_view(served):
    """Several papers as the query (a library): Searcher.seeds' fused results, each linked to the seed
    it ranks best for, every seed a centre; the exports hold the seeds."""
    from graft.query import QueryConfig

    client, idx, _ = served
    seeds = [idx.paper_ids[0], idx.paper_ids[9], idx.paper_ids[20]]
    view = client.post("/api/graph", json={"seeds": seeds, "k": 12}).json()
    want = idx.searcher(QueryConfig(retriever="teacher", k=12, explain=True)).seeds(seeds)
    assert [h["paper_id"] for h in view["hits"]] == [h.paper_id for h in want.hits]
    assert [h["score"] for h in view["hits"]] == [h.score for h in want.hits]
    assert [s["paper_id"] for s in view["seeds"]] == seeds and view["centre"]["paper_id"] == seeds[0]
    assert not {h["paper_id"] for h in view["hits"]} & set(seeds) and "seeds" in view["score"]["meaning"]
    for h in view["hits"]:
        by = want.info["surfaced_by"][h["paper_id"]]
        best = min(by, key=lambda s: (by[s], seeds.index(s)))
        sources = {e["source"] for e in view["edges"] if e["target"] == h["paper_id"] and e["facet"] != "citation"
                   and e["source"] in seeds}
        assert sources <= {best} and (sources or not any(ev["weight"] > 0 for ev in h["evidence"].values()))
    assert len({e["source"] for e in view["edges"] if e["source"] in seeds}) >= 2  # several seeds credit results
    got = client.get("/api/graph", params=[("seed", s) for s in seeds] + [("k", "12")]).json()
    assert [h["paper_id"] for h in got["hits"]] == [h["paper_id"] for h in view["hits"]]
    found = client.post("/api/search", json={"q": f"{seeds[0]}, {seeds[1]}\n{seeds[2]}"}).json()
    assert found["kind"] == "seeds" and [m["paper_id"] for m in found["matches"]] == seeds
    bib = client.post("/api/export/bib", json={"seeds": seeds, "k": 12}).text
    assert all(f"corpus id {s}" in bib for s in seeds)
    for body, status, words in (({"seeds": [seeds[0], "no-such-paper"]}, 404, "not in index"),
                                ({"seeds": seeds, "paper": seeds[0]}, 400, "take the place"),
                                ({"seeds": "a-string"}, 400, "list")):
        res = client.post("/api/graph", json=body)
        assert res.status_code == status and words in res.json()["error"], res.text


def test_serve_warm_benchmark_smoke(web_index, capsys) -> None:
    """experiments/serve_warm.py: each step the explorer loads before its first page, timed."""
    from experiments.serve_warm import main

    assert main([str(web_index)]) == 0
    out = capsys.readouterr().out
    steps = [line.split("|")[1].strip() for line in out.splitlines()[2:]]
    assert steps == ["titles and years", "graphs", "citation links", "paper rows", "item groups", "title search",
                     "summary", "first related papers", "**warm, in all**", "a title search, median of 5"]
    assert "40 papers" in out


def test_the_explorer_reads_no_table_whole_for_its_views(web_index):
    """Warming, a view, a paper's card and a search read the titles and years columns and a paper's
    row groups, never papers.parquet (abstracts) or facets.parquet whole: a large index starts in
    seconds (experiments/serve_warm.py). The card still holds the abstract, the view its explanations."""
    from graft.web.data import DEFAULT_K, Explorer

    explorer = Explorer(web_index)
    idx = explorer.index
    explorer.warm()
    pid = idx.paper_ids[4]
    view = explorer.view(paper=pid, k=DEFAULT_K)
    card = explorer.card(pid)
    explorer.search("summarization")
    assert "papers" not in idx.__dict__ and "facets" not in idx.__dict__ and "citations" not in idx.__dict__
    from graft.index import Index

    whole = Index.open(web_index)
    summary = explorer.summary()
    assert summary["citations"] == whole.citations.height > 0
    years = [y for y in whole.papers["year"].to_list() if y is not None]
    assert summary["years"] == [min(years), max(years)]
    assert card["abstract"] == whole.papers["abstract"][4] and card["title"] == whole.papers["title"][4]
    assert card["facets"] == {f: whole.facets.filter((whole.facets["paper_id"] == pid) & (whole.facets["facet"] == f))
                              .sort("item_idx")["text"].to_list() for f in card["facets"]}
    matched = [e["match"] for h in view["hits"] for e in h["evidence"].values() if e.get("match")]
    assert matched and all(m["hit"] in set(whole.facets["text"].to_list()) for m in matched)
