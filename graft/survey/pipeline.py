"""`write_survey`: the survey writer end to end (DESIGN.md, "Survey writer").

topic -> query expansion -> facet-attributed retrieval (fused over descriptions) -> two-stage fusion
rerank -> sections (themes of the pool) -> per section: retrieval + rerank, the topic's central
papers, a heading half its papers share (groups off the topic or with no shared phrase are not
written) -> paper names fixed for the survey, the relations between each section's papers computed
-> sections written in parallel, paragraphs of related papers, each paper's problem, method and
result together, every clause citing one paper -> clause-by-clause citation verification -> each
section's summary of its relations and its table (year, benchmarks, metrics, builds on) -> survey.md
(with a coverage appendix), references.bib, survey.json.
"""

from __future__ import annotations

import re
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from graft.config import config_to_dict
from graft.index import Index
from graft.progress import Reporter
from graft.survey.backends import SurveyContext, make_backend
from graft.survey.config import SurveyConfig, SurveyError
from graft.survey.expand import expand_topic
from graft.survey.outline import assign, level_one, topic_words
from graft.survey.output import check_out_dir, numbering, plain, write_outputs
from graft.survey.prose import split_sentences
from graft.survey.relate import section_relations
from graft.survey.relate import summary as relation_summary
from graft.survey.rerank import Literature, relevant, two_stage_rerank
from graft.survey.retrieve import DenseIndex, QueryTools, TopicRetriever, fuse_with_pool, papers_until
from graft.survey.types import Candidate, Relation, Section, unref
from graft.survey.verify import Verifier, drop_duplicates, mark_unverified, summarize, verify_all
from graft.survey.write import paragraphs, write_sections

#: Longest topic accepted, in characters (a topic is a phrase or a title, not a document).
MAX_TOPIC_CHARS = 500


@dataclass
class SurveyResult:
    """What `write_survey` produced."""

    out_dir: Path
    paths: dict[str, Path]
    title: str
    descriptions: list[str]
    sections: list[Section]
    cited: list[str]  # cited paper ids in reference-list order
    verification: dict[str, Any]
    backend_stats: dict[str, int] = field(default_factory=dict)
    timings: dict[str, float] = field(default_factory=dict)


def clean_topic(topic: str) -> str:
    """The topic as one line of plain text (control characters removed).

    Raises:
        SurveyError: empty, or longer than MAX_TOPIC_CHARS.
    """
    text = plain(topic or "")
    if not text:
        raise SurveyError('the topic is empty; pass a phrase such as "neural machine translation"')
    if len(text) > MAX_TOPIC_CHARS:
        raise SurveyError(f"the topic is {len(text)} characters long; give a phrase or a title of at most "
                          f"{MAX_TOPIC_CHARS} characters")
    return text


def _locked(encode: Any) -> Any:
    lock = threading.Lock()

    def run(texts: list[str]) -> np.ndarray:
        with lock:
            return np.asarray(encode(list(texts)), dtype=np.float32)

    return run


class _LockedEncoder:
    """An encoder whose `encode` runs one call at a time (the writer's sections run in threads);
    everything else (its dimension, model, the extractor's use of it) is the encoder's own."""

    def __init__(self, encoder: Any, encode: Any) -> None:
        self._encoder = encoder
        self.encode = encode

    def __getattr__(self, name: str) -> Any:
        return getattr(self._encoder, name)


