// GRAFT explorer: the page's behaviour. Every text from the index is set with textContent (never as
// HTML); the only HTML taken from the server is a survey, rendered there with raw HTML disabled.
// The server's token comes in the page's URL (`?token=...`, as `graft serve` prints it); the page
// keeps it in every URL it writes and sends it with every request as the X-Graft-Token header.
"use strict";

const FACETS = ["problem", "method", "result", "contribution"];
const COLOURS = {problem: "#d62728", method: "#1f77b4", result: "#2ca02c", contribution: "#9467bd",
                 citation: "#555555"};
const URL_TEXT_MAX = 2000;  // a pasted text longer than this is not put in the address bar
const TOKEN = new URLSearchParams(location.search).get("token") || "";
const NO_TOKEN = "This page needs the explorer's token: open it at the URL `graft serve` printed " +
                 "(http://127.0.0.1:PORT/?token=…).";

const $ = (id) => document.getElementById(id);
const state = {view: null, cy: null, selected: null, query: null, info: null};
window.graft = {ready: 0, timings: [], colours: COLOURS};  // what the browser tests read

function el(tag, text, cls) {
  const node = document.createElement(tag);
  if (text !== undefined && text !== null) node.textContent = String(text);
  if (cls) node.className = cls;
  return node;
}

function say(message, isError) {
  const box = $("message");
  box.textContent = message || "";
  box.hidden = !message;
  box.classList.toggle("error", !!isError);
}

function headers(json) {
  const h = {"X-Graft-Token": TOKEN};
  if (json) h["Content-Type"] = "application/json";
  return h;
}

async function api(path, body) {
  const opts = body === undefined ? {headers: headers(false)}
    : {method: "POST", headers: headers(true), body: JSON.stringify(body)};
  let res;
  try {
    res = await fetch(path, opts);
  } catch (e) {
    throw new Error("the explorer's server does not answer (is `graft serve` still running?)");
  }
  let data = null;
  try { data = await res.json(); } catch (e) { /* not JSON */ }
  if (!res.ok) throw new Error((data && data.error) || `the server answered ${res.status}`);
  return data;
}

// ---- the address bar: the view as URL parameters -------------------------------------------------
function readUrl() {
  const p = new URLSearchParams(location.search);
  const hidden = (p.get("hide") || "").split(",").filter(Boolean);
  return {paper: p.get("paper"), text: p.get("text"), k: parseInt(p.get("k") || "20", 10) || 20,
          mode: p.get("mode") === "pivot" ? "pivot" : "related", hide: hidden, survey: p.get("survey")};
}

function writeUrl(q, push) {
  const p = new URLSearchParams();
  if (TOKEN) p.set("token", TOKEN);
  if (q.paper) p.set("paper", q.paper);
  else if (q.text && q.text.length <= URL_TEXT_MAX) p.set("text", q.text);
  if (q.k !== 20) p.set("k", String(q.k));
  if (q.mode !== "related") p.set("mode", q.mode);
  if (q.hide && q.hide.length) p.set("hide", q.hide.join(","));
  if (q.survey) p.set("survey", q.survey);
  const url = "?" + p.toString();
  if (push) history.pushState(q, "", url); else history.replaceState(q, "", url);
}

function controlsFrom(q) {
  $("mode").value = q.mode;
  const k = $("k");
  if (![...k.options].some((o) => o.value === String(q.k))) k.append(el("option", String(q.k)));
  k.value = String(q.k);
  document.querySelectorAll("#facet-toggles input").forEach((box) => {
    box.checked = !q.hide.includes(box.dataset.facet);
  });
}

function currentQuery() {
  const hide = [...document.querySelectorAll("#facet-toggles input")].filter((b) => !b.checked)
    .map((b) => b.dataset.facet);
  const base = state.query || {};
  return {paper: base.paper || null, text: base.paper ? null : (base.text || null),
          k: parseInt($("k").value, 10), mode: $("mode").value, hide: hide, survey: base.survey || null};
}

