// GRAFT explorer: the page's behaviour. Every text from the index is set with textContent (never as
// HTML); the only HTML taken from the server is a survey, rendered there with raw HTML disabled.
// The server's token comes in the page's URL (`?token=...`, as `graft serve` prints it); the page
// keeps it in every URL it writes and sends it with every request as the X-Graft-Token header.
"use strict";

const FACETS = ["problem", "method", "result", "contribution"];
const COLOURS = {problem: "#d62728", method: "#1f77b4", result: "#2ca02c", contribution: "#9467bd",
                 citation: "#555555"};
// node colour by year: viridis, oldest dark purple to newest yellow
const YEAR_STOPS = ["#440154", "#3b528b", "#21918c", "#5ec962", "#fde725"];
const NO_YEAR = "#b0b0b0";
const LABEL_CHARS = 48;  // a node's label: its title shortened to this many characters (the full one on hover)
const URL_TEXT_MAX = 2000;  // a pasted text longer than this is not put in the address bar
const TOKEN = new URLSearchParams(location.search).get("token") || "";
const NO_TOKEN = "This page needs the explorer's token: open it at the URL `graft serve` printed " +
                 "(http://127.0.0.1:PORT/?token=…).";

const $ = (id) => document.getElementById(id);
const state = {view: null, cy: null, selected: null, query: null, info: null};
window.graft = {ready: 0, timings: [], colours: COLOURS};
if (typeof cytoscape !== "undefined" && typeof cytoscapeFcose !== "undefined") {
  try { cytoscape.use(cytoscapeFcose); } catch (e) { /* registered by the script itself */ }
}  // what the browser tests read

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
  return {paper: p.get("paper"), text: p.get("text"), seeds: p.getAll("seed"), k: parseInt(p.get("k") || "20", 10) || 20,
          mode: p.get("mode") === "pivot" ? "pivot" : "related", hide: hidden, survey: p.get("survey"),
          since: yearOf(p.get("since")), until: yearOf(p.get("until")), venue: p.get("venue") || "",
          layout: p.get("layout") === "timeline" ? "timeline" : "map"};
}

function yearOf(v) {
  const n = parseInt(v || "", 10);
  return Number.isFinite(n) ? n : null;
}

function writeUrl(q, push) {
  const p = new URLSearchParams();
  if (TOKEN) p.set("token", TOKEN);
  if (q.seeds && q.seeds.length) q.seeds.forEach((s) => p.append("seed", s));
  else if (q.paper) p.set("paper", q.paper);
  else if (q.text && q.text.length <= URL_TEXT_MAX) p.set("text", q.text);
  if (q.k !== 20) p.set("k", String(q.k));
  if (q.mode !== "related") p.set("mode", q.mode);
  if (q.hide && q.hide.length) p.set("hide", q.hide.join(","));
  if (q.since !== null && q.since !== undefined) p.set("since", String(q.since));
  if (q.until !== null && q.until !== undefined) p.set("until", String(q.until));
  if (q.venue) p.set("venue", q.venue);
  if (q.layout === "timeline") p.set("layout", "timeline");
  if (q.survey) p.set("survey", q.survey);
  const url = "?" + p.toString();
  if (push) history.pushState(q, "", url); else history.replaceState(q, "", url);
}

function controlsFrom(q) {
  $("mode").value = q.mode;
  const k = $("k");
  if (![...k.options].some((o) => o.value === String(q.k))) k.append(el("option", String(q.k)));
  k.value = String(q.k);
  $("since").value = q.since === null || q.since === undefined ? "" : String(q.since);
  $("until").value = q.until === null || q.until === undefined ? "" : String(q.until);
  const venue = $("venue");
  if (q.venue && ![...venue.options].some((o) => o.value === q.venue)) venue.append(el("option", q.venue));
  venue.value = q.venue || "";
  $("layout").value = q.layout || "map";
  document.querySelectorAll("#facet-toggles input").forEach((box) => {
    box.checked = !q.hide.includes(box.dataset.facet);
  });
}

