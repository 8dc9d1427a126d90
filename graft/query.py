"""The front door for queries: `QueryConfig` (every setting of a query, checked in one place) and
`Searcher` (an index's related papers under one config). `graft query`, `graft.Index.query`, the
survey writer and the evaluation all ask a `Searcher`.

A query is a corpus paper (`paper(id)`, or a record `{"id": ID}`) or a paper outside the corpus
(`text(title, abstract)`, or a record with `title` and/or `abstract`, optionally `references` into
the corpus and an `id`; `graft.records`). Two retrievers answer:

- `teacher`, the graph teacher: it walks a corpus paper's stored rows (with the feedback pass when
  asked) and scores a new paper's rows at query time (`graft.external.ExternalScorer`: facets
  extracted and embedded as the build did, citation half from its references or text coupling, the
  feedback pass), never returning the references it lists;
- `graft`, the trained generative retriever: it decodes a corpus paper's stored items or a new
  paper's extracted ones, with the text channel for the new paper, and likewise never returns the
  references the new paper lists.

Which answers by default: the generative retriever when the index holds a trained model that passed
its prompt check (`graft.check`, recorded by `graft train` in the manifest's train stage); otherwise
the teacher, and `Searcher.note` says why. Every result's `info` names the retriever's model
(`info["model"]`).

    from graft import Index
    from graft.query import QueryConfig

    searcher = Index.open("demo-index").searcher(QueryConfig(k=10))
    result = searcher.text("A title", "An abstract ...")
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import asdict, dataclass, replace
from typing import TYPE_CHECKING, Any

import scipy.sparse as sp

from graft.check import PromptCheck
from graft.config import is_number, is_whole
from graft.errors import GraftError, QueryError
from graft.external import FEEDBACK, RECORD_CHUNK, TEXT_NEIGHBOURS
from graft.facets import FACETS
from graft.fusion import CITATION_DEPTH, CITATION_FIRST, CITATION_KEEP, CITATION_WEIGHT, FUSIONS, TEXT_WEIGHT
from graft.manifest import has_model
from graft.records import is_outside, record_problem
from graft.results import Hit, QueryResult
from graft.teacher import TeacherConfig

if TYPE_CHECKING:
    from graft.index import Index

#: Retrievers a query may name (`QueryConfig.retriever`, `graft query --retriever`).
RETRIEVERS = ("graft", "teacher")
#: A multi-seed query (`Searcher.seeds`) fuses each seed's first this many results (at least k): a
#: paper near several seeds but not in any one's first k can still rank high.
SEED_DEPTH = 50

@dataclass(frozen=True)
class QueryConfig:
    """Every setting of a query. Made once, checked once (`QueryError` names the setting, the
    value and what is allowed); `dataclasses.replace` makes a checked variant.

    Attributes:
        retriever: "graft", "teacher", or None: graft when the index holds a trained model that
            passed its prompt check, else the teacher (`Searcher.note` says why).
        fusion: "graph-rrf", "rrf" or "graph-walk" for graft (None = graph-rrf); the teacher
            fuses with rrf only.
        k: results per query; beams: beams per facet item (graft).
        citation_weight: W of the citation channel (0 = off; off for an index without links).
        citation_first: R, the first results of the facet fusion whose links make the channel.
        citation_depth: papers kept in the channel's run.
        citation_keep: the facet fusion's first results that the channel never pushes down
            (`graft.fusion.keep_first`; 0 = the channel may reorder everything).
        text_neighbours: M, a paper outside the corpus: its nearest papers by title + abstract (the
            teacher's text coupling, graft's text channel; 0 = off).
        text_weight: W_t of graft's text channel (0 = off).
        feedback: R of the teacher's feedback pass (None = `FEEDBACK` for a paper outside the
            corpus, 0 for a corpus paper, whose stored rows are walked).
        two_hop_weight: gamma of the teacher's walk (weight of two-hop scores); walk_depth: its
            candidates kept per facet list.
        device: where the generative retriever decodes (cpu, cuda, cuda:N, mps, auto).
        explain: name each facet credit's closest pair of items (`graft.explain`).
        since, until: keep only results published in or after / in or before this year (a paper
            without a year is left out when either is set); None = no bound.
        venues: keep only results whose venue is one of these (case and surrounding spaces ignored; a
            paper without a venue is left out); empty = any venue. Filtered papers are left out before
            fusion, so k results are still returned where the corpus has them.
    """

    retriever: str | None = None
    fusion: str | None = None
    k: int = 20
    beams: int = 20
    citation_weight: float = CITATION_WEIGHT
    citation_first: int = CITATION_FIRST
    citation_depth: int = CITATION_DEPTH
    citation_keep: int = CITATION_KEEP
    text_neighbours: int = TEXT_NEIGHBOURS
    text_weight: float = TEXT_WEIGHT
    feedback: int | None = None
    two_hop_weight: float = 0.5
    walk_depth: int = 100
    device: str = "cpu"
    explain: bool = False
    since: int | None = None
    until: int | None = None
    venues: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        problems = config_problems(self)
        if problems:
            raise QueryError("; ".join(problems))

    def teacher_config(self, index: Index | None = None) -> TeacherConfig:
        """The graph teacher's walk and citation channel under this config (the channel off for an
        index without citation links)."""
        weight = self.citation_weight if index is None else index.channel_weight(self.citation_weight)
        return TeacherConfig(two_hop_weight=self.two_hop_weight, depth=self.walk_depth, citation_weight=weight,
                             citation_first=self.citation_first, citation_depth=self.citation_depth,
                             citation_keep=self.citation_keep)

    def channel(self) -> dict[str, int]:
        """The citation channel's settings as `graft.candidates.CandidateFusion` takes them."""
        return {"citation_first": self.citation_first, "citation_depth": self.citation_depth,
                "citation_keep": self.citation_keep}

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def config_problems(config: QueryConfig) -> list[str]:
    """What is wrong with a `QueryConfig`, one phrase a setting (empty when nothing is): the one
    place query settings are checked."""
    problems = []
    if config.retriever is not None and config.retriever not in RETRIEVERS:
        problems.append(f"unknown retriever {config.retriever!r}; use one of {', '.join(RETRIEVERS)}")
    if config.fusion is not None and config.fusion not in FUSIONS:
        problems.append(f"unknown fusion {config.fusion!r}; use one of {', '.join(FUSIONS)}")
    if config.retriever == "teacher" and config.fusion not in (None, "rrf"):
        problems.append(f"the teacher fuses with plain rrf, not {config.fusion}; use fusion rrf or the graft "
                        "retriever")
    whole = {"k": 1, "beams": 1, "citation_first": 1, "citation_depth": 1, "citation_keep": 0,
             "text_neighbours": 0, "walk_depth": 1}
    for name, low in whole.items():
        value = getattr(config, name)
        if not is_whole(value) or value < low:
            problems.append(f"{name} must be a whole number >= {low}, got {value!r}")
    if config.feedback is not None and (not is_whole(config.feedback) or config.feedback < 0):
        problems.append(f"feedback must be a whole number >= 0 (or None), got {config.feedback!r}")
    for name in ("citation_weight", "text_weight", "two_hop_weight"):
        value = getattr(config, name)
        if not is_number(value) or value < 0:
            problems.append(f"{name} must be a finite number >= 0, got {value!r}")
    if not isinstance(config.device, str) or not config.device.strip():
        problems.append(f"device must be a device name (cpu, cuda, cuda:N, mps, auto), got {config.device!r}")
    if not isinstance(config.explain, bool):
        problems.append(f"explain must be True or False, got {config.explain!r}")
    for name in ("since", "until"):
        value = getattr(config, name)
        if value is not None and (not is_whole(value) or not 1 <= value <= 9999):
            problems.append(f"{name} must be a year (a whole number from 1 to 9999) or None, got {value!r}")
    if is_whole(config.since) and is_whole(config.until) and config.since > config.until:
        problems.append(f"since ({config.since}) is after until ({config.until}): no year is in between")
    if isinstance(config.venues, str):
        problems.append(f"venues takes a tuple of venue names, not one string: venues=({config.venues!r},)")
    elif not isinstance(config.venues, (tuple, list)) or not all(
            isinstance(v, str) and v.strip() for v in config.venues):
        problems.append(f"venues must be a tuple of non-empty venue names, got {config.venues!r}")
    return problems