class Ranker:
    """The relevance filter and the two-stage rerank of one survey's candidate lists (the topic's
    and each section's), remembering the facets that surfaced each paper for the citations.

    Args:
        config: the survey settings (rerank, floors, weights).
        ctx: the survey context (vectors, encoder).
        backend: the writer backend, whose reranker is stage 2.
        topic_vec: the topic's embedding; floor: the topic cosine a candidate needs (see `relevant`).
    """

    def __init__(self, config: SurveyConfig, ctx: SurveyContext, backend: Any, topic_vec: np.ndarray,
                 floor: float) -> None:
        self.config, self.ctx, self.backend, self.topic_vec, self.floor = config, ctx, backend, topic_vec, floor
        #: paper id -> facet -> the largest term any list gave it
        self.attribution: dict[str, dict[str, float]] = {}
        #: the papers retrieved for the topic (set by `topic_pool`): links into them rank and keep papers
        self.literature: Literature | None = None

    def __call__(self, cands: list[Candidate], description: str, keep: int) -> list[Candidate]:
        """The best `keep` candidates for `description` (the first `keep` when the rerank is off)."""
        for c in cands:
            acc = self.attribution.setdefault(c.paper_id, {})
            for f, v in c.facets.items():
                acc[f] = round(max(acc.get(f, 0.0), v), 6)
        config, papers, row_of = self.config, self.ctx.vectors.papers, self.ctx.index.row_of
        if not config.rerank:
            return cands[:keep]
        inside = total = ties = None
        if self.literature is not None:
            rows = [row_of[c.paper_id] for c in cands]
            inside, on_topic, total = self.literature.counts(rows)
            ties = on_topic * self.literature.member(rows)  # only the topic's own papers are kept for their ties
        kept = relevant(cands, self.topic_vec, papers, row_of, self.floor, ties, total,
                        tie_links=config.tie_links, tie_share=config.tie_share, tie_floor=config.tie_floor)
        if not kept:
            return []
        links = None
        if inside is not None:
            of = {c.paper_id: float(x) for c, x in zip(cands, inside)}
            links = [of[c.paper_id] for c in kept]
        return two_stage_rerank(kept, description, self.ctx.vec(description), papers, row_of, self.backend,
                                keep=keep, llm_keep=config.llm_rerank_keep, recency_weight=config.recency_weight,
                                retrieval_weight=config.retrieval_weight, links=links,
                                link_weight=config.link_weight)


@dataclass
class TopicPool:
    """The papers a survey is drawn from: what `topic_pool` found for a topic."""

    descriptions: list[str]  # the topic's descriptions (query expansion), the topic first
    candidates: list[Candidate]  # their retrievals fused, best first
    pool: list[Candidate]  # the candidates after the relevance filter and the rerank (config.pool at most)
    floor: float  # the topic cosine a candidate needed to stay
    rank: Ranker  # the filter and rerank, for the sections' lists


def topic_pool(topic: str, retriever: TopicRetriever, ctx: SurveyContext, backend: Any, config: SurveyConfig,
               reporter: Reporter | None = None) -> TopicPool:
    """Query expansion, retrieval over the descriptions and the topic rerank: the first three stages
    of `write_survey`, on their own so that what each keeps can be measured.

    Raises:
        SurveyError: no retrieved paper reaches `config.min_relevance` (an off-topic query).
    """
    reporter = reporter or Reporter(quiet=True)
    index, vectors, row_of = ctx.index, ctx.vectors, ctx.index.row_of
    with reporter.stage("expand", total=config.descriptions, unit="descriptions") as adv:
        descriptions, pseudo = expand_topic(topic, retriever, backend, config.descriptions, k=config.per_description)
        adv(len(descriptions))
    topic_vec = ctx.vec(topic)
    best = max((float(vectors.papers[row_of[c.paper_id]] @ topic_vec) for c in pseudo), default=0.0)
    if not pseudo or best < config.min_relevance:
        searched, hint = f"{index.n} papers", ""
        if config.until_year is not None:  # the cut-off, not the topic, may be what leaves nothing
            dated = int(papers_until(index, config.until_year).sum())
            searched = f"{index.n} papers, {dated} of them dated {config.until_year} or earlier"
            hint = ", a later --until-year"
        raise SurveyError(
            f"no paper of index '{index.path}' ({searched}) is about the topic {topic!r}: the closest "
            f"has cosine {best:.2f} < min_relevance {config.min_relevance:.2f}. Try a topic the corpus covers "
            f"(see `graft query INDEX --text ...`){hint}, or, from Python, a lower SurveyConfig.min_relevance"
        )
    # papers less similar to the topic than this are dropped before the rerank
    floor = max(config.min_relevance, config.relative_relevance * best)
    rank = Ranker(config, ctx, backend, topic_vec, floor)
    with reporter.stage("retrieve", total=len(descriptions), unit="descriptions") as adv:
        candidates = retriever.search(descriptions, config.per_description)
        adv(len(descriptions))
    nodes = np.array([row_of[c.paper_id] for c in candidates], dtype=np.int64)
    above = (vectors.papers[nodes] @ topic_vec >= floor) if len(nodes) else np.zeros(0, dtype=bool)
    rank.literature = Literature(index.citation_links, nodes, nodes[above])
    with reporter.stage("rerank", total=1, unit="lists") as adv:
        pool = rank(candidates, topic, config.pool)
        adv(1)
    return TopicPool(descriptions=descriptions, candidates=candidates, pool=pool, floor=floor, rank=rank)