function currentQuery() {
  const hide = [...document.querySelectorAll("#facet-toggles input")].filter((b) => !b.checked)
    .map((b) => b.dataset.facet);
  const base = state.query || {};
  return {paper: base.paper || null, text: base.paper ? null : (base.text || null), seeds: base.seeds || [],
          k: parseInt($("k").value, 10), mode: $("mode").value, hide: hide, survey: base.survey || null,
          since: yearOf($("since").value), until: yearOf($("until").value), venue: $("venue").value,
          layout: $("layout").value === "timeline" ? "timeline" : "map"};
}

function viewBody(q) {  // what /api/graph and the exports are asked: the view and its filters
  const body = {k: q.k, mode: q.mode};
  if (q.seeds && q.seeds.length) body.seeds = q.seeds;
  else if (q.paper) body.paper = q.paper; else body.text = q.text;
  if (q.since !== null && q.since !== undefined) body.since = q.since;
  if (q.until !== null && q.until !== undefined) body.until = q.until;
  if (q.venue) body.venues = [q.venue];
  return body;
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
  if (found.kind === "seeds") return go({seeds: found.matches.map((m) => m.paper_id)});
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
  const q = {...currentQuery(), paper: target.paper || null, text: target.text || null, seeds: target.seeds || [],
             survey: null};
  state.query = q;
  writeUrl(q, true);
  return load(q);
}

// ---- the view ------------------------------------------------------------------------------------
async function load(q) {
  state.query = q;
  controlsFrom(q);
  if (!q.paper && !q.text && !(q.seeds && q.seeds.length)) return;
  const t0 = performance.now();
  say(q.text && !q.paper ? "Reading the pasted paper's facets …" : "");
  let view;
  try {
    view = await api("/api/graph", viewBody(q));
  } catch (e) { say(e.message, true); return; }
  say("");
  state.view = view;
  renderList(view);
  renderLineage(view);
  renderGraph(view, q, t0);
  $("export-bib").disabled = $("export-graphml").disabled = false;
  showCard(view.centre.paper_id || view.centre.id);
}

function shortTitle(t) {  // cut at a word boundary, at most LABEL_CHARS characters
  t = String(t || "").replace(/\s+/g, " ").trim();
  if (t.length <= LABEL_CHARS) return t;
  const cut = t.slice(0, LABEL_CHARS - 1);
  const space = cut.lastIndexOf(" ");
  return (space > LABEL_CHARS / 2 ? cut.slice(0, space) : cut).replace(/[\s,:;.-]+$/, "") + "…";
}

function renderList(view) {
  const c = view.centre;
  $("results-title").textContent = view.seeds && view.seeds.length > 1
    ? `Related to ${view.seeds.length} seed papers: ` + view.seeds.map((s) => shortTitle(s.title)).join("; ")
    : (view.mode === "pivot" ? "Same problem, different method: " : "Related to: ") + (c.title || c.id);
  const list = $("hit-list");
  list.replaceChildren();
  for (const h of view.hits) {
    const li = el("li");
    li.dataset.paper = h.paper_id;
    const b = el("button", h.title, "hit-title");
    b.type = "button";
    b.addEventListener("click", () => select(h.paper_id));
    const label = h.pivot ? `problem ${h.pivot.problem.toFixed(2)} · method ${h.pivot.method.toFixed(2)}`
      : "shared: " + plainLabel(h.label);
    li.append(b, el("div", `${h.year || ""} · ${h.paper_id} · cited by ${h.cited_by} · score ${h.score.toFixed(4)}`,
                    "hit-meta"),
              el("div", label, "hit-label"));
    list.append(li);
  }
  if (!view.hits.length) list.append(el("li", view.mode === "pivot"
    ? "No result shares a problem with it." : "No related paper found.", "muted"));
}

// a result's facet label without its numbers ("problem 0.51 · method 0.50" -> "problem · method"): the
// card gives one score, the facet weights on request
function plainLabel(label) { return String(label || "").replace(/ \d+\.\d+(?= |$|\))/g, ""); }