def teacher_fusion_error(index_dir: Any, fusion: str, *, cli: bool = False) -> QueryError:
    """The error for the teacher asked to fuse with `fusion` (it fuses with plain rrf only): the way
    out it names is the graft retriever where the index has a trained one, else `graft train`."""
    use = "--fusion rrf" if cli else "fusion rrf"
    if has_model(index_dir):
        return QueryError(f"the teacher fuses with plain rrf; use {use} or "
                          f"{'--retriever graft' if cli else 'the graft retriever'}")
    return QueryError(f"the teacher fuses with plain rrf; use {use} ({fusion} is for the graft retriever, which "
                      f"this index has not trained yet: graft train {index_dir})")


@dataclass(frozen=True)
class ModelState:
    """What an index holds for the generative retriever: whether a finished model is there, its
    prompt check (None when none is recorded), and a line naming it."""

    trained: bool
    check: PromptCheck | None
    name: str

    @property
    def passed(self) -> bool:
        return self.trained and self.check is not None and self.check.learned

    @classmethod
    def of(cls, index: Index) -> ModelState:
        train = index.manifest.get("stages", {}).get("train") or {}
        if not has_model(index.path):
            return cls(False, None, "none")
        config = train.get("config") or {}
        base = (config.get("base_model") or {}).get("name") if isinstance(config.get("base_model"), dict) else None
        steps = (train.get("counts") or {}).get("steps")
        check = PromptCheck.from_dict(train.get("check"))
        verdict = "no prompt check recorded" if check is None else f"prompt check: {check.verdict()}"
        name = " · ".join(str(x) for x in (base or "trained model", f"{steps} steps" if steps else None, verdict) if x)
        return cls(True, check, name)


