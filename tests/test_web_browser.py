"""`graft serve` used as a person would: the command started, the page opened in headless Chromium
(Debian's `chromium` and `chromium-driver`, driven by Selenium) at the URL it printed (with its
token), a paper found, its graph checked, a node clicked, a re-centre and the back button, a title
search, a survey with HTML in its topic, and a screenshot saved. Then as an attacker would: a page
of another origin (another port of 127.0.0.1) trying to write and read through the browser, and a
page under another name resolved to 127.0.0.1 (DNS rebinding). Skips, with the reason, where the
browser is not installed."""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import threading
import time
import urllib.parse
import urllib.request
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from experiments.browser import api, open_browser, page_url, start_server, token_of

#: The page's facet colours (graft/web/static/app.js), as Cytoscape reports them.
COLOURS = {"problem": "rgb(214,39,40)", "method": "rgb(31,119,180)", "result": "rgb(44,160,44)",
           "contribution": "rgb(148,103,189)", "citation": "rgb(85,85,85)"}


def _browser_problem() -> str | None:
    try:
        import selenium  # noqa: F401
    except ImportError:
        return "selenium is not installed (pip install -e '.[dev]')"
    for name, package in (("chromium", "chromium"), ("chromedriver", "chromium-driver")):
        if shutil.which(name) is None:
            if os.environ.get("GRAFT_NO_APT", "0") != "0":
                return (f"{name} is not installed and GRAFT_NO_APT is set, so `make setup` did not install Debian's "
                        "chromium and chromium-driver")
            return (f"{name} is not installed: `make setup` installs Debian's chromium and chromium-driver when "
                    f"run as root (apt-get install -y chromium chromium-driver) unless GRAFT_NO_APT=1; no {package} "
                    "package here")
    return None


pytestmark = pytest.mark.skipif(_browser_problem() is not None, reason=str(_browser_problem()))


def wait_for(driver, script: str, timeout: float = 60):
    deadline = time.time() + timeout
    while time.time() < deadline:
        value = driver.execute_script(script)
        if value:
            return value
        time.sleep(0.1)
    raise AssertionError(f"timed out waiting for: {script}")


#: A name Chromium resolves to 127.0.0.1 (`--host-resolver-rules`): what a DNS rebinding attack makes
#: of its own name, here without a DNS server.
REBOUND = "rebound.test"


@pytest.fixture(scope="module")
def page(web_index, tmp_path_factory):
    surveys = tmp_path_factory.mktemp("surveys")
    proc, url = start_server(web_index, surveys)
    downloads = tmp_path_factory.mktemp("downloads")
    driver = open_browser(downloads, flags=(f"--host-resolver-rules=MAP {REBOUND} 127.0.0.1",))
    driver.graft_downloads = downloads
    try:
        yield driver, url, surveys
    finally:
        driver.quit()
        proc.send_signal(signal.SIGINT)  # Ctrl-C
        out, _ = proc.communicate(timeout=60)
        assert proc.returncode == 0, out
        assert "stopped" in out