function renderLineage(view) {
  for (const [kind, list, none] of [["prior", view.prior, "No paper shown cites a corpus paper."],
                                    ["derivative", view.derivative, "No corpus paper cites the papers shown."]]) {
    const ol = $(kind + "-list");
    ol.replaceChildren();
    for (const p of list) {
      const li = el("li");
      li.dataset.paper = p.paper_id;
      const b = el("button", p.title, "hit-title");
      b.type = "button";
      b.addEventListener("click", () => select(p.paper_id));
      const n = kind === "prior" ? `cited by ${p.count} of the papers shown` : `cites ${p.count} of the papers shown`;
      li.append(b, el("div", [p.year, n, p.in_view ? "in the view" : null].filter(Boolean).join(" · "), "hit-meta"));
      ol.append(li);
    }
    if (!list.length) ol.append(el("li", none, "muted"));
  }
}

function yearColour(year, lo, hi) {
  if (year === null || year === undefined) return NO_YEAR;
  const t = hi > lo ? (year - lo) / (hi - lo) : 1;
  const x = t * (YEAR_STOPS.length - 1), i = Math.min(YEAR_STOPS.length - 2, Math.floor(x)), f = x - i;
  const a = YEAR_STOPS[i], b = YEAR_STOPS[i + 1];
  const mix = (k) => Math.round(parseInt(a.slice(k, k + 2), 16) * (1 - f) + parseInt(b.slice(k, k + 2), 16) * f);
  return "#" + [1, 3, 5].map((k) => mix(k).toString(16).padStart(2, "0")).join("");
}

function renderLegend(lo, hi, most) {
  const legend = $("legend");
  legend.replaceChildren();
  legend.hidden = false;
  const years = el("div", null, "legend-row");
  years.append(el("span", "year", "legend-name"));
  if (lo !== null) {
    const span = hi - lo;
    const shown = span <= 10 ? [...Array(span + 1).keys()].map((i) => lo + i) : [lo, Math.round((lo + hi) / 2), hi];
    for (const y of shown) {
      const sw = el("span", String(y), "swatch");
      sw.style.background = yearColour(y, lo, hi);
      sw.style.color = (y - lo) / Math.max(1, span) > 0.6 ? "#222" : "#fff";
      years.append(sw);
    }
  }
  const none = el("span", "no year", "swatch");
  none.style.background = NO_YEAR;
  years.append(none);
  legend.append(years);
  legend.append(el("div", `size: times cited in the corpus (0 to ${most})`, "legend-row"));
  const edges = el("div", null, "legend-row");
  edges.append(el("span", "edge: strongest facet", "legend-name"));
  for (const f of [...FACETS, "citation"]) edges.append(el("span", f === "citation" ? "citation only (dashed)" : f, "f-" + f));
  legend.append(edges);
}

