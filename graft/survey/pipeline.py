"""`write_survey`: the survey writer end to end (DESIGN.md, "Survey writer").

topic -> query expansion -> facet-attributed retrieval (fused over descriptions) -> two-stage fusion
rerank -> level-1 outline -> per section: retrieval + rerank -> level-2 outline -> subsections
written in parallel -> adaptive citation verification -> survey.md, references.bib, survey.json.
"""

from __future__ import annotations

import threading
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from graft.config import config_to_dict
from graft.index import Index
from graft.progress import Reporter
from graft.survey.backends import SurveyContext, make_backend
from graft.survey.config import SurveyConfig, SurveyError
from graft.survey.expand import expand_topic
from graft.survey.outline import assign, level_one, level_two
from graft.survey.output import check_out_dir, numbering, plain, write_outputs
from graft.survey.rerank import relevant, two_stage_rerank
from graft.survey.retrieve import DenseIndex, QueryTools, TopicRetriever, fuse_with_pool, papers_until
from graft.survey.types import Candidate, Section, Subsection
from graft.survey.verify import drop_duplicates, mark_unverified, summarize, verify_all
from graft.survey.write import write_parts

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

    def __call__(self, cands: list[Candidate], description: str, keep: int) -> list[Candidate]:
        """The best `keep` candidates for `description` (the first `keep` when the rerank is off)."""
        for c in cands:
            acc = self.attribution.setdefault(c.paper_id, {})
            for f, v in c.facets.items():
                acc[f] = round(max(acc.get(f, 0.0), v), 6)
        config, papers, row_of = self.config, self.ctx.vectors.papers, self.ctx.index.row_of
        if not config.rerank:
            return cands[:keep]
        cands = relevant(cands, self.topic_vec, papers, row_of, self.floor, config.tie_support)
        if not cands:
            return []
        return two_stage_rerank(cands, description, self.ctx.vec(description), papers, row_of, self.backend,
                                keep=keep, llm_keep=config.llm_rerank_keep, recency_weight=config.recency_weight,
                                retrieval_weight=config.retrieval_weight)


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
    with reporter.stage("rerank", total=1, unit="lists") as adv:
        pool = rank(candidates, topic, config.pool)
        adv(1)
    return TopicPool(descriptions=descriptions, candidates=candidates, pool=pool, floor=floor, rank=rank)


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
        tools: the encoder, edge-row scorer and facet extractor for text queries, made with the
            config's text coupling and feedback (`QueryTools.from_scorer(graphbuild.external.ExternalScorer(
            index, text_neighbours=config.text_neighbours, feedback=config.feedback))`).
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
    tools.check(config)
    tools = QueryTools(encoder=tools.encoder, rows=tools.rows, facets_of=tools.facets_of)
    encode = _locked(tools.encoder.encode)
    tools.encoder = type("LockedEncoder", (), {"encode": staticmethod(encode)})()
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
    with reporter.stage("outline", total=1, unit="outlines") as adv:
        heads = level_one(topic, pool, backend, config.sections)
        adv(1)

    sections: list[Section] = []
    jobs = []
    taken: set[str] = set()
    used_heads = {h for h, _ in heads}
    # every pool paper belongs to the section whose description it is closest to; a section ranks its
    # share of the pool together with the best `section_pool` papers of its own fresh retrieval
    shares = assign(pool, [d for _, d in heads], encode, vectors.papers, row_of, len(pool))
    with reporter.stage("sections", total=len(heads), unit="sections") as adv:
        for (title, description), share in zip(heads, shares):
            own = retriever.search([description], config.per_description)[: config.section_pool]
            found = fuse_with_pool(own, share, ctx.vec(description), vectors.papers, row_of)
            sec_pool = rank(found, description, config.section_pool)
            subs = level_two(topic, title, sec_pool, backend, config.subsections, used_heads)
            used_heads.update(h for h, _ in subs)
            parts = assign(sec_pool, [d for _, d in subs], encode, vectors.papers, row_of,
                           config.papers_per_subsection, taken)
            section = Section(title=title, description=description, papers=[c.paper_id for c in sec_pool])
            for (sub_title, sub_desc), papers in zip(subs, parts):
                if not papers:
                    continue
                taken.update(c.paper_id for c in papers)
                sub = Subsection(title=sub_title, papers=[c.paper_id for c in papers])
                section.subsections.append(sub)
                jobs.append((sub, title, sub_title, sub_desc, papers))
            if section.subsections:
                sections.append(section)
            adv(1)

    with reporter.stage("write", total=len(jobs), unit="subsections") as adv:
        written = write_parts([(t, st, d, p) for _, t, st, d, p in jobs], backend, topic=topic,
                              max_concurrency=config.max_concurrency, attribution=attribution, progress=adv)
    for (sub, *_), sentences in zip(jobs, written):
        sub.sentences = sentences
    all_sentences = [s for sec in sections for sub in sec.subsections for s in sub.sentences]
    if not all_sentences:
        raise SurveyError(f"the retrieved papers gave no sentence to write about {topic!r}; try a broader topic")

    corpus_ids = set(index.paper_ids)
    pool_ids = list(dict.fromkeys([c.paper_id for c in pool] + [p for sec in sections for p in sec.papers]))
    with reporter.stage("verify", total=len(all_sentences), unit="sentences") as adv:
        if config.verify:
            verification = verify_all(all_sentences, backend, rounds=config.verify_rounds, pool=pool_ids,
                                      attribution=attribution, corpus_ids=corpus_ids,
                                      max_concurrency=config.max_concurrency, progress=adv)
        else:
            verification = mark_unverified(all_sentences, corpus_ids)
            adv(len(all_sentences))
        if drop_duplicates(all_sentences):
            verification = summarize(all_sentences)
    kept = [s for s in all_sentences if not s.dropped]
    if not kept:
        raise SurveyError(f"no sentence about {topic!r} could be verified against its cited papers; "
                          "try a broader topic or a corpus that covers it")
    # a subsection whose every sentence was dropped (e.g. repeating what its papers gave another
    # subsection) has nothing to show: it leaves the outline, its sentences stay on record
    emptied = [{"section": sec.title, "subsection": sub.title, "sentences": [asdict(x) for x in sub.sentences]}
               for sec in sections for sub in sec.subsections if all(x.dropped for x in sub.sentences)]
    for sec in sections:
        sec.subsections = [sub for sub in sec.subsections if not all(x.dropped for x in sub.sentences)]
    sections = [sec for sec in sections if sec.subsections]

    title = f"{topic}: a survey"
    backend_stats = dict(getattr(backend, "stats", {}))
    with reporter.stage("output", total=3, unit="files") as adv:
        note = (f"Generated by GRAFT from the {index.n} papers of index {index.path.name} "
                f"({backend.name} writer, {config.retriever} retrieval); "
                + (f"every citation checked against the cited paper, up to {config.verify_rounds} rounds."
                   if config.verify else "citations NOT verified."))
        meta = {
            "config": config_to_dict(config),
            "index": {"path": str(index.path), "papers": index.n, "corpus_hash": index.manifest.get("corpus_hash")},
            "backend": backend.name,
            "descriptions": descriptions,
            "relevance_floor": round(floor, 4),
            "pool": [c.to_json() for c in pool],
            "verification": verification,
            "subsections_emptied": emptied,
            "backend_stats": backend_stats,
        }
        paths = write_outputs(out_dir, topic=topic, title=title, sections=sections, index=index, note=note,
                              meta=meta)
        adv(3)
    cited = [pid for pid, _ in sorted(numbering(sections).items(), key=lambda x: x[1])]
    timings = reporter.timings()
    timings["total"] = time.perf_counter() - t0
    return SurveyResult(out_dir=out_dir, paths=paths, title=title, descriptions=descriptions, sections=sections,
                        cited=cited, verification=verification, backend_stats=backend_stats, timings=timings)