def test_find_a_paper_and_explore_its_graph(page, tmp_path, web_index):
    from selenium.webdriver.common.action_chains import ActionChains
    from selenium.webdriver.common.by import By
    from selenium.webdriver.common.keys import Keys

    from graft.index import Index

    driver, url, _ = page
    idx = Index.open(web_index)
    centre = idx.paper_ids[0]  # its title holds <script>, an <img onerror>, Markdown and LaTeX
    driver.get(url)
    wait_for(driver, "return document.getElementById('index-name').textContent")
    box = driver.find_element(By.ID, "search")
    box.send_keys(centre, Keys.ENTER)
    wait_for(driver, "return window.graft.ready >= 1")

    expected = api(url, "/api/graph", {"paper": centre, "k": 20})
    nodes = driver.execute_script("return graftCy.nodes().map(n => n.id())")
    assert sorted(nodes) == sorted([centre, *(h["paper_id"] for h in expected["hits"])])
    assert len(nodes) == 1 + len(expected["hits"]) == 21
    edges = driver.execute_script(
        "return graftCy.edges().map(e => [e.data('facet'), e.style('line-color'), e.style('line-style'),"
        " e.data('source'), e.data('target'), e.style('target-arrow-shape'), e.data('hops')])")
    assert len(edges) == len(expected["links"])  # one edge per pair of papers
    assert len({frozenset((s, t)) for _, _, _, s, t, _, _ in edges}) == len(edges)
    for facet, colour, style, _, _, _, hops in edges:
        assert colour.replace(" ", "") == COLOURS[facet], (facet, colour)
        assert (style == "dashed") == (facet == "citation") or (hops == 2 and style == "dotted")
    assert len({f for f, *_ in edges}) >= 3  # several facets, each its own colour
    listed = driver.find_elements(By.CSS_SELECTOR, "#hit-list li")
    assert len(listed) == len(expected["hits"])
    # each result's facets, strongest first, without numbers: the one score is beside it
    label = listed[0].find_element(By.CSS_SELECTOR, ".hit-label").text
    assert label == "shared: " + re.sub(r" \d+\.\d+(?= |$|\))", "", expected["hits"][0]["label"])
    assert not re.search(r"\d\.\d", label) and f"score {expected['hits'][0]['score']:.4f}" in listed[0].text

    # the title with HTML in it is shown as text, never run
    assert driver.execute_script("return window.__pwned") is None
    assert "<script>" in driver.find_element(By.ID, "results-title").text
    assert "<script>" in driver.find_element(By.ID, "card-title").text

    # a facet toggle hides that facet's edges and goes into the URL
    driver.find_element(By.CSS_SELECTOR, "#facet-toggles input[data-facet=method]").click()
    assert driver.execute_script("return graftCy.edges('[facet = \"method\"]').filter(e => e.visible()).length") == 0
    assert driver.execute_script("return graftCy.edges('[facet = \"problem\"]').filter(e => e.visible()).length") > 0
    assert "hide=method" in driver.current_url
    driver.find_element(By.CSS_SELECTOR, "#facet-toggles input[data-facet=method]").click()

    # click a node (a real mouse click at its place on the canvas): its card, with the --explain pairs
    target = expected["hits"][2]["paper_id"]
    x, y = driver.execute_script(
        "const p = graftCy.getElementById(arguments[0]).renderedPosition(); return [p.x, p.y];", target)
    graph = driver.find_element(By.ID, "graph")
    ActionChains(driver).move_to_element_with_offset(graph, 0, 0).perform()  # to the element's centre
    w, h = graph.size["width"], graph.size["height"]
    ActionChains(driver).move_to_element_with_offset(graph, int(x - w / 2), int(y - h / 2)).click().perform()
    title = idx.papers["title"][idx.row(target)]
    wait_for(driver, f"return document.getElementById('card-title').textContent === {json.dumps(title)}")
    why = driver.find_element(By.ID, "card-why").text
    assert "Why it is related to the centre" in why and "centre:" in why and "this paper:" in why
    facets = driver.find_element(By.ID, "card-facets").text
    assert all(f in facets for f in ("problem", "method", "result", "contribution"))
    driver.save_screenshot(str(tmp_path / "explorer.png"))
    assert (tmp_path / "explorer.png").stat().st_size > 20_000

    # re-centre on it, then the back button returns to the first paper
    driver.find_element(By.ID, "recentre").click()
    wait_for(driver, "return window.graft.ready >= 2")
    assert urllib.parse.parse_qs(urllib.parse.urlparse(driver.current_url).query)["paper"] == [target]
    assert urllib.parse.parse_qs(urllib.parse.urlparse(driver.current_url).query)["token"] == [token_of(url)]
    assert driver.execute_script("return graftCy.nodes('[centre = 1]').id()") == target
    driver.back()
    wait_for(driver, f"return window.graft.ready >= 3 && window.graft.centre === {json.dumps(centre)}")
    driver.forward()
    wait_for(driver, f"return window.graft.ready >= 4 && window.graft.centre === {json.dumps(target)}")
    assert token_of(driver.current_url) == token_of(url)  # every URL the page wrote keeps the token

    # a bookmarked view opens as it was left: pivot mode, a facet hidden
    driver.get(page_url(url, paper=centre, k=10, mode="pivot", hide="result"))
    wait_for(driver, "return window.graft.ready >= 1")
    assert driver.find_element(By.ID, "mode").get_attribute("value") == "pivot"
    assert driver.find_element(By.ID, "results-title").text.startswith("Same problem, different method")
    pivot = api(url, "/api/graph", {"paper": centre, "k": 10, "mode": "pivot"})
    assert driver.execute_script("return graftCy.nodes().length") == 1 + len(pivot["hits"])
    assert driver.execute_script("return graftCy.edges('[facet = \"result\"]').filter(e => e.visible()).length") == 0

    # the centre cites three papers: an arrow on its edge to each (a view of every paper, as the facet
    # items decide whether they are among its 20 nearest)
    driver.get(page_url(url, paper=centre, k=39))
    wait_for(driver, "return window.graft.ready >= 1")
    edges = driver.execute_script(
        "return graftCy.edges().map(e => [e.data('source'), e.data('target'), e.style('target-arrow-shape')])")
    planted = set(idx.paper_ids[1:4])
    assert {t for s, t, arrow in edges if s == centre and arrow == "triangle"} >= planted, edges