// ---- find ----------------------------------------------------------------------------------------
async function find(event) {
  if (event) event.preventDefault();
  const q = $("search").value.trim();
  $("matches").hidden = true;
  if (!q) { say("Type a paper id, words of a title, or paste a title and abstract.", true); return; }
  let found;
  try { found = await api("/api/search", {q: q}); } catch (e) { say(e.message, true); return; }
  say("");
  if (found.kind === "id") return go({paper: found.matches[0].paper_id, text: null});
  if (found.kind === "text") return go({paper: null, text: q});
  const list = $("match-list");
  list.replaceChildren();
  if (!found.matches.length) { say(`No title holds the words of “${q}”. Paste a title and abstract to ` +
                                   "query a paper outside the corpus.", true); return; }
  for (const m of found.matches) {
    const li = el("li");
    const b = el("button", m.title, "hit-title");
    b.type = "button";
    b.dataset.paper = m.paper_id;
    b.addEventListener("click", () => { $("matches").hidden = true; go({paper: m.paper_id, text: null}); });
    li.append(b, el("span", ` ${m.year || ""} · ${m.paper_id}`, "hit-meta"));
    list.append(li);
  }
  $("matches").hidden = false;
}

function go(target) {
  const q = {...currentQuery(), paper: target.paper, text: target.text, survey: null};
  state.query = q;
  writeUrl(q, true);
  return load(q);
}

// ---- the view ------------------------------------------------------------------------------------
async function load(q) {
  state.query = q;
  controlsFrom(q);
  if (!q.paper && !q.text) return;
  const t0 = performance.now();
  say(q.text && !q.paper ? "Reading the pasted paper's facets …" : "");
  let view;
  try {
    const body = {k: q.k, mode: q.mode};
    if (q.paper) body.paper = q.paper; else body.text = q.text;
    view = await api("/api/graph", body);
  } catch (e) { say(e.message, true); return; }
  say("");
  state.view = view;
  renderList(view);
  renderGraph(view, q.hide, t0);
  $("export-bib").disabled = $("export-graphml").disabled = false;
  showCard(view.centre.paper_id || view.centre.id);
}

function shortTitle(t) { t = String(t || ""); return t.length > 42 ? t.slice(0, 40) + "…" : t; }

function renderList(view) {
  const c = view.centre;
  $("results-title").textContent = (view.mode === "pivot" ? "Same problem, different method: " : "Related to: ")
    + (c.title || c.id);
  const list = $("hit-list");
  list.replaceChildren();
  for (const h of view.hits) {
    const li = el("li");
    li.dataset.paper = h.paper_id;
    const b = el("button", h.title, "hit-title");
    b.type = "button";
    b.addEventListener("click", () => select(h.paper_id));
    const label = h.pivot ? `problem ${h.pivot.problem.toFixed(2)} · method ${h.pivot.method.toFixed(2)}`
      : h.label;
    li.append(b, el("div", `${h.year || ""} · ${h.paper_id} · score ${h.score.toFixed(4)}`, "hit-meta"),
              el("div", label, "hit-label"));
    list.append(li);
  }
  if (!view.hits.length) list.append(el("li", view.mode === "pivot"
    ? "No result shares a problem with it." : "No related paper found.", "muted"));
}