def _check_not_degraded(name: str, stats: dict[str, int], first: str | None = None) -> None:
    """Stop a survey whose LLM requests mostly failed (refused, redirected, cut short): it would be
    the offline writer's under the LLM's name. Answers that fail their schema are the model's and
    count as answers (their steps fall back, counted).

    Raises:
        SurveyError: with the counts; nothing is written (the answers received are cached).
    """
    errors = sum(v for k, v in stats.items() if k.endswith("_llm_errors"))
    asked = errors + sum(v for k, v in stats.items() if k.endswith(("_answers", "_bad_json")))
    if asked and 2 * errors > asked:
        raise SurveyError(f"{errors} of {asked} requests to the LLM server of backend {name} failed"
                          + (f" (first: {first[:300]})" if first else "") + ": the survey would be mostly the offline writer's, so it is not written. "
                          "Fix the server or its URL and rerun (the answers received are cached), or write it with "
                          "--llm offline")


def write_survey(index: Index, topic: str, out_dir: str | Path, config: SurveyConfig | None = None,
                 reporter: Reporter | None = None, *, tools: QueryTools, dense: DenseIndex | None = None,
                 device: str = "cpu") -> SurveyResult:
    """Write a survey of `topic` from the papers of `index` into `out_dir`.

    Args:
        index: the opened index.
        topic: the survey topic (treated as data: escaped in the outputs, quoted in LLM prompts).
        out_dir: where survey.md, references.bib and survey.json go (created).
        config: survey settings (backend, retriever, outline sizes, verification rounds).
        reporter: per-stage progress and timings; quiet by default.
        tools: the encoder and the text coupling and feedback of text queries, as the config's
            (`QueryTools(encoder, text_neighbours=config.text_neighbours, feedback=config.feedback)`).
        dense: title + abstract vectors for the dense retriever (reused across calls).
        device: where the generative retriever and a local LLM (`llm="local"`) run.
    Returns:
        the `SurveyResult` (paths, outline, cited ids, verification counts, timings).
    Raises:
        SurveyError: empty or off-topic retrieval, bad settings, tools made with other settings
            (`QueryTools.check`), no trained model for --retriever graft.
    """
    config = config or SurveyConfig()
    reporter = reporter or Reporter(quiet=True)
    topic = clean_topic(topic)
    out_dir = Path(out_dir)
    check_out_dir(out_dir)
    if config.until_year is not None:
        allowed = papers_until(index, config.until_year)
        if not allowed.any():
            years = [y for y in index.papers["year"].to_list() if y is not None]
            raise SurveyError(f"no paper of index '{index.path}' is dated {config.until_year} or earlier "
                              f"(earliest: {min(years)}); give a later --until-year")
    tools.check(config, index)
    encode = _locked(tools.encoder.encode)
    tools = QueryTools(encoder=_LockedEncoder(tools.encoder, encode), text_neighbours=tools.text_neighbours,
                       feedback=tools.feedback)
    retriever = TopicRetriever(index, tools, config.retriever, dense=dense, device=device, seeds=config.graph_seeds,
                               until_year=config.until_year, citation_weight=config.citation_weight)
    vectors = retriever.vectors
    ctx = SurveyContext(index=index, vectors=vectors, encode=encode, config=config)
    backend = make_backend(ctx, device)
    row_of = index.row_of
    t0 = time.perf_counter()

    chosen = topic_pool(topic, retriever, ctx, backend, config, reporter)
    pool, rank, floor = chosen.pool, chosen.rank, chosen.floor
    descriptions, attribution = chosen.descriptions, chosen.rank.attribution
    # central among the papers about the topic: a hub every paper cites (a library, an optimiser) is
    # linked to the whole pool without being what the survey is about
    on_topic = [c.paper_id for c in pool if float(vectors.papers[row_of[c.paper_id]] @ rank.topic_vec) >= floor]
    central = central_papers(index, on_topic, config.central)
    with reporter.stage("outline", total=1, unit="outlines") as adv:
        heads = level_one(topic, pool, backend, config.sections)
        adv(1)

    sections: list[Section] = []
    jobs: list[tuple[str, str, list[Candidate], list[Relation]]] = []
    off_sections: list[dict[str, Any]] = []
    unthemed: list[dict[str, Any]] = []
    taken: set[str] = set()
    # every pool paper belongs to the section whose description it is closest to; a section ranks its
    # share of the pool together with the best `section_pool` papers of its own fresh retrieval
    shares = assign(pool, [d for _, d in heads], encode, vectors.papers, row_of, len(pool))
    section_pools: dict[str, list[Candidate]] = {}
    # the topic's distinctive words, and which papers use them: a section most of whose papers name
    # none of them is about something else
    distinctive = topic_words(index, topic, config.topic_word_share)
    naming = np.zeros(index.n, dtype=bool)
    for rows in distinctive.values():
        naming[rows] = True
    worded = 0  # groups left out because their papers do not name those words
    with reporter.stage("sections", total=len(heads), unit="sections") as adv:
        for (title, description), share in zip(heads, shares):
            own = retriever.search([description], config.per_description)[: config.section_pool]
            found = fuse_with_pool(own, share, ctx.vec(description), vectors.papers, row_of)
            sec_pool = rank(found, description, config.section_pool)
            section_pools[title] = sec_pool
            # the topic's central papers of this share are discussed first, whatever the section's rerank says
            first = [c for c in share if c.paper_id in central and c.paper_id not in taken]
            rest = [c for c in sec_pool if c.paper_id not in taken and c.paper_id not in {x.paper_id for x in first}]
            # relevance to the topic, not only to the section, decides: the rerank kept papers above the
            # floor or tied to the topic's literature; without it (or tied papers not discussed) the floor
            if not (config.rerank and config.tied_discussed):
                rest = [c for c in rest if float(vectors.papers[row_of[c.paper_id]] @ rank.topic_vec) >= floor]
            if hasattr(backend, "theme_section"):  # a heading half the papers it discusses share
                used = {s.title for s in sections} | {h for h, _ in heads if h != title}
                mine = {c.paper_id for c in first + rest}
                new, papers, shared = backend.theme_section(topic, title, first, rest, config.papers_per_section,
                                                            used, [c.paper_id for c in pool if c.paper_id not in mine])
                title = new if new not in used else title
                if not shared and papers:  # no phrase half of them share: not a theme, unless nothing else is
                    unthemed.append({"title": title, "description": description, "papers": papers,
                                     "why": "no phrase is shared by half of its papers"})
                    adv(1)
                    continue
            else:
                papers = (first + rest)[: max(config.papers_per_section, len(first))]
            if not papers:
                adv(1)
                continue
            # a theme whose papers are mostly not about the topic (kept for their links alone) is not written
            on = sum(float(vectors.papers[row_of[c.paper_id]] @ rank.topic_vec) >= floor for c in papers)
            named = sum(bool(naming[row_of[c.paper_id]]) for c in papers)
            why, by_words = "", False
            if 2 * on < len(papers):
                why = f"{on} of its {len(papers)} papers reach the topic's relevance floor"
            elif distinctive and 2 * named <= len(papers):
                why = f"{named} of its {len(papers)} papers name the topic's words ({', '.join(sorted(distinctive))})"
                by_words = True
            if why and not first:
                off_sections.append({"title": title, "papers": [{"paper_id": c.paper_id, "title": c.title}
                                                                for c in papers], "why": why})
                if by_words:
                    worded += 1
                adv(1)
                continue
            taken.update(c.paper_id for c in papers)
            sections.append(Section(title=title, description=description, papers=[c.paper_id for c in papers]))
            jobs.append((title, description, papers, []))
            adv(1)
    if not sections and unthemed:  # a survey of one loose section rather than none
        loose = unthemed.pop(0)
        sections.append(Section(title=loose["title"], description=loose["description"],
                                papers=[c.paper_id for c in loose["papers"]]))
        jobs.append((loose["title"], loose["description"], loose["papers"], []))
    off_sections += [{"title": u["title"], "papers": [{"paper_id": c.paper_id, "title": c.title} for c in u["papers"]],
                      "why": u["why"]} for u in unthemed]
    # names are fixed for the whole survey (no two papers share one), then each section's relations
    ctx.composer.settle_names([c.paper_id for job in jobs for c in job[2]])
    for sec, job in zip(sections, jobs):
        sec.relations = section_relations(index, vectors, sec.papers,
                                          [ctx.composer.name_of(ctx.composer.profile(p)).text for p in sec.papers])
        job[3].extend(sec.relations)

    with reporter.stage("write", total=len(jobs), unit="sections") as adv:
        written = write_sections(jobs, backend, topic=topic, max_concurrency=config.max_concurrency,
                                 attribution=attribution, progress=adv)
    for sec, sentences in zip(sections, written):
        sec.paragraphs = paragraphs(sentences)
    all_sentences = [s for sec in sections for s in sec.sentences()]
    if not all_sentences:
        hint = (f" (--topic-words {config.topic_word_share:g} left out {worded} group(s) whose papers do not "
                f"name {', '.join(sorted(distinctive))}: a lower SHARE or 0 keeps them)" if worded else "")
        raise SurveyError(f"the retrieved papers gave no sentence to write about {topic!r}; try a broader topic"
                          + hint)

    corpus_ids = set(index.paper_ids)
    with reporter.stage("verify", total=len(all_sentences), unit="sentences") as adv:
        if config.verify:
            verifier = Verifier(ctx, backend, rounds=config.verify_rounds, evidence_k=config.evidence_k)
            verification = verify_all(all_sentences, verifier, corpus_ids=corpus_ids,
                                      max_concurrency=config.max_concurrency, progress=adv)
        else:
            verification = mark_unverified(all_sentences, corpus_ids)
            adv(len(all_sentences))
        cited = {c.citation.paper_id for s in all_sentences for c in s.clauses if c.citation.paper_id in corpus_ids}
        names = {p: f"{index.papers['title'][index.row(p)]} {ctx.composer.name_of(ctx.composer.profile(p)).text}"
                 for p in cited}
        if drop_duplicates(all_sentences, names):
            verification = summarize(all_sentences)
    kept = [s for s in all_sentences if not s.dropped]
    if not kept:
        raise SurveyError(f"no sentence about {topic!r} could be verified against its cited papers; "
                          "try a broader topic or a corpus that covers it")
    name_first_mentions(sections, ctx.composer)
    everywhere = [p for sec in sections for s in sec.sentences() if not s.dropped for p in s.cited()]
    for sec in sections:
        discussed = list(dict.fromkeys(p for s in sec.sentences() if not s.dropped for p in s.cited()))
        sec.table = [row for row in ctx.composer.table([c for c in jobs[sections.index(sec)][2]], everywhere)
                     if row.paper_id in discussed]
        theme, named = theme_coverage(sec.title, discussed, index)
        sec.summary = relation_summary(sec.relations, discussed,
                                       {p: unref(ctx.composer.name_of(ctx.composer.profile(p)).text)
                                        for p in discussed},
                                       theme if 2 * named >= len(discussed) else "", named)
    verification["table_cells"] = check_table(sections, ctx) if config.verify else {"checked": 0, "passed": 0}
    sections = [sec for sec in sections if any(not s.dropped for s in sec.sentences())]
    verification["relations"] = relation_counts(sections)

    title = f"{topic}: a survey"
    backend_stats = dict(getattr(backend, "stats", {}))
    _check_not_degraded(backend.name, backend_stats, getattr(backend, "first_error", None))
    coverage = coverage_report(chosen, sections, section_pools, central, index)
    coverage["off_topic_sections"] = off_sections
    grouped = {x["paper_id"] for group in off_sections for x in group["papers"]}  # listed once, with their group
    coverage["left_out"] = [x for x in coverage["left_out"] if x["paper_id"] not in grouped]
    with reporter.stage("output", total=3, unit="files") as adv:
        note = checked_note(index, backend.name, config, verification)
        meta = {
            "config": config_to_dict(config),
            "index": {"path": str(index.path), "papers": index.n, "corpus_hash": index.manifest.get("corpus_hash")},
            "backend": backend.name,
            "descriptions": descriptions,
            "relevance_floor": round(floor, 4),
            "pool": [c.to_json() for c in pool],
            "central": central,
            "verification": verification,
            "coverage": coverage,
            "backend_stats": backend_stats,
        }
        paths = write_outputs(out_dir, topic=topic, title=title, sections=sections, index=index, note=note,
                              meta=meta, coverage=coverage)
        adv(3)
    cited = [pid for pid, _ in sorted(numbering(sections).items(), key=lambda x: x[1])]
    timings = reporter.timings()
    timings["total"] = time.perf_counter() - t0
    return SurveyResult(out_dir=out_dir, paths=paths, title=title, descriptions=descriptions, sections=sections,
                        cited=cited, verification=verification, backend_stats=backend_stats, timings=timings)