def _overlaps(boxes: list[dict]) -> list[tuple[str, str]]:
    return [(a["id"], b["id"]) for i, a in enumerate(boxes) for b in boxes[i + 1:]
            if min(a["x2"], b["x2"]) > max(a["x1"], b["x1"]) and min(a["y2"], b["y2"]) > max(a["y1"], b["y1"])]


#: Each paper's rendered label box, its label, colour, size and place (the legend's years too).
LABELS = """return graftCy.nodes().not('.axis').map(n => {
  const b = n.renderedBoundingBox({includeLabels: true, includeNodes: false});
  return {id: n.id(), x1: b.x1, y1: b.y1, x2: b.x2, y2: b.y2, label: n.style('label'), title: n.data('title'),
          px: parseFloat(n.style('font-size')) * graftCy.zoom(), colour: n.style('background-color'),
          size: n.width(), cited: n.data('cited'), year: n.data('year'), x: n.position('x'),
          centre: n.data('centre')};
})"""


def test_the_map_labels_colours_sizes_lineage_and_filters(page, web_index):
    """A 20-paper view: no two labels overlap at the default zoom and each is readable (the centre's
    too), titles shortened with the full one on hover; colour by year (with a legend), size by
    citations; prior and derivative works; links out; the timeline; a year filter."""
    from selenium.webdriver.common.action_chains import ActionChains
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import Select

    from graft.index import Index

    driver, url, _ = page
    idx = Index.open(web_index)
    centre = idx.paper_ids[0]
    driver.get(page_url(url, paper=centre))
    wait_for(driver, "return window.graft.ready >= 1")
    nodes = driver.execute_script(LABELS)
    assert len(nodes) == 21
    assert _overlaps(nodes) == []
    for n in nodes:
        assert n["label"] and n["px"] >= 8, n  # every paper labelled, at a readable size
        assert len(n["label"]) <= 48 and (n["label"] == n["title"] or n["label"].endswith("…")), n
        assert n["title"].startswith(n["label"].rstrip("…"))
    assert [n["centre"] for n in nodes].count(1) == 1
    # colour by year: one colour a year; size by in-corpus citations
    colours = {}
    for n in nodes:
        colours.setdefault(n["year"], set()).add(n["colour"])
    assert all(len(c) == 1 for c in colours.values()) and len({c.pop() for c in colours.values()}) == len(colours)
    legend = driver.find_element(By.ID, "legend").text
    assert all(str(y) in legend for y in colours) and "cited" in legend
    # hovering a node shows its full title
    long = max(nodes, key=lambda n: len(n["title"]))
    graph = driver.find_element(By.ID, "graph")
    x, y = driver.execute_script(
        "const p = graftCy.getElementById(arguments[0]).renderedPosition(); return [p.x, p.y];", long["id"])
    ActionChains(driver).move_to_element_with_offset(graph, 0, 0).perform()  # to the element's centre
    w, h = graph.size["width"], graph.size["height"]
    ActionChains(driver).move_to_element_with_offset(graph, int(x - w / 2), int(y - h / 2)).perform()
    wait_for(driver, "return !document.getElementById('tip').hidden")
    assert driver.find_element(By.ID, "tip").text.startswith(long["title"])
    # hovering an edge lists every facet's weight (the edge is drawn in the strongest's colour)
    view = api(url, "/api/graph", {"paper": centre, "k": 20})
    link = max(view["links"], key=lambda lk: len(lk["facets"]))
    assert len(link["facets"]) >= 2
    driver.execute_script("graftCy.edges().filter(e => e.source().id() === arguments[0] && "
                          "e.target().id() === arguments[1]).emit('mouseover')", link["source"], link["target"])
    tip = driver.find_element(By.ID, "tip").text
    assert all(f"{f} {w:.2f}" in tip for f, w in link["facets"].items()), (tip, link)
    # prior and derivative works, as the API lists them; a card's link out
    shown = [li.get_attribute("data-paper") for li in driver.find_elements(By.CSS_SELECTOR, "#prior-list li")]
    assert shown == [p["paper_id"] for p in view["prior"]] and shown
    hrefs = [a.get_attribute("href") for a in driver.find_elements(By.CSS_SELECTOR, "#card-links a")]
    assert hrefs == [view["centre"]["links"]["url"]]
    # the timeline: one band a year, oldest on top
    Select(driver.find_element(By.ID, "layout")).select_by_value("timeline")
    wait_for(driver, "return window.graft.ready >= 2")
    assert "layout=timeline" in driver.current_url
    placed = driver.execute_script(LABELS)
    years = sorted({n["year"] for n in placed})
    assert len(years) >= 2
    bands = [(min(n["y1"] for n in placed if n["year"] == y), max(n["y2"] for n in placed if n["year"] == y))
             for y in years]
    assert all(upper[1] < lower[0] for upper, lower in zip(bands, bands[1:])), bands
    assert _overlaps(placed) == []
    # a year filter: in the URL, every result of that year on
    since = years[-1]
    box = driver.find_element(By.ID, "since")
    box.send_keys(str(since))
    driver.execute_script("document.getElementById('since').dispatchEvent(new Event('change'))")
    wait_for(driver, "return window.graft.ready >= 3")
    assert f"since={since}" in driver.current_url
    kept = driver.execute_script(LABELS)
    assert all(n["year"] >= since for n in kept if not n["centre"]) and len(kept) > 1
    # a seed set (several ids in the URL, as the search box takes them): every seed a centre, labelled
    seeds = [idx.paper_ids[0], idx.paper_ids[9], idx.paper_ids[20]]
    driver.get(page_url(url, k=12) + "&" + urllib.parse.urlencode([("seed", s) for s in seeds]))
    wait_for(driver, "return window.graft.ready >= 1")
    placed = driver.execute_script(LABELS)
    fused = api(url, "/api/graph", {"seeds": seeds, "k": 12})
    assert sorted(n["id"] for n in placed if n["centre"]) == sorted(seeds)
    assert len(placed) == 3 + len(fused["hits"]) and _overlaps(placed) == []
    assert driver.find_element(By.ID, "results-title").text.startswith("Related to 3 seed papers")
    # size by in-corpus citations, in a view of every paper (the three the centre cites among them; whether
    # they are among its 20 nearest depends on the facet items): a cited paper larger than an uncited one
    driver.get(page_url(url, paper=centre, k=39))
    wait_for(driver, "return window.graft.ready >= 1")
    placed = driver.execute_script(LABELS)
    cited = [n for n in placed if n["cited"]]
    assert {n["id"] for n in cited} >= set(idx.paper_ids[1:4]) and len(cited) < len(placed)
    assert min(n["size"] for n in cited) > max(n["size"] for n in placed if not n["cited"])
    by_cites = sorted(placed, key=lambda n: n["cited"])
    assert all(a["size"] <= b["size"] for a, b in zip(by_cites, by_cites[1:]))


