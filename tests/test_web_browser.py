"""`graft serve` used as a person would: the command started, the page opened in headless Chromium
(Debian's `chromium` and `chromium-driver`, driven by Selenium), a paper found, its graph checked,
a node clicked, a re-centre and the back button, a title search, a survey with HTML in its topic,
and a screenshot saved. Skips, with the reason, where the browser is not installed."""

from __future__ import annotations

import json
import os
import shutil
import signal
import time
import urllib.parse
import urllib.request

import pytest

from experiments.browser import open_browser, start_server

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


def api(url: str, path: str, body: dict | None = None) -> dict:
    data = None if body is None else json.dumps(body).encode()
    req = urllib.request.Request(url.rstrip("/") + path, data=data, headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=60) as res:
        return json.loads(res.read())


@pytest.fixture(scope="module")
def page(web_index, tmp_path_factory):
    surveys = tmp_path_factory.mktemp("surveys")
    proc, url = start_server(web_index, surveys)
    driver = open_browser(tmp_path_factory.mktemp("downloads"))
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
        " e.data('source'), e.data('target')])")
    assert len(edges) == len(expected["edges"])
    for facet, colour, style, _, _ in edges:
        assert colour.replace(" ", "") == COLOURS[facet], (facet, colour)
        assert (style == "dashed") == (facet == "citation")
    assert len({f for f, *_ in edges}) >= 3  # several facets, each its own colour
    assert any(f == "citation" and s == centre for f, _, _, s, _ in edges)  # the planted citations
    listed = driver.find_elements(By.CSS_SELECTOR, "#hit-list li")
    assert len(listed) == len(expected["hits"])
    assert listed[0].find_element(By.CSS_SELECTOR, ".hit-label").text == expected["hits"][0]["label"]

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
    assert driver.execute_script("return graftCy.nodes('[centre = 1]').id()") == target
    driver.back()
    wait_for(driver, f"return window.graft.ready >= 3 && window.graft.centre === {json.dumps(centre)}")
    driver.forward()
    wait_for(driver, f"return window.graft.ready >= 4 && window.graft.centre === {json.dumps(target)}")

    # a bookmarked view opens as it was left: pivot mode, a facet hidden
    driver.get(f"{url}?paper={urllib.parse.quote(centre)}&k=10&mode=pivot&hide=result")
    wait_for(driver, "return window.graft.ready >= 1")
    assert driver.find_element(By.ID, "mode").get_attribute("value") == "pivot"
    assert driver.find_element(By.ID, "results-title").text.startswith("Same problem, different method")
    pivot = api(url, "/api/graph", {"paper": centre, "k": 10, "mode": "pivot"})
    assert driver.execute_script("return graftCy.nodes().length") == 1 + len(pivot["hits"])
    assert driver.execute_script("return graftCy.edges('[facet = \"result\"]').filter(e => e.visible()).length") == 0


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
    driver.get(f"{url}?paper=no-such-paper")
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
    with urllib.request.urlopen(bib, timeout=30) as res:
        text = res.read().decode()
    folder = next(p for p in surveys.iterdir() if p.is_dir())
    assert text == (folder / "references.bib").read_text() and f"corpus id {pid}" in text.replace("\\_", "_")