def central_papers(index: Index, pool: list[str], n: int) -> list[str]:
    """The `n` papers of the pool most linked by citations to the rest of the pool (at least one
    link), most linked first (ties: pool order): the topic's central papers."""
    if n <= 0 or not pool:
        return []
    rows = np.array([index.row(p) for p in pool])
    links = index.citation_links[rows][:, rows]
    degree = np.asarray(links.sum(axis=1)).ravel()
    order = sorted(range(len(pool)), key=lambda i: (-degree[i], i))
    return [pool[i] for i in order[:n] if degree[i] > 0]


def check_table(sections: list[Section], ctx: SurveyContext) -> dict[str, int]:
    """Check every table cell against its row's paper: a year against its metadata, each benchmark
    and metric name against the paper's title and abstract (found there word for word), each paper it
    builds on against the citation links and years; a cell that fails is emptied. Returns
    {"checked", "passed"}."""
    from graft.survey.relate import builds_on_links
    from graft.survey.types import REF_CLOSE, REF_OPEN

    index = ctx.index
    checked = passed = 0
    for sec in sections:
        for row in sec.table:
            node = index.row(row.paper_id)
            text = plain(f"{index.papers['title'][node] or ''} {index.papers['abstract'][node] or ''}")
            for key, cell in row.cells.items():
                if not cell:
                    continue
                checked += 1
                if key == "year":
                    ok = cell == str(index.papers["year"][node])
                elif key == "builds_on":
                    cited = [x.split(REF_CLOSE)[0] for x in cell.split(REF_OPEN)[1:]]
                    links = set(builds_on_links(index, [row.paper_id, *cited]))
                    ok = all((row.paper_id, p) in links for p in cited)
                else:
                    ok = all(re.search(rf"(?<![\w-]){re.escape(x.strip())}(?![\w-])", text, re.I) for x in cell.split(","))
                if ok:
                    passed += 1
                else:
                    row.cells[key] = ""
    return {"checked": checked, "passed": passed}