function renderGraph(view, hide, t0) {
  $("graph-empty").hidden = true;
  const c = view.centre;
  const nodes = [{data: {id: c.id, label: shortTitle(c.title), centre: 1}}];
  for (const h of view.hits) nodes.push({data: {id: h.paper_id, label: shortTitle(h.title), centre: 0}});
  const edges = view.edges.map((e, i) => ({data: {
    id: "e" + i, source: e.source, target: e.target, facet: e.facet, weight: e.weight,
    width: e.facet === "citation" ? 1.5 : 1 + 7 * Math.min(1, Math.max(0, e.weight)),
    hops: e.hops, centre: e.centre ? 1 : 0}}));
  const style = [
    {selector: "node", style: {"background-color": "#8a8a8a", label: "data(label)", "font-size": 8,
      width: 14, height: 14, "text-valign": "bottom", "text-margin-y": 2, color: "#333",
      "text-wrap": "ellipsis", "text-max-width": 140}},
    {selector: "node[centre = 1]", style: {"background-color": "#222", width: 26, height: 26, "font-size": 10,
      "font-weight": "bold"}},
    {selector: "node:selected", style: {"border-width": 3, "border-color": "#f0a500"}},
    {selector: "edge", style: {"curve-style": "bezier", "control-point-step-size": 6, width: "data(width)",
      opacity: 0.85}},
    {selector: "edge[centre = 0]", style: {opacity: 0.3}},
    {selector: "edge[hops = 2]", style: {"line-style": "dotted"}},
    {selector: "edge[facet = 'citation']", style: {"line-style": "dashed", "line-color": COLOURS.citation,
      "target-arrow-shape": "triangle", "target-arrow-color": COLOURS.citation, "arrow-scale": 0.6}},
    {selector: ".hidden", style: {display: "none"}},
  ];
  for (const f of FACETS) style.push({selector: `edge[facet = '${f}']`, style: {"line-color": COLOURS[f]}});
  if (state.cy) state.cy.destroy();
  const cy = cytoscape({container: $("graph"), elements: {nodes: nodes, edges: edges}, style: style,
    layout: {name: "concentric", concentric: (n) => n.data("centre") ? 2 : 1, levelWidth: () => 1,
             minNodeSpacing: 70, animate: false},
  });
  state.cy = cy;
  window.graftCy = cy;
  applyToggles(hide);
  cy.on("tap", "node", (evt) => select(evt.target.id()));
  requestAnimationFrame(() => {  // the first frame drawn with the new graph
    const ms = performance.now() - t0;
    window.graft.timings.push(ms);
    window.graft.ready += 1;
    window.graft.centre = c.id;
    window.graft.paintedAt = performance.now();
    document.body.dataset.ready = String(window.graft.ready);
  });
}

function applyToggles(hide) {
  if (!state.cy) return;
  state.cy.edges().forEach((e) => {
    e.toggleClass("hidden", hide.includes(e.data("facet")));
  });
}

function select(id) {
  if (state.cy) {
    state.cy.$(":selected").unselect();
    const n = state.cy.getElementById(id);
    if (n.nonempty()) n.select();
  }
  document.querySelectorAll("#hit-list li").forEach((li) => li.classList.toggle("selected", li.dataset.paper === id));
  showCard(id);
}

// ---- the card ------------------------------------------------------------------------------------
async function showCard(id) {
  state.selected = id;
  const view = state.view;
  if (view && view.centre.outside && id === view.centre.id) {
    fillCard({title: view.centre.title, meta: "the pasted paper (outside the corpus)",
              facets: view.centre.facets || {}, abstract: null, recentre: false});
    return;
  }
  let card;
  try { card = await api("/api/paper/" + encodeURIComponent(id)); } catch (e) { say(e.message, true); return; }
  if (state.selected !== id) return;
  const meta = [card.year, card.venue, card.paper_id,
                `cites ${card.references_in_corpus} · cited by ${card.cited_by_in_corpus} in the corpus`]
    .filter(Boolean).join(" · ");
  const hit = view ? view.hits.find((h) => h.paper_id === id) : null;
  const isCentre = view && view.centre.paper_id === id;
  fillCard({title: card.title, meta: (card.authors || []).join(", ") + (card.authors && card.authors.length ? " · " : "")
    + meta, facets: card.facets, abstract: card.abstract, recentre: !isCentre, id: id, hit: hit,
    centreTitle: view ? (view.centre.title || view.centre.id) : null});
}