def choose_retriever(index: Index, asked: str | None) -> tuple[str, str | None]:
    """The retriever that answers and, when the default fell to the teacher although a model is
    there, why (a note for the user). An explicit `asked` is taken as it is."""
    if asked is not None:
        return asked, None
    state = ModelState.of(index)
    if state.passed:
        return "graft", None
    if not state.trained:
        return "teacher", None
    if state.check is None:
        why = "its training recorded no prompt check (`graft train` with --check-pairs > 0 records one)"
    else:
        why = state.check.warning() or state.check.verdict()
    return "teacher", (f"the graph teacher answers: the trained model in {index.path / 'model'} is not used by "
                       f"default because {why}; --retriever graft uses it anyway")


class Searcher:
    """Related papers over one index under one `QueryConfig`, with the retriever, extractor,
    encoder and scorers loaded once for all queries.

    Args:
        index: the opened index.
        config: the query settings (default `QueryConfig()`).
        on_note: called once with each note worth showing a user (which retriever answers and why,
            no text coupling or text channel for this index and why).
        encoder: a sentence encoder to use for papers outside the corpus (default: the index's,
            loaded on first use).
    Raises:
        QueryError: the teacher asked to fuse otherwise than with rrf.
        GraftError: a device this machine lacks.
    """

    def __init__(self, index: Index, config: QueryConfig | None = None, *,
                 on_note: Callable[[str], None] | None = None, encoder: Any = None) -> None:
        self.index = index
        self.config = config = config or QueryConfig()
        self.retriever, why = choose_retriever(index, config.retriever)
        if self.retriever == "teacher" and config.fusion not in (None, "rrf"):
            raise teacher_fusion_error(index.path, config.fusion)
        self.fusion = config.fusion or ("graph-rrf" if self.retriever == "graft" else "rrf")
        from graft.devices import resolve_device

        # checked whatever the retriever: the teacher would ignore a bad name
        self.device = resolve_device(config.device)
        self.model = ModelState.of(index).name if self.retriever == "graft" else "none (graph walk)"
        self.on_note = on_note
        self.notes: list[str] = []
        self._noted: set[str] = set()
        self._encoder = encoder
        self._made: dict[str, Any] = {}
        if why:
            self._note("retriever", why)

    @property
    def filtered_out(self) -> frozenset[str]:
        """The corpus papers the config's year and venue filters leave out (empty without filters)."""
        if "filtered" not in self._made:
            cfg = self.config
            out: set[str] = set()
            if cfg.since is not None or cfg.until is not None or cfg.venues:
                papers = self.index.papers
                wanted = {v.strip().casefold() for v in cfg.venues}
                venues = papers["venue"].to_list() if "venue" in papers.columns else [None] * self.index.n
                for pid, year, venue in zip(papers["paper_id"].to_list(), papers["year"].to_list(), venues):
                    if ((cfg.since is not None and (year is None or year < cfg.since))
                            or (cfg.until is not None and (year is None or year > cfg.until))
                            or (wanted and (venue or "").strip().casefold() not in wanted)):
                        out.add(pid)
            self._made["filtered"] = frozenset(out)
        return self._made["filtered"]

    @property
    def note(self) -> str | None:
        """Why the default retriever is not the trained model, or None."""
        return next((n for n in self.notes if n.startswith("the graph teacher answers")), None)

    def with_config(self, **changes: Any) -> Searcher:
        """A searcher of the same index under this config with `changes` (checked as any config),
        sharing this one's encoder."""
        return Searcher(self.index, replace(self.config, **changes), on_note=self.on_note,
                        encoder=self._made.get("encoder", self._encoder))

    def _note(self, key: str, message: str) -> None:
        if key not in self._noted:
            self._noted.add(key)
            self.notes.append(message)
            if self.on_note is not None:
                self.on_note(message)

    # ---- what queries outside the corpus need, each made on first use --------------------------
    @property
    def encoder(self) -> Any:
        """The sentence encoder of papers outside the corpus (the index's build encoder)."""
        if "encoder" not in self._made:
            if self._encoder is None:
                from graft.encoder import index_encoder

                self._encoder = index_encoder(self.index)
            self._made["encoder"] = self._encoder
        return self._made["encoder"]

    @property
    def scorer(self) -> Any:
        """The teacher's scorer of papers outside the corpus (`graft.external.ExternalScorer`)."""
        if "scorer" not in self._made:
            from graft.external import ExternalScorer

            cfg = self.config
            self._made["scorer"] = scorer = ExternalScorer(
                self.index, encoder=self.encoder, text_neighbours=cfg.text_neighbours,
                feedback=FEEDBACK if cfg.feedback is None else cfg.feedback, teacher=cfg.teacher_config())
            if scorer.text_coupling_off and cfg.text_neighbours:
                self._note("coupling", f"no text coupling: {scorer.text_coupling_off}")
        return self._made["scorer"]

    @property
    def corpus_scorer(self) -> Any:
        """The teacher's walks of corpus papers (`graft.external.CorpusScorer`)."""
        if "corpus" not in self._made:
            from graft.external import CorpusScorer

            self._made["corpus"] = CorpusScorer(self.index, feedback=self.config.feedback or 0,
                                                teacher=self.config.teacher_config())
        return self._made["corpus"]

    @property
    def record_facets(self) -> Any:
        """The generative retriever's facet items of papers outside the corpus (`RecordFacets`)."""
        if "facets" not in self._made:
            from graft.external import RecordFacets

            self._made["facets"] = RecordFacets(self.index, encoder=self.encoder)
        return self._made["facets"]

    @property
    def generative(self) -> Any:
        """The index's generative retriever on this searcher's device."""
        return self.index.generative(device=self.device)

    def _text_channel(self) -> bool:
        cfg = self.config
        if not (cfg.text_neighbours and cfg.text_weight):
            return False
        if self.index.paper_embeddings is None:
            self._note("channel", f"no text channel: index '{self.index.path}' has no embeddings/papers.npy "
                                  "(rebuild it with `graft build` to add them)")
            return False
        return True

    # ---- queries -------------------------------------------------------------------------------
    def paper(self, paper_id: str) -> QueryResult:
        """Related papers of a corpus paper.

        Raises:
            GraftError: the id is not in the index.
        """
        if isinstance(paper_id, int) and not isinstance(paper_id, bool):
            paper_id = str(paper_id)  # as a corpus's integer ids are read
        if not isinstance(paper_id, str):
            raise QueryError(f"a paper id is a string, got {type(paper_id).__name__} {paper_id!r:.40}")
        return self.record({"id": paper_id})

    def text(self, title: str, abstract: str = "", *, references: Iterable[str] = (),
             query_id: str | None = None) -> QueryResult:
        """Related papers of a paper outside the corpus, given its title and abstract (and the ids
        of corpus papers it cites, which are never returned)."""
        record: dict[str, Any] = {"title": title, "abstract": abstract}
        if query_id is not None:
            record["id"] = query_id
        if references:
            record["references"] = [str(r) for r in references]
        return self.record(record)

    def record(self, record: dict[str, Any], *, exclude: Iterable[str] = ()) -> QueryResult:
        """Related papers of one query record (`graft.records`); `exclude`: corpus paper ids never
        returned (left out before fusion).

        Raises:
            GraftError: as `check`.
        """
        self.check([record])
        return self._explained(record, self._query(record, None, set(exclude)))

    def batch(self, records: list[dict[str, Any]], progress: Callable[[int], None] | None = None,
              ) -> list[QueryResult]:
        """Related papers of each query record, in order; the papers outside the corpus are taken
        apart together first (shared encoder batches; `progress` is called with the number of them
        done). A record without an id is named `query-N` after its position (from 1), so that each
        result has its own qid in a TREC run file.

        Raises:
            GraftError: as `check`, or two queries with one id.
        """
        self.check(records)
        records = [{**rec, "id": f"query-{i}"} if rec.get("id") is None else rec
                   for i, rec in enumerate(records, start=1)]
        first: dict[str, int] = {}
        for i, rec in enumerate(records, start=1):
            qid = str(rec["id"])
            if qid in first:
                raise QueryError(f"query {i}: id {qid!r} is also query {first[qid]}'s; each query needs its own id "
                                 "(its qid in a TREC run file)")
            first[qid] = i
        ready = self.prepared(records, progress)
        return [self._explained(rec, self._query(rec, ready.get(i), set())) for i, rec in enumerate(records)]

    def seeds(self, paper_ids: Iterable[str], *, query_id: str = "seeds") -> QueryResult:
        """Related papers of a set of corpus papers (a library, a saved collection): each seed's
        results under this config (its first max(k, `SEED_DEPTH`), the other seeds left out), fused
        by reciprocal rank fusion (`graft.fusion.rrf`, k = 60), so a paper close to several seeds
        ranks above one close to a single seed. The seeds are never returned.

        Each hit keeps the facets and evidence of the seed it ranks best for;
        `info["surfaced_by"][paper_id]` maps every seed that returned it to its rank there, and
        `info["seeds"]` lists the seeds.

        Raises:
            QueryError: no seeds, or a seed the index lacks (`check`).
        """
        from graft.fusion import RRF_K, rrf

        if isinstance(paper_ids, str):
            raise QueryError(f"seeds take a list of paper ids, not one string: [{paper_ids!r}]")
        seeds = list(dict.fromkeys(str(p) for p in paper_ids))
        if not seeds:
            raise QueryError("a multi-seed query needs at least one corpus paper id")
        self.check([{"id": s} for s in seeds])
        deep = self if self.config.k >= SEED_DEPTH else self.with_config(k=SEED_DEPTH)
        runs: dict[str, list[str]] = {}
        best: dict[str, tuple[int, int, Hit]] = {}  # paper -> (rank, seed position, hit)
        surfaced: dict[str, dict[str, int]] = {}
        inner = None
        for pos, seed in enumerate(seeds):
            result = deep._explained({"id": seed}, deep._query({"id": seed}, None, set(seeds) - {seed}))
            inner = inner or result
            runs[seed] = [h.paper_id for h in result.hits]
            for h in result.hits:
                surfaced.setdefault(h.paper_id, {})[seed] = h.rank
                if h.paper_id not in best or (h.rank, pos) < best[h.paper_id][:2]:
                    best[h.paper_id] = (h.rank, pos, h)
        fused = rrf(runs, k=RRF_K)[: self.config.k]
        hits = [replace(best[f.doc][2], rank=i, score=f.score) for i, f in enumerate(fused, start=1)]
        info = {"seeds": seeds, "seed_depth": deep.config.k,
                "surfaced_by": {h.paper_id: surfaced[h.paper_id] for h in hits}}
        fusion = f"{inner.fusion if inner else self.fusion} per seed, rrf over seeds"
        result = QueryResult(query_id=query_id, retriever=self.retriever, fusion=fusion, hits=hits, info=info)
        return self._named(result)

    def items(self, facets: dict[str, list[str]], *, query_id: str = "query",
              neighbours: dict[str, float] | None = None, exclude: Iterable[str] = ()) -> QueryResult:
        """The generative retriever's related papers of a paper outside the corpus given by its facet
        items (`neighbours`: its nearest corpus papers by title + abstract for the text channel,
        paper id -> cosine; `exclude`: paper ids never returned).

        Raises:
            QueryError: the teacher answers this searcher (it needs the paper's text: `text`).
        """
        check_items(facets)
        if self.retriever != "graft":
            raise QueryError("the teacher scores a paper outside the corpus from its text (its rows are made at "
                             "query time): use Searcher.text(title, abstract) or Searcher.record(record)")
        exclude = set(exclude)
        result = self.generative.query_items(facets, k=self.config.k, beams=self.config.beams, fusion=self.fusion,
                                             query_id=query_id, citation_weight=self.config.citation_weight,
                                             neighbours=neighbours if self.config.text_weight else None,
                                             text_weight=self.config.text_weight, exclude=exclude or None,
                                             **self.config.channel())
        return self._named(result)

    def rows(self, rows: dict[str, sp.csr_matrix], *, query_id: str = "query",
             exclude: set[int] | None = None) -> QueryResult:
        """The graph teacher's walk from given facet edge rows (1 x n each, as
        `graft.external.ExternalScorer.rows` makes them); `exclude`: corpus rows never returned."""
        result = self.index.query_rows(rows, query_id=query_id, k=self.config.k, exclude=exclude,
                                       config=self.config.teacher_config(self.index))
        result.info["citation_weight"] = self.index.channel_weight(self.config.citation_weight)
        return self._named(result)

    def fuse(self, query: str | dict[str, Any], lists: dict[str, dict[str, float]], *,
             neighbours: dict[str, float] | None = None) -> QueryResult:
        """The generative retriever's fusion of facet lists already decoded (paper id -> decoder
        score per facet, `GenerativeRetriever.facet_lists`) under this config: `query` is a corpus
        paper's id, or the record of a paper outside the corpus (its `id` names the result;
        `neighbours` feed the text channel)."""
        gen, cfg = self.generative, self.config
        if isinstance(query, str):
            result = gen.fuse_paper(query, lists, k=cfg.k, fusion=self.fusion, citation_weight=cfg.citation_weight,
                                    **cfg.channel())
        else:
            result = gen.fuse_items(str(query.get("id") or "query"), lists, k=cfg.k, fusion=self.fusion,
                                    citation_weight=cfg.citation_weight,
                                    neighbours=neighbours if cfg.text_weight else None, text_weight=cfg.text_weight,
                                    **cfg.channel())
        return self._named(result)

    def check(self, records: list[dict[str, Any]]) -> None:
        """Refuse what cannot be answered before any work: a record that is neither a corpus id nor a
        paper with text, or a corpus id the index lacks.

        Raises:
            QueryError: the first such query.
        """
        for i, rec in enumerate(records, start=1):
            problem = record_problem(rec)
            if problem is not None:
                raise QueryError(f"query {i}: {problem} (got {str(rec)[:80]})")
        for i, rec in enumerate(records, start=1):
            if not is_outside(rec) and str(rec["id"]) not in self.index.row_of:
                try:
                    self.index.row(str(rec["id"]))
                except GraftError as exc:
                    where = f"query {i}: " if len(records) > 1 else ""
                    raise QueryError(f"{where}{exc}; a paper outside the corpus is given by its title and "
                                     "abstract (graft query --text or --record)") from None

    def prepared(self, records: list[dict[str, Any]], progress: Callable[[int], None] | None = None,
                 ) -> dict[int, tuple]:
        """The papers outside the corpus among `records`, taken apart together (facets extracted and
        embedded in shared encoder batches, `RECORD_CHUNK` papers a pass): position -> what a query
        needs of it. Fewer than two such papers: nothing to share, an empty dict."""
        todo = [i for i, rec in enumerate(records) if is_outside(rec)]
        if len(todo) < 2:
            return {}
        batch = [records[i] for i in todo]
        if self.retriever == "teacher":
            made = self.scorer.rows_many(batch, chunk=RECORD_CHUNK, progress=progress)
        else:
            made = []
            for start in range(0, len(batch), RECORD_CHUNK):  # passes as the teacher's rows_many
                part = batch[start : start + RECORD_CHUNK]
                near = (self.record_facets.neighbours(part, self.config.text_neighbours) if self._text_channel()
                        else [None] * len(part))
                made += zip(self.record_facets.many(part), near)
                if progress is not None:
                    progress(len(part))
        return dict(zip(todo, made))

    # ---- internals -----------------------------------------------------------------------------
    def _named(self, result: QueryResult) -> QueryResult:
        """The result with its retriever's model and the query settings in `info`; a hit the year and
        venue filters leave out (one a channel added after the facet lists were cut) removed."""
        gone = self.filtered_out
        if gone:
            kept = [h for h in result.hits if h.paper_id not in gone]
            if len(kept) < len(result.hits):
                result.hits = [replace(h, rank=i) for i, h in enumerate(kept, start=1)]
            cfg = self.config
            result.info["filters"] = {"since": cfg.since, "until": cfg.until, "venues": list(cfg.venues),
                                      "papers_left_out": len(gone)}
        result.info["model"] = self.model
        if self.note:
            result.info["note"] = self.note
        return result

    def _explained(self, record: dict[str, Any], result: QueryResult) -> QueryResult:
        if not self.config.explain:
            return result
        from graft.explain import attach_matches, corpus_items

        if is_outside(record):
            items = result.info["query_facets"]
            # embedded as its facet rows were: in its own text, with its title, at the build's settings
            read = {f: list(items.get(f) or []) for f in FACETS}
            vectors = {f: v for f, v in self.scorer.embed_items([record], [read])[0].items() if len(v)}
            lexical = self.scorer.lexical_rows([record], [read])[0]
        else:
            items, vectors = corpus_items(self.index, str(record["id"]))
            lexical = self.corpus_scorer.own_lexical(self.index.row(str(record["id"])))
        attach_matches(self.index, result, items, vectors, lexical)
        return result

    def _query(self, record: dict[str, Any], ready: tuple | None, exclude: set[str]) -> QueryResult:
        cfg = self.config
        row_of = self.index.row_of
        exclude = exclude | self.filtered_out
        if not is_outside(record):
            pid = str(record["id"])
            if self.retriever == "teacher":
                node = self.index.row(pid)
                rows = self.corpus_scorer.walk_rows(node)
                skip = {node} | {row_of[p] for p in exclude if p in row_of}
                result = self.corpus_scorer.query_rows(rows, query_id=pid, k=cfg.k, exclude=skip)
                result.info["feedback"] = self.corpus_scorer.feedback if self.corpus_scorer.passes else 0
                return self._named(result)
            lists = self.generative.facet_lists([(self.index.paper_facets(pid), {pid} | exclude)], cfg.beams)[0]
            return self.fuse(pid, lists)
        qid = str(record.get("id") or "query")
        # a corpus paper posed as a record (its id with a text) is not related to itself
        own = qid if record.get("id") is not None and qid in row_of else None
        # the papers it already cites are not news to it: left out
        known = {str(r) for r in record.get("references") or [] if str(r) in row_of} | exclude
        known |= {own} if own else set()
        if self.retriever == "teacher":
            teacher = self.scorer
            rows, items = ready if ready is not None else teacher.rows(record)
            skip = {row_of[p] for p in known if p in row_of}
            result = teacher.query_rows(rows, query_id=qid, k=cfg.k, exclude=skip)
            result.info["feedback"] = teacher.feedback if teacher.passes else 0
        else:
            if ready is not None:
                items, near = ready
            else:
                items = self.record_facets(record)
                near = (self.record_facets.neighbours([record], cfg.text_neighbours)[0] if self._text_channel()
                        else None)
            result = self.items(items, query_id=qid, neighbours=near, exclude=known)
        # the paper's facets as they were read from its text: what its facet credits refer to
        result.info["query_facets"] = {f: list(v) for f, v in items.items()}
        return self._named(result)


def check_items(facets: Any) -> None:
    """Refuse facet items that are not {facet name: list of item strings} (a string would be read
    one character at a time).

    Raises:
        QueryError: naming the facet and what it holds.
    """
    if not isinstance(facets, dict):
        raise QueryError(f"facets must map facet names to lists of item strings, got {type(facets).__name__}")
    unknown = sorted(set(facets) - set(FACETS))
    if unknown:
        raise QueryError(f"facets: unknown facet(s) {unknown}; use {', '.join(FACETS)}")
    for facet, items in facets.items():
        if isinstance(items, str) or not isinstance(items, (list, tuple)) or not all(
                isinstance(t, str) for t in items):
            raise QueryError(f"facets[{facet!r}] must be a list of item strings, got {items!r:.80}"
                             + (f" (write [{items!r:.60}])" if isinstance(items, str) else ""))