def name_first_mentions(sections: list[Section], composer: Any) -> None:
    """A paper's first printed clause in its section names it: when verification removed the sentence
    that did, the next one's "it" / "they" becomes the paper's name (the verb already agrees)."""
    for sec in sections:
        named: set[str] = set()
        for s in sec.sentences():
            if s.dropped:
                continue
            for c in s.kept_clauses():
                pid = c.citation.paper_id
                if pid in named:
                    continue
                named.add(pid)
                m = re.match(r"(it|they) ", c.text)
                if m and not pid.startswith("unknown:"):
                    c.text = composer.name_of(composer.profile(pid)).text + c.text[m.end() - 1:]


def relation_counts(sections: list[Section]) -> dict[str, int]:
    """How many computed statements relating papers the survey prints: the sentences of the
    sections' summaries, and the openers (a relation) of printed sentences whose papers are all
    printed."""
    from graft.survey.types import REF_CLOSE, REF_OPEN

    printed_ids = {p for sec in sections for s in sec.sentences() if not s.dropped for p in s.cited()}
    # the summary's sentences but the first, which names the section's theme ("6 of the 8 papers
    # discussed here name ..."): a count, not a relation
    # (`split_sentences`: the papers' names' "et al." and initials end no sentence)
    summary = sum(len(split_sentences(re.sub(r"^[^.]*? discussed here names? [^.]*\.\s*", "", sec.summary)))
                  for sec in sections if sec.summary)
    openers = 0
    for sec in sections:
        for s in sec.sentences():
            if s.dropped or not s.relation or not s.cited():
                continue
            named = [x.split(REF_CLOSE)[0] for x in s.opener.split(REF_OPEN)[1:]]
            openers += all(p in printed_ids for p in named)
    return {"summary_sentences": summary, "openers": openers, "statements": summary + openers}