function fillCard(c) {
  $("card-hint").hidden = true;
  $("card-title").textContent = c.title || c.id || "";
  $("card-meta").textContent = c.meta || "";
  const re = $("recentre");
  re.hidden = !c.recentre;
  re.dataset.paper = c.id || "";
  const why = $("card-why");
  why.replaceChildren();
  if (c.hit) {
    why.append(el("h3", "Why it is related to the centre"));
    why.append(el("p", c.hit.label, "hit-label"));
    for (const f of [...FACETS].sort((a, b) => {
      const ea = c.hit.evidence[a], eb = c.hit.evidence[b];
      return (eb ? eb.weight : -1) - (ea ? ea.weight : -1);
    })) {
      const ev = c.hit.evidence[f];
      if (!ev || !ev.match) continue;
      const d = el("div", null, "pair");
      d.append(el("strong", `${f}`, "f-" + f),
               el("span", ` edge ${ev.weight.toFixed(2)} · closest items, cosine ${ev.match.cosine.toFixed(2)}`,
                  "hit-meta"));
      d.append(el("q", "centre: " + ev.match.query));
      d.append(el("q", "this paper: " + ev.match.hit));
      why.append(d);
    }
  }
  const facets = $("card-facets");
  facets.replaceChildren();
  for (const f of FACETS) {
    facets.append(el("h3", f, "f-" + f));
    const ul = el("ul");
    const items = (c.facets && c.facets[f]) || [];
    if (!items.length) ul.append(el("li", "(none)", "muted"));
    for (const item of items) ul.append(el("li", item));
    facets.append(ul);
  }
  $("card-abstract-box").hidden = !c.abstract;
  $("card-abstract").textContent = c.abstract || "";
}

// ---- exports -------------------------------------------------------------------------------------
async function download(fmt) {
  const q = state.query;
  if (!q) return;
  const body = {k: q.k, mode: q.mode};
  if (q.paper) body.paper = q.paper; else body.text = q.text;
  let res;
  try {
    res = await fetch("/api/export/" + fmt, {method: "POST", headers: headers(true), body: JSON.stringify(body)});
  } catch (e) { say("the explorer's server does not answer", true); return; }
  if (!res.ok) { say(((await res.json().catch(() => null)) || {}).error || "export failed", true); return; }
  save(await res.blob(), `graft-${q.paper || "query"}.${fmt}`);
}

async function downloadBib(event) {
  event.preventDefault();
  const name = $("survey-bib").dataset.survey;
  if (!name) return;
  let res;
  try {
    res = await fetch("/api/surveys/" + encodeURIComponent(name) + "/references.bib", {headers: headers(false)});
  } catch (e) { say("the explorer's server does not answer", true); return; }
  if (!res.ok) { say(((await res.json().catch(() => null)) || {}).error || "download failed", true); return; }
  save(await res.blob(), `${name}.bib`);
}

function save(blob, filename) {  // a download of what a request with the token answered
  const a = el("a");
  a.href = URL.createObjectURL(blob);
  a.download = filename;
  document.body.append(a);
  a.click();
  a.remove();
  setTimeout(() => URL.revokeObjectURL(a.href), 1000);
}

// ---- surveys -------------------------------------------------------------------------------------
let polling = null;

async function openSurveys(name) {
  $("surveys").hidden = false;
  await listSurveys();
  if (name) readSurvey(name);
}

async function listSurveys() {
  let all;
  try { all = await api("/api/surveys"); } catch (e) { say(e.message, true); return; }
  const ul = $("survey-list");
  ul.replaceChildren();
  if (!all.length) ul.append(el("li", "No survey yet.", "muted"));
  for (const s of all) {
    const li = el("li");
    const b = el("button", s.topic || s.name, "hit-title");
    b.type = "button";
    b.addEventListener("click", () => readSurvey(s.name));
    li.append(b, el("span", " · " + progressText(s), "hit-meta"));
    ul.append(li);
  }
}

function progressText(s) {
  if (s.state === "running") {
    return `writing: ${s.stage || "starting"}` + (s.total ? ` ${s.done}/${s.total}` : "");
  }
  if (s.state === "failed") return "failed: " + (s.error || "");
  return s.state;
}

async function startSurvey(event) {
  event.preventDefault();
  const topic = $("topic").value;
  let job;
  try { job = await api("/api/surveys", {topic: topic}); } catch (e) {
    $("survey-status").textContent = e.message; $("survey-status").classList.add("error"); return;
  }
  $("survey-status").classList.remove("error");
  readSurvey(job.name);
}