def test_title_search_and_bad_input(page, web_index):
    from selenium.webdriver.common.by import By
    from selenium.webdriver.common.keys import Keys

    from graft.index import Index

    driver, url, _ = page
    title = Index.open(web_index).papers["title"][5]
    fragment = " ".join(title.split()[:2]).lower()
    driver.get(url)
    wait_for(driver, "return document.getElementById('index-name').textContent")
    box = driver.find_element(By.ID, "search")
    box.send_keys("<b>no such</b> words zzqx", Keys.ENTER)
    wait_for(driver, "return !document.getElementById('message').hidden")
    assert "No title holds" in driver.find_element(By.ID, "message").text
    assert "<b>" in driver.find_element(By.ID, "message").text  # shown as typed, not as markup
    box.clear()
    box.send_keys(fragment, Keys.ENTER)
    wait_for(driver, "return !document.getElementById('matches').hidden")
    found = driver.find_elements(By.CSS_SELECTOR, "#match-list button")
    assert title in [b.text for b in found]
    first = found[0]
    pid = first.get_attribute("data-paper")
    first.click()
    wait_for(driver, "return window.graft.ready >= 1")
    assert driver.execute_script("return graftCy.nodes('[centre = 1]').id()") == pid
    # a pasted title and abstract: a paper outside the corpus, in the centre
    idx = Index.open(web_index)
    text = f"{idx.papers['title'][7]}. {idx.papers['abstract'][7]}"
    driver.get(url)
    wait_for(driver, "return document.getElementById('index-name').textContent")
    driver.execute_script("document.getElementById('search').value = arguments[0];", text)
    driver.find_element(By.ID, "search-go").click()
    wait_for(driver, "return window.graft.ready >= 1", timeout=180)
    assert driver.execute_script("return graftCy.nodes('[centre = 1]').id()") == "the query"
    assert driver.execute_script("return graftCy.nodes().length") == 21
    assert "the pasted paper" in driver.find_element(By.ID, "card-meta").text
    assert "text=" in driver.current_url  # short enough to be kept in the URL
    driver.get(page_url(url, paper="no-such-paper"))
    wait_for(driver, "return !document.getElementById('message').hidden")
    assert "not in index" in driver.find_element(By.ID, "message").text