def theme_coverage(heading: str, paper_ids: list[str], index: Index) -> tuple[str, int]:
    """The heading and how many of the papers name all its content words (stemmed) in their title or
    abstract."""
    from graft.survey.outline import content_stems

    want = content_stems(heading)
    if not want:
        return heading, 0
    n = 0
    for p in paper_ids:
        node = index.row(p)
        have = content_stems(f"{index.papers['title'][node] or ''} {index.papers['abstract'][node] or ''}")
        n += want <= have
    return heading, n


def checked_note(index: Index, backend: str, config: SurveyConfig, verification: dict[str, Any]) -> str:
    """The survey's header: what it was made from, and what was checked and how."""
    made = (f"Written by GRAFT's {backend} writer from the {index.n} papers of index {index.path.name} "
            f"({config.retriever} retrieval).")
    if not config.verify:
        return made + " Citations were NOT checked."
    v = verification
    kept = v["citations_kept"]
    n_kept = kept.get("verified", 0) + kept.get("repaired", 0)
    judge = "" if backend == "offline" else f", and {backend} was asked whether the paper says it"
    return (made + f" Each citation marks one clause about one paper, and each of the {n_kept} printed (clause, "
            f"paper) pairs was checked against that paper's title, abstract and facet items: the clause's content "
            f"words and meaning (MiniLM) must match one of the paper's sentences, better than they match the "
            f"paper's {config.support_rivals} nearest neighbours in the facet graph, with every number found in the "
            f"paper{judge}. {v['first_check_passed']} of {v['first_check']} clauses passed at once; "
            f"{v['clauses_repaired']} {'was' if v['clauses_repaired'] == 1 else 'were'} rewritten from the cited "
            f"paper's own sentences and checked again; {v['citations'].get('removed', 0)} "
            f"{'citation' if v['citations'].get('removed', 0) == 1 else 'citations'} that still failed "
            f"{'was' if v['citations'].get('removed', 0) == 1 else 'were'} removed with their clauses "
            f"(survey.json lists each). Table cells — a paper's year, the benchmarks and metrics its abstract names, "
            f"the surveyed papers it cites that are not newer — were checked against its metadata, abstract and "
            f"citation links ({v.get('table_cells', {}).get('passed', 0)} of "
            f"{v.get('table_cells', {}).get('checked', 0)} passed).{_relations_note(v)}")