function renderGraph(view, q, t0) {
  $("graph-empty").hidden = true;
  const c = view.centre;
  const centres = view.seeds && view.seeds.length ? view.seeds : [c];  // a seed set: every seed a centre
  const papers = [...centres.map((p) => ({...p, centre: 1})), ...view.hits.map((h) => ({...h, id: h.paper_id, centre: 0}))];
  const years = papers.map((p) => p.year).filter((y) => y !== null && y !== undefined);
  const lo = years.length ? Math.min(...years) : null, hi = years.length ? Math.max(...years) : null;
  const most = Math.max(1, ...papers.map((p) => p.cited_by || 0));
  const nodes = papers.map((p) => ({data: {
    id: p.id, label: shortTitle(p.title), title: String(p.title || p.id), year: p.year, cited: p.cited_by || 0,
    colour: yearColour(p.year, lo, hi), size: 18 + 30 * Math.sqrt((p.cited_by || 0) / most), centre: p.centre,
    rank: p.centre ? 0 : p.position}}));
  const edges = view.links.map((e, i) => ({data: {
    id: "e" + i, source: e.source, target: e.target, facet: e.facet, weight: e.weight, facets: e.facets,
    cites: e.cites, hops: e.hops, centre: e.centre ? 1 : 0,
    width: e.facet === "citation" ? 1.5 : 1 + 6 * Math.min(1, Math.max(0, e.weight)),
    forward: e.cites.includes("forward") ? 1 : 0, backward: e.cites.includes("backward") ? 1 : 0}}));
  const style = [
    {selector: "node", style: {"background-color": "data(colour)", width: "data(size)", height: "data(size)",
      label: "data(label)", "font-size": 12, color: "#222", "text-valign": "bottom", "text-margin-y": 2,
      "text-wrap": "wrap", "text-max-width": 125, "line-height": 1.1, "text-background-color": "#fff",
      "text-background-opacity": 0.85, "text-background-padding": 1, "border-width": 1, "border-color": "#555",
      "min-zoomed-font-size": 0}},
    {selector: "node[centre = 1]", style: {"border-width": 4, "border-color": "#111", "font-size": 13,
      "font-weight": "bold", "text-max-width": 170, "z-index": 10}},
    {selector: "node:selected", style: {"border-width": 4, "border-color": "#f0a500"}},
    {selector: "node.axis", style: {"background-opacity": 0, "border-width": 0, width: 1, height: 1,
      "font-size": 14, "font-weight": "bold", color: "#555", "text-valign": "center", "text-halign": "center",
      "text-background-opacity": 0, events: "no"}},
    {selector: "edge", style: {"curve-style": "straight", width: "data(width)", opacity: 0.75}},
    {selector: "edge[centre = 0]", style: {opacity: 0.35}},
    {selector: "edge[hops = 2]", style: {"line-style": "dotted"}},
    {selector: "edge[forward = 1]", style: {"target-arrow-shape": "triangle", "arrow-scale": 0.8}},
    {selector: "edge[backward = 1]", style: {"source-arrow-shape": "triangle", "arrow-scale": 0.8}},
    {selector: "edge[facet = 'citation']", style: {"line-style": "dashed"}},
    {selector: ".hidden", style: {display: "none"}},
  ];
  for (const f of [...FACETS, "citation"]) {
    style.push({selector: `edge[facet = '${f}']`, style: {"line-color": COLOURS[f], "target-arrow-color": COLOURS[f],
      "source-arrow-color": COLOURS[f]}});
  }
  if (state.cy) state.cy.destroy();
  const cy = cytoscape({container: $("graph"), elements: {nodes: nodes, edges: edges}, style: style,
    layout: {name: "preset"}});
  state.cy = cy;
  window.graftCy = cy;
  applyToggles(q.hide);
  arrange(cy, q.layout, lo, hi);
  renderLegend(lo, hi, most);
  cy.on("tap", "node", (evt) => { if (!evt.target.hasClass("axis")) select(evt.target.id()); });
  cy.on("mouseover", "node", (evt) => { if (!evt.target.hasClass("axis")) tip(evt, nodeTip(evt.target)); });
  cy.on("mouseover", "edge", (evt) => tip(evt, edgeTip(evt.target)));
  cy.on("mouseout", "node, edge", () => { $("tip").hidden = true; });
  requestAnimationFrame(() => {  // the first frame drawn with the new graph
    const ms = performance.now() - t0;
    window.graft.timings.push(ms);
    window.graft.ready += 1;
    window.graft.centre = c.id;
    window.graft.paintedAt = performance.now();
    document.body.dataset.ready = String(window.graft.ready);
  });
}