def test_survey_with_html_in_its_topic(page):
    from selenium.webdriver.common.by import By

    driver, url, surveys = page
    driver.get(url)
    wait_for(driver, "return document.getElementById('index-name').textContent")
    driver.find_element(By.ID, "surveys-open").click()
    topic = "<img src=x onerror=\"window.__pwned=3\"> summarization **of** documents"
    driver.find_element(By.ID, "topic").send_keys(topic)
    driver.find_element(By.ID, "survey-start").click()
    states = set()
    deadline = time.time() + 900
    while time.time() < deadline:
        state = driver.execute_script("return document.getElementById('survey-status').dataset.state")
        states.add(state)
        if state in ("done", "failed"):
            break
        time.sleep(0.5)
    assert state == "done", driver.find_element(By.ID, "survey-status").text
    assert states & {"queued", "running"}  # progress was shown while it was written
    assert driver.execute_script("return window.__pwned") is None
    body = driver.find_element(By.ID, "survey-body")
    assert "<img" in body.find_element(By.TAG_NAME, "h1").text  # the topic, shown as text
    assert not body.find_elements(By.TAG_NAME, "img")
    cite = body.find_element(By.CSS_SELECTOR, "a.cite")
    pid = cite.get_attribute("data-paper")
    cite.click()
    wait_for(driver, "return document.getElementById('recentre').dataset.paper === " + json.dumps(pid))
    bib = driver.find_element(By.ID, "survey-bib").get_attribute("href")
    with urllib.request.urlopen(urllib.request.Request(bib, headers={"X-Graft-Token": token_of(url)}),
                                timeout=30) as res:
        text = res.read().decode()
    folder = next(p for p in surveys.iterdir() if p.is_dir())
    assert text == (folder / "references.bib").read_text() and f"corpus id {pid}" in text.replace("\\_", "_")
    # the page's own link downloads it (a request with the token, saved as a file)
    driver.find_element(By.ID, "survey-bib").click()
    saved = driver.graft_downloads / f"{folder.name}.bib"
    deadline = time.time() + 30
    while not (saved.is_file() and saved.read_text() == text) and time.time() < deadline:
        time.sleep(0.2)
    assert saved.is_file() and saved.read_text() == text


def test_the_page_without_its_token_says_where_to_find_it(page):
    from selenium.webdriver.common.by import By

    driver, url, _ = page
    driver.get(url.split("?")[0])
    wait_for(driver, "return !document.getElementById('message').hidden")
    assert "token" in driver.find_element(By.ID, "message").text
    assert driver.find_element(By.ID, "index-name").text == ""  # nothing of the index was read