def _relations_note(v: dict[str, Any]) -> str:
    """The header's sentence on the computed statements (relations), from their counts."""
    r = v.get("relations", {})
    if not r.get("statements"):
        return ""
    n = r["statements"]
    what = "The one statement that relates papers" if n == 1 else f"The {n} statements that relate papers"
    return (f" {what} (the same problem with different methods, similar methods, one paper building on "
            f"another, results on the same benchmark) {'is' if n == 1 else 'are'} computed from facet similarity, "
            f"citation links, years and the benchmarks the abstracts name, not taken from the papers.")


def coverage_report(chosen: TopicPool, sections: list[Section], section_pools: dict[str, list[Candidate]],
                    central: list[str], index: Index, k: int = 5) -> dict[str, Any]:
    """What the survey covers and leaves out: strong candidates not discussed (in a pool but not
    written about, or kept out as off-topic), thin sections, and where the central papers are."""
    discussed = {p for sec in sections for s in sec.sentences() if not s.dropped for p in s.cited()}
    titles = index.papers["title"].to_list()
    pooled = list(dict.fromkeys([c.paper_id for c in chosen.pool]
                                + [c.paper_id for sp in section_pools.values() for c in sp]))
    topic_vec = chosen.rank.topic_vec
    papers = chosen.rank.ctx.vectors.papers
    config = chosen.rank.config
    # the reranked pools hold papers above the floor or tied to the topic's literature: with tied papers
    # discussed, both kinds are candidates a section could have written about
    tied_ok = config.rerank and config.tied_discussed
    left = [{"paper_id": p, "title": titles[index.row(p)], "why": "in the reranked pool, not among its section's "
             "best papers"} for p in pooled if p not in discussed
            and (tied_ok or float(papers[index.row(p)] @ topic_vec) >= chosen.floor)][:k]
    kept = {c.paper_id for c in chosen.pool}
    in_pools = set(pooled)
    dropped = [c for c in chosen.candidates if c.paper_id not in discussed
               and not (tied_ok and c.paper_id in in_pools)][: 6 * k]
    off = []
    for c in dropped:
        cos = float(papers[index.row(c.paper_id)] @ topic_vec)
        if cos < chosen.floor:
            tied = " (kept in the pool for its citation ties to the topic's papers)" if c.paper_id in kept else ""
            off.append({"paper_id": c.paper_id, "title": titles[index.row(c.paper_id)],
                        "why": f"off-topic: cosine with the topic {cos:.2f} < {chosen.floor:.2f}{tied}"})
    thin = []
    for sec in sections:
        parts = {"method" if s.part == "contribution" else s.part for s in sec.sentences() if not s.dropped}
        n = len({p for s in sec.sentences() if not s.dropped for p in s.cited()})
        missing = [p for p in ("problem", "method", "result") if p not in parts]
        if n < 3 or missing:
            thin.append({"section": sec.title, "papers": n, "missing": missing})
    where = {}
    for p in central:
        where[p] = next((sec.title for sec in sections if p in {x for s in sec.sentences() if not s.dropped
                                                               for x in s.cited()}), None)
    facets: dict[str, set[str]] = {}
    for sec in sections:
        for s in sec.sentences():
            if s.dropped:
                continue
            for c in s.kept_clauses():
                kind = "method" if c.facet == "contribution" else c.facet
                facets.setdefault(c.citation.paper_id, set()).add(kind)
    statements = {"papers": len(facets), "all_three": sum({"problem", "method", "result"} <= f for f in facets.values()),
                  **{k: sum(k in f for f in facets.values()) for k in ("problem", "method", "result")}}
    return {"left_out": left, "off_topic": off[:k], "thin_sections": thin, "statements": statements,
            "central": [{"paper_id": p, "title": titles[index.row(p)], "section": where[p]} for p in central]}