// the map: fcose (force-directed; an edge's ideal length shrinks as its weight grows, so similar papers sit
// close), the centre fixed in the middle; the timeline: one band a year, oldest on top. Then no label
// overlaps another label or a node: `separate` pushes overlapping boxes apart.
function arrange(cy, layout, lo, hi) {
  const papers = cy.nodes().not(".axis");
  const centre = cy.nodes("[centre = 1]");
  if (layout === "timeline" && lo !== null) {
    // one band a year, oldest on top; in a band, papers left to right by rank, PER_ROW a line
    const PER_ROW = 6, GAP = 14;
    const bands = {};
    papers.forEach((n) => {
      const y = n.data("year");
      (bands[y === null || y === undefined ? "none" : y] ||= []).push(n);
    });
    const keys = Object.keys(bands).sort((a, b) => (a === "none") - (b === "none") || a - b);
    let top = 0;
    for (const k of keys) {
      const row = bands[k].sort((a, b) => a.data("rank") - b.data("rank"));
      cy.add({group: "nodes", classes: "axis", data: {id: "axis-" + k, label: k === "none" ? "no year" : k},
              position: {x: -70, y: top + 20}});
      for (let i = 0; i < row.length; i += PER_ROW) {
        let left = 0, height = 0;
        for (const n of row.slice(i, i + PER_ROW)) {
          n.position({x: 0, y: 0});
          const box = n.boundingBox({includeLabels: true});
          n.position({x: left - box.x1, y: top - box.y1});
          left += box.w + GAP;
          height = Math.max(height, box.h);
        }
        top += height + GAP;
      }
      top += GAP;  // between years
    }
    } else {
    const spread = 40 * Math.sqrt(papers.length);
    const inner = centre.length > 1 ? 80 : 0;  // several seeds: a small ring in the middle
    centre.forEach((n, i) => {
      const a = 2 * Math.PI * i / centre.length;
      n.position({x: inner * Math.cos(a), y: inner * Math.sin(a)});
    });
    papers.not(centre).forEach((n, i, all) => {  // a start spread around the centre, by rank; fcose refines it
      const a = 2 * Math.PI * i / all.length;
      n.position({x: spread * Math.cos(a), y: spread * Math.sin(a)});
    });
    cy.layout({name: typeof cytoscapeFcose !== "undefined" ? "fcose" : "cose", quality: "proof", randomize: false,
      animate: false, fit: false, nodeDimensionsIncludeLabels: true, packComponents: false,
      idealEdgeLength: (e) => e.data("facet") === "citation" ? 120 : 40 + 110 * (1 - Math.min(1, e.data("weight"))),
      edgeElasticity: (e) => 0.2 + 0.6 * Math.min(1, e.data("weight")),
      nodeRepulsion: () => 4500, nodeSeparation: 40, gravity: 0.4, gravityRange: 2, numIter: 2500,
      fixedNodeConstraint: centre.length === 1 ? [{nodeId: centre.id(), position: {x: 0, y: 0}}] : undefined,
    }).run();
    separate(cy, papers, centre.length === 1 ? centre.id() : null);
  }
  cy.fit(cy.elements(":visible"), 24);
  if (cy.zoom() > 1.4) { cy.zoom(1.4); cy.center(); }  // a few papers: not blown up
}

function separate(cy, nodes, fixed) {  // push apart any two papers whose boxes (node and label) overlap; `fixed` stays
  const gap = 6;
  for (let round = 0; round < 200; round++) {
    const boxes = nodes.map((n) => [n, n.boundingBox({includeLabels: true, includeNodes: true})]);
    let moved = false;
    for (let i = 0; i < boxes.length; i++) {
      for (let j = i + 1; j < boxes.length; j++) {
        const [a, ba] = boxes[i], [b, bb] = boxes[j];
        const dx = Math.min(ba.x2, bb.x2) - Math.max(ba.x1, bb.x1) + gap;
        const dy = Math.min(ba.y2, bb.y2) - Math.max(ba.y1, bb.y1) + gap;
        if (dx <= 0 || dy <= 0) continue;
        moved = true;
        const pa = a.position(), pb = b.position();
        const [sa, sb] = a.id() === fixed ? [0, 1] : b.id() === fixed ? [1, 0] : [0.5, 0.5];
        if (dx < dy) {  // the shorter way out
          const dir = (pb.x > pa.x || (pb.x === pa.x && j > i)) ? 1 : -1;
          a.position({x: pa.x - dir * dx * sa, y: pa.y});
          b.position({x: pb.x + dir * dx * sb, y: pb.y});
        } else {
          const dir = (pb.y > pa.y || (pb.y === pa.y && j > i)) ? 1 : -1;
          a.position({x: pa.x, y: pa.y - dir * dy * sa});
          b.position({x: pb.x, y: pb.y + dir * dy * sb});
        }
        boxes[i][1] = a.boundingBox({includeLabels: true, includeNodes: true});
        boxes[j][1] = b.boundingBox({includeLabels: true, includeNodes: true});
      }
    }
    if (!moved) return;
  }
}