async function readSurvey(name) {
  if (polling) { clearTimeout(polling); polling = null; }
  let s;
  try { s = await api("/api/surveys/" + encodeURIComponent(name)); } catch (e) {
    $("survey-status").textContent = e.message; return;
  }
  const q = {...(state.query || currentQuery()), survey: name};
  state.query = q;
  writeUrl(q, false);
  $("survey-status").textContent = `“${s.topic}”: ` + progressText(s);
  $("survey-status").dataset.state = s.state;
  if (s.state === "queued" || s.state === "running") {
    $("survey-reader").hidden = true;
    polling = setTimeout(() => { listSurveys(); readSurvey(name); }, 1000);
    return;
  }
  if (s.state !== "done") { $("survey-reader").hidden = true; listSurveys(); return; }
  $("survey-bib").href = "/api/surveys/" + encodeURIComponent(name) + "/references.bib";
  $("survey-bib").dataset.survey = name;
  $("survey-body").innerHTML = s.html;  // rendered by the server from Markdown, raw HTML disabled
  $("survey-reader").hidden = false;
  listSurveys();
}

function closeSurveys() {
  if (polling) { clearTimeout(polling); polling = null; }
  $("surveys").hidden = true;
  if (state.query) { state.query = {...state.query, survey: null}; writeUrl(state.query, false); }
}

// ---- start ---------------------------------------------------------------------------------------
async function start() {
  $("search-form").addEventListener("submit", find);
  $("search").addEventListener("keydown", (e) => {
    if (e.key === "Enter" && !e.shiftKey) { e.preventDefault(); find(); }
  });
  $("recentre").addEventListener("click", () => {
    const id = $("recentre").dataset.paper;
    if (id) { $("surveys").hidden = true; go({paper: id, text: null}); }
  });
  $("mode").addEventListener("change", () => { const q = currentQuery(); writeUrl(q, true); load(q); });
  $("k").addEventListener("change", () => { const q = currentQuery(); writeUrl(q, true); load(q); });
  document.querySelectorAll("#facet-toggles input").forEach((box) => box.addEventListener("change", () => {
    const q = currentQuery();
    state.query = q;
    writeUrl(q, true);
    applyToggles(q.hide);
  }));
  $("export-bib").addEventListener("click", () => download("bib"));
  $("export-graphml").addEventListener("click", () => download("graphml"));
  $("surveys-open").addEventListener("click", () => openSurveys());
  $("surveys-close").addEventListener("click", closeSurveys);
  $("survey-form").addEventListener("submit", startSurvey);
  $("survey-bib").addEventListener("click", downloadBib);
  $("survey-body").addEventListener("click", (e) => {
    const a = e.target.closest("a.cite");
    if (!a) return;
    e.preventDefault();
    showCard(a.dataset.paper);
  });
  window.addEventListener("popstate", (event) => {
    // the view pushed with this entry (it keeps a pasted text too long for the URL), else the URL's
    const q = event.state && (event.state.paper || event.state.text) ? event.state : readUrl();
    const same = state.view && state.query && q.paper === state.query.paper && q.text === state.query.text
      && q.k === state.query.k && q.mode === state.query.mode;
    state.query = q;
    if (same) { controlsFrom(q); applyToggles(q.hide); } else load(q);
  });
  if (!TOKEN) { say(NO_TOKEN, true); return; }
  try {
    state.info = await api("/api/info");
    $("index-name").textContent = `${state.info.index} · ${state.info.papers} papers`;
    if (state.info.example) {
      const b = $("example");
      b.hidden = false;
      b.textContent = "Try " + state.info.example;
      b.addEventListener("click", () => go({paper: state.info.example, text: null}));
    }
  } catch (e) { say(e.message, true); }
  const q = readUrl();
  state.query = q;
  controlsFrom(q);
  if (q.paper || q.text) { if (q.paper) $("search").value = q.paper; await load(q); }
  if (q.survey) openSurveys(q.survey);
}

document.addEventListener("DOMContentLoaded", start);