#: The attacker's page, served from another port of 127.0.0.1: every write a page may send without a
#: CORS preflight (a no-cors fetch, a simple text/plain fetch, a beacon, a text/plain and an
#: urlencoded form auto-submitted), one that needs a preflight, and reads (CORS and no-cors).
ATTACK = """<!doctype html><html><head><meta charset="utf-8"><title>attack</title></head><body>
<iframe name="sink1"></iframe><iframe name="sink2"></iframe>
<form id="plain" method="POST" enctype="text/plain" target="sink1" action="TARGET/api/surveys">
<input name='{"topic": "csrf plain form", "x": "' value='"}'></form>
<form id="urlenc" method="POST" target="sink2" action="TARGET/api/surveys">
<input name="topic" value="csrf urlencoded form"></form>
<script>
const T = "TARGET", out = {};
const settle = (p) => p.then(async (r) => `status ${r.status} type ${r.type} body ${await r.text()}`,
                             (e) => `failed ${e.name}`);
(async () => {
  out.nocors = await settle(fetch(T + "/api/surveys", {method: "POST", mode: "no-cors",
    headers: {"Content-Type": "text/plain"}, body: '{"topic": "csrf no-cors fetch"}'}));
  out.simple = await settle(fetch(T + "/api/surveys", {method: "POST",
    headers: {"Content-Type": "text/plain"}, body: '{"topic": "csrf simple fetch"}'}));
  out.preflighted = await settle(fetch(T + "/api/surveys", {method: "POST",
    headers: {"Content-Type": "application/json"}, body: '{"topic": "csrf json fetch"}'}));
  out.beacon = navigator.sendBeacon(T + "/api/surveys", '{"topic": "csrf beacon"}');
  out.read = await settle(fetch(T + "/api/info"));
  out.read_nocors = await settle(fetch(T + "/api/info", {mode: "no-cors"}));
  out.read_surveys = await settle(fetch(T + "/api/surveys", {credentials: "include"}));
  let loaded = 0;
  for (const f of ["sink1", "sink2"]) document.getElementsByName(f)[0].onload = () => { loaded += 1;
    if (loaded === 2) { out.forms = "submitted"; window.attack = out; } };
  document.getElementById("plain").submit();
  document.getElementById("urlenc").submit();
})();
</script></body></html>"""


@pytest.fixture()
def attacker(page):
    """A web server of another origin (another port of 127.0.0.1) serving `ATTACK` aimed at the explorer."""
    _, url, _ = page
    html = ATTACK.replace("TARGET", url.split("?")[0].rstrip("/")).encode()

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:  # noqa: N802 - http.server's naming
            self.send_response(200)
            self.send_header("Content-Type", "text/html; charset=utf-8")
            self.send_header("Content-Length", str(len(html)))
            self.end_headers()
            self.wfile.write(html)

        def log_message(self, *args) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/"
    finally:
        server.shutdown()
        server.server_close()


def _asked_topics(url: str, surveys) -> list[str]:
    listed = [s.get("topic") or "" for s in api(url, "/api/surveys")]
    return listed + [p.name for p in surveys.iterdir()]


def test_a_page_of_another_origin_can_neither_write_nor_read(page, attacker):
    """Issue 47: a no-cors fetch and an auto-submitted text/plain form from another origin started a
    survey. Now none of its writes starts one, and none of its reads gets a byte of the index."""
    driver, url, surveys = page
    driver.get(attacker)
    attack = wait_for(driver, "return window.attack", timeout=60)
    time.sleep(1)  # the beacon is sent on its own schedule
    assert not [t for t in _asked_topics(url, surveys) if "csrf" in t], _asked_topics(url, surveys)
    assert attack["forms"] == "submitted" and attack["beacon"] is True  # each write was sent
    assert attack["nocors"] == "status 0 type opaque body "  # sent, its answer unreadable
    assert attack["simple"] == attack["preflighted"] == "failed TypeError"  # no CORS header: no answer
    assert attack["read"] == attack["read_surveys"] == "failed TypeError"
    assert attack["read_nocors"] == "status 0 type opaque body "
    assert "papers" not in json.dumps(attack)


def test_a_rebound_name_gets_nothing_even_with_the_token(page):
    """DNS rebinding: a page under the attacker's name, that name now resolving to 127.0.0.1, reads
    the explorer as its own origin. The explorer answers no request under a name not its own."""
    driver, url, surveys = page
    port = url.split("?")[0].rstrip("/").rsplit(":", 1)[1]
    driver.get(f"http://{REBOUND}:{port}/?token={token_of(url)}")
    body = driver.find_element("tag name", "body").text
    assert "answers requests to" in body and "GRAFT" not in driver.title
    script = """const done = arguments[arguments.length - 1];
      const h = {"X-Graft-Token": arguments[0], "Content-Type": "application/json"};
      Promise.all([fetch("/api/info", {headers: h}), fetch("/static/app.js"),
                   fetch("/api/surveys", {method: "POST", headers: h, body: '{"topic": "rebound survey"}'})])
        .then(async (rs) => done(await Promise.all(rs.map(async (r) => [r.status, await r.text()]))),
              (e) => done("failed " + e));"""
    answers = driver.execute_async_script(script, token_of(url))
    assert [status for status, _ in answers] == [403, 403, 403], answers
    assert all("answers requests to" in text for _, text in answers)
    assert not [t for t in _asked_topics(url, surveys) if "rebound" in t]