function nodeTip(n) {
  return [n.data("title"), [n.data("year"), `cited ${n.data("cited")}× in the corpus`].filter(Boolean).join(" · ")];
}

function edgeTip(e) {
  const facets = Object.entries(e.data("facets") || {}).sort((a, b) => b[1] - a[1])
    .map(([f, w]) => `${f} ${w.toFixed(2)}`);
  const lines = [facets.length ? "facet edges: " + facets.join(", ") : "citation link only"];
  if (e.data("forward")) lines.push("citation: " + shortTitle(e.source().data("title")) + " cites " +
                                    shortTitle(e.target().data("title")));
  if (e.data("backward")) lines.push("citation: " + shortTitle(e.target().data("title")) + " cites " +
                                     shortTitle(e.source().data("title")));
  return lines;
}

function tip(evt, lines) {
  const box = $("tip");
  box.replaceChildren(...lines.map((t, i) => el("div", t, i ? "hit-meta" : null)));
  const t = evt.target;
  const p = evt.renderedPosition || (t.isNode() ? t.renderedPosition() : t.renderedMidpoint());
  box.style.left = Math.round(p.x + 12) + "px";
  box.style.top = Math.round(p.y + 12) + "px";
  box.hidden = false;
}

function applyToggles(hide) {
  // an edge shows its strongest facet among those not hidden; hidden when none is left (citations: the
  // citation box hides the arrows and the citation-only links)
  if (!state.cy) return;
  const cites = !hide.includes("citation");
  state.cy.edges().forEach((e) => {
    const facets = Object.entries(e.data("facets") || {}).filter(([f]) => !hide.includes(f))
      .sort((a, b) => b[1] - a[1]);
    const hasCite = (e.data("cites") || []).length > 0;
    if (facets.length) {
      e.data({facet: facets[0][0], weight: facets[0][1], width: 1 + 6 * Math.min(1, Math.max(0, facets[0][1])),
              forward: cites && e.data("cites").includes("forward") ? 1 : 0,
              backward: cites && e.data("cites").includes("backward") ? 1 : 0});
      e.removeClass("hidden");
    } else {
      e.data({facet: "citation", width: 1.5, forward: e.data("cites").includes("forward") ? 1 : 0,
              backward: e.data("cites").includes("backward") ? 1 : 0});
      e.toggleClass("hidden", !(hasCite && cites));
    }
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
    centreTitle: view ? (view.centre.title || view.centre.id) : null, links: card.links,
    score: view ? view.score : null});
}

function fillCard(c) {
  $("card-hint").hidden = true;
  $("card-title").textContent = c.title || c.id || "";
  $("card-meta").textContent = c.meta || "";
  const links = $("card-links");
  links.replaceChildren();
  const outs = c.links || {};
  for (const [name, href] of [["arXiv " + (outs.arxiv || ""), outs.arxiv_url], ["DOI " + (outs.doi || ""), outs.doi_url],
                              ["paper page", outs.url !== outs.arxiv_url && outs.url !== outs.doi_url ? outs.url : null]]) {
    if (!href || !/^https?:\/\//i.test(href)) continue;
    const a = el("a", name.trim());
    a.href = href;
    a.target = "_blank";
    a.rel = "noopener noreferrer";
    links.append(a);
  }
  links.hidden = !links.childElementCount;
  const re = $("recentre");
  re.hidden = !c.recentre;
  re.dataset.paper = c.id || "";
  const why = $("card-why");
  why.replaceChildren();
  if (c.hit) {
    why.append(el("h3", "Why it is related to the centre"));
    why.append(el("p", "shared: " + plainLabel(c.hit.label), "hit-label"));
    const score = el("p", null, "score");
    score.append(el("strong", `rank ${c.hit.rank} · score ${c.hit.score.toFixed(4)}`),
                 el("span", c.score ? ` — ${c.score.meaning}` : "", "hit-meta"));
    why.append(score);
    const numbers = el("details", null, "numbers");
    numbers.append(el("summary", "the other numbers: facet edge weights and item cosines"));
    for (const f of FACETS) {
      const ev = c.hit.evidence[f];
      if (!ev) continue;
      numbers.append(el("div", `${f}: edge weight ${ev.weight.toFixed(2)}` + (ev.hops === 2 ? " (two hops)" : "")
        + (ev.match ? ` · closest items' cosine ${ev.match.cosine.toFixed(2)}` : "")
        + (ev.match && ev.match.words && ev.match.words.length ? ` · words both papers use in this facet: ${ev.match.words.join(", ")}` : ""),
        "hit-meta"));
    }
    why.append(numbers);
    for (const f of [...FACETS].sort((a, b) => {
      const ea = c.hit.evidence[a], eb = c.hit.evidence[b];
      return (eb ? eb.weight : -1) - (ea ? ea.weight : -1);
    })) {
      const ev = c.hit.evidence[f];
      if (!ev || !ev.match) continue;
      const d = el("div", null, "pair");
      d.append(el("strong", `${f}`, "f-" + f), el("span", " closest items", "hit-meta"));
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
  let res;
  try {
    res = await fetch("/api/export/" + fmt, {method: "POST", headers: headers(true), body: JSON.stringify(viewBody(q))});
  } catch (e) { say("the explorer's server does not answer", true); return; }
  if (!res.ok) { say(((await res.json().catch(() => null)) || {}).error || "export failed", true); return; }
  save(await res.blob(), `graft-${q.seeds && q.seeds.length ? "seeds-" + q.seeds[0] : q.paper || "query"}.${fmt}`);
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
  for (const id of ["since", "until", "venue"]) {
    $(id).addEventListener("change", () => { const q = currentQuery(); writeUrl(q, true); load(q); });
  }
  $("layout").addEventListener("change", () => {
    const q = currentQuery();
    state.query = q;
    writeUrl(q, true);
    if (state.view) renderGraph(state.view, q, performance.now());
  });
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
      && (q.seeds || []).join(" ") === (state.query.seeds || []).join(" ")
      && q.k === state.query.k && q.mode === state.query.mode && q.since === state.query.since
      && q.until === state.query.until && q.venue === state.query.venue && q.layout === state.query.layout;
    state.query = q;
    if (same) { controlsFrom(q); applyToggles(q.hide); } else load(q);
  });
  if (!TOKEN) { say(NO_TOKEN, true); return; }
  try {
    state.info = await api("/api/info");
    $("index-name").textContent = `${state.info.index} · ${state.info.papers} papers`;
    if (state.info.years) {
      for (const id of ["since", "until"]) {
        $(id).min = String(state.info.years[0]);
        $(id).max = String(state.info.years[1]);
      }
      $("since").placeholder = String(state.info.years[0]);
      $("until").placeholder = String(state.info.years[1]);
    }
    for (const v of state.info.venues || []) {
      if (![...$("venue").options].some((o) => o.value === v.venue)) {
        const o = el("option", `${v.venue} (${v.papers})`);
        o.value = v.venue;
        $("venue").append(o);
      }
    }
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
  if (q.seeds && q.seeds.length) { $("search").value = q.seeds.join(" "); await load(q); }
  else if (q.paper || q.text) { if (q.paper) $("search").value = q.paper; await load(q); }
  if (q.survey) openSurveys(q.survey);
}

document.addEventListener("DOMContentLoaded", start);
