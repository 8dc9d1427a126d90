"""`graft build`: corpus -> facets -> embeddings -> citation signals -> typed top-K graph -> index."""

from __future__ import annotations

import json
import os
import shutil
import uuid
import warnings
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import numpy as np
import polars as pl
import scipy.sparse as sp

from graft.ann import IVFCandidates, graph_searcher
from graft.build_config import BuildConfig
from graft.citations import (
    CitationSignals,
    citation_links,
    citation_matrix,
    citation_signals,
    linkless_rows,
    text_coupling,
)
from graft.config import config_to_dict
from graft.devices import resolve_device
from graft.edges import GraphParams, facet_graph
from graft.encoder import DEFAULT_MODEL, ContextReader, context_keys, read_or_alone, title_vectors, with_title
from graft.encoder_store import fingerprint
from graft.errors import GraftError
from graft.extract import FacetExtractor
from graft.facets import FACETS, FacetItems
from graft.jsonio import loads
from graft.lexical import LEXICAL_SETS, LEXICON_FILE, Lexicon, facet_texts, lexical_file
from graft.manifest import FORMAT_NAME, manifest_path, new_manifest, read_manifest, record_stage
from graft.progress import Reporter
from graft.similarity import group_items
from graft.store import (
    LOCK_NAME,
    folder_problem,
    index_lock,
    read_json,
    write_json,
    write_npy,
    write_npz,
    write_parquet,
)
from graft.text import normalize_text, paper_texts
from graphbuild.checkpoints import RowStore, StoredEncoder, StoredRows, make_key, paper_digests, source_digest
from graphbuild.corpus import LINK_COLUMNS, Corpus, load_corpus

#: Papers per stored shard of the facets stage: a build killed there loses at most this many papers' work.
CHECKPOINT_PAPERS = 1024

#: Texts per stored shard of the other encoder passes (titles; title + abstract of each paper).
CHECKPOINT_TEXTS = 4096

#: The source files whose code decides each extractor's items: stored facets are kept per digest of
#: the chosen extractor's files, so editing one extractor does not throw away the other's work.
EXTRACTOR_SOURCES = {
    "heuristic": ("graft/extract.py", "graft/facets.py", "graft/text.py", "graft/facet_classifier.py",
                  "graft/facet_classifier.json"),
    "llm": ("graphbuild/facets_llm.py", "graft/extract.py", "graft/facets.py", "graft/text.py",
            "graft/facet_classifier.py", "graft/facet_classifier.json"),
}


@dataclass
class BuildSummary:
    index_dir: Path
    counts: dict[str, Any]
    timings: dict[str, float]
    peaks: dict[str, int]
    report: dict[str, Any]
    #: stages served from INDEX/cache/build: "facets" (all of it) or "facets (6,445 of 6,545 papers)"
    reused: list[str] = field(default_factory=list)
    #: the encoder's ONNX export this build stored for queries (`graft.encoder_store`), or None
    encoder_export: Path | None = None
    #: what of the index this build replaced it removed: DocIDs and pairs without a model ("docids",
    #: "train") and `graft export`'s files at their default paths ("graph.graphml")
    removed: list[str] = field(default_factory=list)
    #: where the trained model of the graph this build replaced went, with its DocIDs and pairs
    #: (`INDEX/model.previous-<build id>`), or None when the index held none
    kept: Path | None = None
    #: `cache_from`: the other index, and per stage how many papers / texts were copied from its stores
    seeded_from: Path | None = None
    seeded: dict[str, int] = field(default_factory=dict)


def make_extractor(config: BuildConfig, encoder: Any, index_dir: Path) -> FacetExtractor:
    """The facet extractor named by the config (the LLM one falls back to the heuristic one)."""
    from graft.extract import HeuristicFacetExtractor

    heuristic = HeuristicFacetExtractor(encoder, config.heuristic_config())
    if config.extractor == "heuristic":
        return heuristic
    from graft.llm import ChatClient, LLMCache, LLMConfig
    from graphbuild.facets_llm import LLMFacetExtractor

    client = ChatClient(LLMConfig.from_dict(dict(config.llm)), cache=LLMCache(index_dir / "cache" / "llm.sqlite"))
    return LLMFacetExtractor(client, fallback=heuristic)


def facets_table(paper_ids: list[str], facets: list[FacetItems]) -> pl.DataFrame:
    """One row per facet item: paper_id, facet, item_idx, text, docid (normalised item text)."""
    rows: dict[str, list[Any]] = {"paper_id": [], "facet": [], "item_idx": [], "text": [], "docid": []}
    for pid, items in zip(paper_ids, facets):
        for facet in FACETS:
            for k, text in enumerate(items[facet]):
                rows["paper_id"].append(pid)
                rows["facet"].append(facet)
                rows["item_idx"].append(k)
                rows["text"].append(text)
                rows["docid"].append(normalize_text(text))
    return pl.DataFrame(rows, schema={"paper_id": pl.Utf8, "facet": pl.Utf8, "item_idx": pl.Int32,
                                      "text": pl.Utf8, "docid": pl.Utf8})


def papers_table(corpus: Corpus, a: sp.csr_matrix) -> pl.DataFrame:
    """papers.parquet: metadata in node order, with in-corpus citation counts, and the papers'
    identifiers (doi, url, arxiv) where the corpus gives any."""
    n_cit = np.asarray(a.sum(axis=0)).ravel().astype(np.int32)
    papers = corpus.papers
    links = [c for c in LINK_COLUMNS if c in papers.columns and papers[c].null_count() < papers.height]
    return papers.select(["paper_id", "title", "abstract", "year", "venue", "authors", *links]).with_columns(
        pl.Series("n_citations", n_cit, dtype=pl.Int32)
    )


def facet_graphs(
    owner: np.ndarray,
    facet_of_item: np.ndarray,
    vectors: np.ndarray,
    a: sp.csr_matrix,
    signals: CitationSignals,
    params: GraphParams,
    *,
    progress: Any = None,
    text: sp.csr_matrix | None = None,
    ann_dir: Path | None = None,
    one_graph: Callable[..., sp.csr_matrix] | None = None,
    lexical: dict[str, sp.csr_matrix] | None = None,
) -> dict[str, sp.csr_matrix]:
    """The four typed top-K graphs from item embeddings and citation signals.

    Args:
        owner: paper row of each facet item; facet_of_item: its facet name; vectors: its embedding.
        a: the citation matrix; signals: its coupling / co-citation score.
        text: text coupling of the papers without citation links (`text_coupling`), which stands in
            for their (empty) citation score rows and adds their text neighbours as candidates.
        ann_dir: where an IVF index of each facet is written as `{facet}.faiss` when the candidates
            are approximate (`graft.ann`: the graph's own with "faiss", one made for the purpose with
            "hnsw"), for queries outside the corpus to search.
        one_graph: what makes one facet's graph, called as `one_graph(facet, items, score, links,
            params, progress=, searcher=)`: `local_facet_graph` (this process) by default, or a
            distributed engine's (`graphbuild.ray_engine`).
        lexical: per facet, the papers' lexical rows (`graft.lexical`), blended into facet similarity
            at `params.lexical_weight`; None = the items' embeddings alone.
    """
    n = a.shape[0]
    links = citation_links(a, signals.score, direct=params.direct_links,  # candidates beyond the facet prefilter
                           per_row=params.linked_candidates)
    score = signals.score
    if text is not None and text.nnz:  # link-less papers' rows: their score row is empty, text fills it
        score = (sp.csr_matrix(score, dtype=np.float32) + text).tocsr()
        links = ((links + text) > 0).astype(np.float32).tocsr()
    graphs = {}
    for facet in FACETS:
        sel = facet_of_item == facet
        items = group_items(owner[sel], np.asarray(vectors[sel], dtype=np.float32), n)
        if lexical is not None and params.lexical_weight > 0:
            items.lexical = lexical[facet]
        searcher = graph_searcher(items.pooled, params.candidates)
        if ann_dir is not None:  # an earlier, stopped build's index of this facet is not this one's
            (ann_dir / f"{facet}.faiss").unlink(missing_ok=True)
        graphs[facet] = (one_graph or local_facet_graph)(facet, items, score, links, params, progress=progress,
                                                        searcher=searcher)
        if searcher is not None and ann_dir is not None:  # queries from outside search an IVF index
            ivf = searcher if isinstance(searcher, IVFCandidates) else IVFCandidates(items.pooled, params.candidates)
            ivf.write(ann_dir / f"{facet}.faiss")
    return graphs


def lexical_rows(papers: pl.DataFrame, table: pl.DataFrame, owner: np.ndarray, config: BuildConfig,
                 ) -> tuple[Lexicon, dict[str, sp.csr_matrix]]:
    """The corpus's lexicon (fitted on its papers' title + abstract) and the lexical rows the build's
    settings use (`graft.lexical`): per facet (title and the facet's items) where
    `config.lexical_weight` > 0, and "papers" (title + abstract) where text coupling blends them in."""
    texts = paper_texts(papers)
    lexicon = Lexicon.fit(texts)
    out: dict[str, sp.csr_matrix] = {}
    if config.lexical_weight > 0:
        per_facet = facet_texts(papers["title"].to_list(), owner, table["facet"].to_numpy(), table["text"].to_list(),
                                papers.height)
        out.update({f: lexicon.vectors(per_facet[f]) for f in FACETS})
    if config.text_lexical_weight > 0 and config.text_coupling > 0:
        out["papers"] = lexicon.vectors(texts)
    return lexicon, out


def local_facet_graph(facet: str, items: Any, score: sp.csr_matrix, links: sp.csr_matrix, params: GraphParams, *,
                      progress: Any = None, searcher: IVFCandidates | None = None) -> sp.csr_matrix:
    """One facet's graph made in this process (`graft.edges.facet_graph`)."""
    return facet_graph(items, score, links, params, progress=progress, searcher=searcher)


def check_out(out: Path) -> None:
    """Refuse, before any work, an `out` the build must not write into: a file, or a folder with
    other content and no GRAFT index in it (the build would put its files among them and remove
    folders named like its later stages). An index whose manifest is damaged, or a build stopped
    before it wrote the index (its stores under cache/build, or the Ray engine's under cache/ray), is
    rebuilt in place.

    Raises:
        GraftError: naming the folder and what to do.
    """
    problem = folder_problem(out)
    if problem:
        raise GraftError(f"--out {out} {problem}; give a folder for the index (new, empty, or an index to rebuild)")
    if not out.is_dir() or not any(p.name != LOCK_NAME for p in out.iterdir()):
        return
    _check_no_links(out)
    path = manifest_path(out)
    ours = (out / "papers.parquet").is_file() or (out / "cache" / "build").is_dir() or (out / "cache" / "ray").is_dir()
    if path.is_file():
        try:
            manifest = read_json(path)
        except ValueError:
            manifest = None
        if isinstance(manifest, dict) and manifest.get("format") == FORMAT_NAME:
            return
        if ours and not (isinstance(manifest, dict) and "format" in manifest):
            return  # a GRAFT index whose manifest is damaged: rebuilt, the manifest replaced
        raise GraftError(f"--out {out}: its manifest.json is not a GRAFT index's; build into a new or empty "
                         "folder (or move that file)")
    if not ours:
        raise GraftError(f"--out {out} holds files but no GRAFT index; build into a new or empty folder")


def _check_no_links(out: Path) -> None:
    """Refuse to rebuild an index that holds symbolic links (`INDEX/model` linked to a model kept
    elsewhere, say): a rebuild replaces and removes what is in the folder and would delete or write
    through the link, outside the index. Checked before any work and again before the index is marked
    as being rebuilt, so a refused build leaves the old index whole.

    Raises:
        GraftError: naming the links and what to do.
    """
    if not out.is_dir():
        return
    links = []
    for root, dirs, files in os.walk(out):  # links to folders are listed, never entered
        links += [Path(root) / name for name in (*dirs, *files) if (Path(root) / name).is_symlink()]
    if links:
        shown = ", ".join(f"{p.relative_to(out)} -> {os.readlink(p)}" for p in links[:5])
        more = f" and {len(links) - 5} more" if len(links) > 5 else ""
        raise GraftError(f"--out {out} holds symbolic links ({shown}{more}); a rebuild would delete or write "
                         "through them, outside the index. Move what they point to into the index, or remove "
                         "the links, and build again (the index was not touched)")


#: What `graft train` adds to an index, made for the graph it was trained on
TRAINED = ("docids", "train", "model")


@dataclass
class RebuildPlan:
    """What a rebuild does with the later stages of the index it replaces, decided (and said)
    before any work: a trained model is never deleted; it moves aside with its DocIDs and pairs."""

    #: the later stages' folders found in the index ("docids", "train", "model")
    trained: list[str]
    #: where they move when the model is among them (`INDEX/model.previous-<old build id>`), else None:
    #: DocIDs and pairs alone are removed (`graft train` makes them again in seconds)
    aside: Path | None
    #: `graft export`'s files at their default paths, removed with the graph they show
    exports: list[str]

    def message(self, out: Path) -> str | None:
        """What the rebuild will do with them, in one sentence for the user, or None for nothing."""
        parts = []
        if self.aside is not None:
            with_it = [name for name in self.trained if name != "model"]
            parts.append(f"{out / 'model'} holds a generative retriever trained on the graph this build replaces; "
                         f"when the new index is written it moves{' with its ' + ' and '.join(with_it) if with_it else ''}"
                         f" to {self.aside} (nothing is deleted; remove that folder when it is no longer wanted). "
                         f"Until `graft train {out}` trains one on the new graph, queries use the graph teacher")
        elif self.trained:
            parts.append(f"{', '.join(self.trained)} of the graph this build replaces will be removed when the new "
                         f"index is written (`graft train {out}` makes them again)")
        if self.exports:
            parts.append(f"{', '.join(self.exports)} (`graft export`'s, of the old graph) will be removed")
        return "; ".join(parts) or None


def plan_rebuild(out: Path) -> RebuildPlan:
    """What a build into `out` will do with the later stages of the index already there."""
    from graft.export import EXPORT_FORMATS

    trained = [name for name in TRAINED if (out / name).exists()]
    exports = [f"graph.{fmt}" for fmt in EXPORT_FORMATS if (out / f"graph.{fmt}").is_file()]
    aside = None
    if "model" in trained:
        try:
            old = read_json(manifest_path(out))
        except (OSError, ValueError):
            old = None
        build_id = old.get("build_id") if isinstance(old, dict) else None
        label = str(build_id)[:12] if isinstance(build_id, str) and build_id.isalnum() else \
            f"{int((out / 'model').stat().st_mtime)}"
        aside = out / f"model.previous-{label}"
        n = 2
        while aside.exists():
            aside = out / f"model.previous-{label}-{n}"
            n += 1
    return RebuildPlan(trained, aside, exports)


def _invalidate(out: Path, source: str, plan: RebuildPlan) -> list[str]:
    """Mark an existing index as being rebuilt, so that a build killed while it writes is never
    mistaken for a finished one (a damaged manifest is replaced), and carry out `plan` for what
    belongs to the graph being replaced: a trained model moves aside with its DocIDs and pairs (and
    the old manifest, which records how it was trained); DocIDs and pairs without a model, and
    `graft export`'s files at their default paths (INDEX/graph.FORMAT), are removed. Returns the
    names of those removed."""
    path = manifest_path(out)
    if plan.aside is not None:
        plan.aside.mkdir()
        if path.is_file():
            shutil.copy2(path, plan.aside / "manifest.json")
    if path.is_file():
        try:
            old = read_json(path)
        except ValueError:
            old = None
        old = old if isinstance(old, dict) else new_manifest("")
        old["stages"] = {}
        old["in_progress"] = "build"
        old["corpus"] = {"source": source}  # the corpus being built, for the command that resumes it
        write_json(path, old)
    removed = []
    for stale in plan.trained:
        if not (out / stale).exists():
            continue
        if plan.aside is not None:
            os.replace(out / stale, plan.aside / stale)
        else:
            shutil.rmtree(out / stale)
            removed.append(stale)
    from graft.export import EXPORT_FORMATS

    for fmt in EXPORT_FORMATS:  # `graft export`'s default files: the old graph's
        if (out / f"graph.{fmt}").is_file():
            (out / f"graph.{fmt}").unlink()
            removed.append(f"graph.{fmt}")
    return removed


def build_index(
    corpus_path: str | Path | None,
    out: str | Path,
    config: BuildConfig | None = None,
    *,
    reporter: Reporter | None = None,
    encoder: Any = None,
    fresh: bool = False,
    cache_from: str | Path | None = None,
    allow_degraded: bool = False,
    on_note: Callable[[str], None] | None = None,
) -> BuildSummary:
    """Build a GRAFT index directory from a corpus.

    Args:
        corpus_path: JSONL / JSONL.gz / Parquet file, JSON file or folder (`graphbuild.corpus.load_corpus`), or None / "aclsum"
            for the ACLSum demo corpus.
        out: index directory (created; artefacts of an earlier build are replaced).
        config: build settings; defaults as in DESIGN.md.
        reporter: progress and timing; a quiet one by default.
        encoder: an already loaded `Encoder` to reuse (tests); built from the config otherwise.
        fresh: recompute every paper's facets and vectors instead of looking them up in
            INDEX/cache/build (`graphbuild.checkpoints`), which is emptied and filled anew.
        cache_from: another index directory whose stores (its cache/build) were made with this
            build's model and extractor: the facets and vectors of this corpus's papers that it
            holds are copied into this index's stores first, so a slice or a variant of a corpus
            already built costs only its papers the other index lacks, plus the graph. Only read.
        allow_degraded: with the LLM extractor, write the index even when most papers' facets are the
            heuristic fallback's (failed requests or discarded answers); otherwise that stops the build.
        on_note: called, before any work, with what the rebuild will do with the later stages of the
            index in `out` (`RebuildPlan.message`): a trained model moves aside, never deleted.
    Returns:
        counts, per-stage timings and peak memory, the corpus load report and the stages reused.
    Raises:
        InputValidationError: bad corpus records (unless `skip_bad`).
        GraftError: `out` is a file or a folder with other content and no index (`check_out`);
            `cache_from` is no index with stores, is `out` itself, or comes with `fresh`; with the
            LLM extractor, most papers got no usable answer and `allow_degraded` is off (the old
            index, if any, is left as it was).
    """
    config = config or BuildConfig()
    reporter = reporter or Reporter(quiet=True)
    out = Path(out)
    check_out(out)
    if encoder is None:  # the build makes its encoder: an unknown device or an absent GPU before any work
        resolve_device(config.embedding_device)
    seed_root = _seed_root(cache_from, out, fresh)
    plan = plan_rebuild(out)
    message = plan.message(out)
    if message and on_note is not None:
        on_note(message)
    # The old index stays whole (graph, trained model) until the write stage: a bad corpus, a bad
    # setting or a build stopped before then leaves it as it was (the stores under cache/build keep
    # what the stopped build computed).

    with reporter.stage("load", unit="papers") as adv:
        corpus = load_corpus(corpus_path, skip_bad=config.skip_bad, limit=config.limit)
        adv(corpus.papers.height)
    out.mkdir(parents=True, exist_ok=True)  # after the corpus loads: a bad one leaves no empty folder
    # one writer per index: a build into an index that `graft train` (or another build) is writing is refused
    with index_lock(out, "graft build"):
        if plan_rebuild(out).trained != plan.trained:  # `graft train` wrote into it meanwhile: said again
            plan = plan_rebuild(out)
            message = plan.message(out)
            if message and on_note is not None:
                on_note(message)
        return _build_into(out, corpus, corpus_path, config, reporter, encoder, fresh, cache_from, seed_root,
                           plan, allow_degraded)


def _build_into(out: Path, corpus: Corpus, corpus_path: str | Path | None, config: BuildConfig,
                reporter: Reporter, encoder: Any, fresh: bool, cache_from: str | Path | None,
                seed_root: Path | None, plan: RebuildPlan, allow_degraded: bool = False) -> BuildSummary:
    """`build_index` past loading the corpus, under the index's writer lock: facets, vectors,
    citations, graphs, the written index."""
    n = corpus.papers.height

    with reporter.stage("model", unit="") as adv:
        if encoder is None:
            from graft.encoder import Encoder
            from graft.encoder_store import default_store

            # the export to ONNX Runtime is kept for queries, which then start without torch (and a
            # stored one is run instead of exporting again); the build itself always tokenises and
            # pools through sentence-transformers, so a resumed build's vectors are those of a build
            # from scratch
            encoder = Encoder(config.embedding_model, batch_size=config.embedding_batch_size,
                              device=config.embedding_device, backend=config.embedding_backend,
                              store=default_store(), from_store=False)
        extractor = make_extractor(config, encoder, out)
    if config.item_context == "late" and not getattr(encoder, "reads_context", True):
        # a model without token states (a static encoder) cannot read an item in its paper's text:
        # its items are embedded as under "title", and the manifest says so
        warnings.warn(f"the encoder {encoder.name} has no token states to read items in context with; items are "
                      "embedded with their title (item context 'title')", stacklevel=2)
        config = replace(config, item_context="title")

    cache = out / "cache" / "build"
    _drop_legacy_checkpoints(cache)
    origin = VectorOrigin(encoder)
    reused: list[str] = []
    same_model = {"model": encoder.name, "batch_size": getattr(encoder, "batch_size", None),
                  "device": getattr(encoder, "device", "cpu")}
    if encoder.name != DEFAULT_MODEL and Path(str(encoder.name)).is_dir():
        # a local model folder is known by its files too: one changed in place (trained or distilled
        # again) makes new vectors, not the old ones under its unchanged path
        same_model["files"] = fingerprint(encoder.name)
    facets_key = make_key(stage="facets", **same_model, extractor=config.extractor, llm=config.llm,
                          scorer=config.facet_scorer, code=source_digest(*EXTRACTOR_SOURCES[config.extractor]))
    facets_store = RowStore(cache / "facets", facets_key, reuse=not fresh)
    seeded: dict[str, int] = {}
    # each store's rows of papers gone from the corpus are dropped only once the index is written: a
    # build stopped before (the wrong corpus, Ctrl-C) leaves every cached paper for the next one
    compactions: list[Callable[[], object]] = []
    with reporter.stage("facets", total=n, unit="papers") as adv:
        if seed_root is not None:  # the other index's facets of this corpus's papers, copied first
            seeded["facets"] = facets_store.seed(RowStore(seed_root / "facets", facets_key),
                                                 paper_digests(corpus.papers))
        # facet items, and the items' own vectors (mostly the encoder's memo of the sentences the
        # extractor embedded), looked up per paper; the missing ones stored CHECKPOINT_PAPERS at a time
        table, alone, extractor_stats = _facets(corpus.papers, extractor, encoder, facets_store, adv, origin,
                                                reused, compactions)
    if config.extractor == "llm" and not allow_degraded:
        degraded_check(extractor_stats, n, getattr(extractor, "issues", []), out)

    titles = None
    with reporter.stage("embed", total=n, unit="titles") as adv:
        # the items in their paper's context (the graph's vectors)
        if config.title_weight > 0:
            stored = _stored_encoder(encoder, cache, "titles", make_key(stage="titles", **same_model), fresh, origin,
                                     seed_root)
            titles = title_vectors(stored, corpus.papers["title"].to_list())
            reused += _reuse_label("titles", stored.found, stored.total)
            if seed_root is not None:
                seeded["titles"] = stored.seeded
            compactions.append(stored.compact)
        adv(n)

    context = None
    if config.item_context == "late":
        with reporter.stage("read in context", total=table.height, unit="items") as adv:
            # each paper's title + abstract through the encoder once, its items pooled from the
            # tokens they span (ContextReader); the texts' own vectors are left in the encoder's
            # memo for the stage below
            reader = _stored_encoder(ContextReader(encoder), cache, "context", make_key(stage="context", **same_model),
                                     fresh, origin, seed_root)
            context = reader.encode(context_keys(corpus.papers, table), progress=adv)
            reused += _reuse_label("context", reader.found, reader.total)
            if seed_root is not None:
                seeded["context"] = reader.seeded
            compactions.append(reader.compact)

    papers_vec = None
    if config.paper_embeddings:
        with reporter.stage("embed papers", total=n, unit="papers") as adv:
            # title + abstract per paper: text-only queries' stand-in for citation coupling, the dense baseline
            stored = _stored_encoder(encoder, cache, "papers", make_key(stage="papers", **same_model), fresh, origin,
                                     seed_root)
            papers_vec = stored.encode(paper_texts(corpus.papers), progress=adv)
            reused += _reuse_label("papers", stored.found, stored.total)
            if seed_root is not None:
                seeded["papers"] = stored.seeded
            compactions.append(stored.compact)

    work = PaperWork(table=table, alone=alone, titles=titles, papers=papers_vec, context=context,
                     extractor_stats=extractor_stats,
                     model=encoder.name, backend=origin.backend(), reused=reused, seeded=seeded,
                     compactions=compactions)
    return finish_index(out, corpus, corpus.content_hash(), corpus_path, config, reporter, work, plan, LOCAL_GRAPH,
                        extra={"cache_from": {"index": str(cache_from), "copied": seeded}} if seed_root else {},
                        encoder_export=getattr(encoder, "stored", None),
                        seeded_from=Path(cache_from) if seed_root is not None else None)


@dataclass
class PaperWork:
    """The per-paper stages' results, in corpus row order: facet items (`facets.parquet` rows) and
    their own vectors, title vectors (None without `title_weight`), title + abstract vectors (None
    without `paper_embeddings`), the items read in their paper's text (None unless item context
    "late"; zero rows where not found), the extractor's counters, the encoder's name and backend."""

    table: pl.DataFrame
    alone: np.ndarray
    titles: np.ndarray | None
    papers: np.ndarray | None
    extractor_stats: dict[str, int]
    model: str
    backend: str
    context: np.ndarray | None = None
    reused: list[str] = field(default_factory=list)
    seeded: dict[str, int] = field(default_factory=dict)
    compactions: list[Callable[[], object]] = field(default_factory=list)


@dataclass(frozen=True)
class GraphEngine:
    """Where the citation counts and each facet's graph are computed: in this process
    (`LOCAL_GRAPH`), or spread over a cluster (`graphbuild.ray_engine`). Both give the same numbers."""

    name: str
    signals: Callable[..., CitationSignals]  # as `citation_signals(a, rescale, partners=)`
    one_graph: Callable[..., sp.csr_matrix]  # as `local_facet_graph`


LOCAL_GRAPH = GraphEngine("local", citation_signals, local_facet_graph)


def finish_index(out: Path, corpus: Corpus, corpus_hash: str, corpus_path: str | Path | None, config: BuildConfig,
                 reporter: Reporter, work: PaperWork, plan: RebuildPlan, engine: GraphEngine, *,
                 extra: dict[str, Any] | None = None, encoder_export: Path | None = None,
                 seeded_from: Path | None = None) -> BuildSummary:
    """The build past the per-paper stages: citation signals, text coupling, the four graphs (by
    `engine`), every artefact written, the manifest recorded (with `extra` in its build stage), the
    stores compacted. `encoder_export` and `seeded_from` are passed on to the summary."""
    n = corpus.papers.height
    paper_ids = corpus.papers["paper_id"].to_list()
    table, alone, papers_vec, reused = work.table, work.alone, work.papers, work.reused
    row_of = {pid: i for i, pid in enumerate(paper_ids)}
    owner = np.array([row_of[p] for p in table["paper_id"].to_list()], dtype=np.int64)
    own = read_or_alone(work.context, alone) if work.context is not None else alone
    vectors = with_title(own, work.titles, config.title_weight, rows=owner) if work.titles is not None else own
    del own

    cites = corpus.citations()
    with reporter.stage("citations", unit="edges") as adv:
        citing = np.array([row_of[p] for p in cites["citing"].to_list()], dtype=np.int64)
        cited = np.array([row_of[p] for p in cites["cited"].to_list()], dtype=np.int64)
        a = citation_matrix(citing, cited, n)
        signals = engine.signals(a, config.citation_rescale, partners=config.citation_partners)
        adv(int(a.nnz))
    lexicon, lexical = None, {}
    if config.lexical:
        with reporter.stage("lexicon", total=n, unit="papers") as adv:
            lexicon, lexical = lexical_rows(corpus.papers, table, owner, config)
            adv(n)
    text = None
    if config.text_coupling and papers_vec is not None:
        with reporter.stage("text coupling", unit="papers") as adv:
            lonely = linkless_rows(a)
            text = text_coupling(papers_vec, lonely, config.text_coupling, lexical=lexical.get("papers"),
                                 lexical_weight=config.text_lexical_weight)
            adv(len(lonely))

    with reporter.stage("graph", total=n * len(FACETS), unit="rows") as adv:
        graphs = facet_graphs(owner, table["facet"].to_numpy(), vectors, a, signals, config.graph_params(),
                              progress=adv, text=text, ann_dir=out / "cache" / "ann", one_graph=engine.one_graph,
                              lexical=lexical or None)

    with reporter.stage("write", unit="files") as adv:
        _check_no_links(out)
        removed = _invalidate(out, str(corpus_path) if corpus_path is not None else "aclsum", plan)
        write_parquet(out / "papers.parquet", papers_table(corpus, a))
        write_parquet(out / "citations.parquet", cites)
        write_parquet(out / "facets.parquet", table)
        write_npy(out / "embeddings" / "items.npy", vectors.astype(config.embedding_dtype))
        if papers_vec is not None:
            write_npy(out / "embeddings" / "papers.npy", papers_vec.astype(config.embedding_dtype))
        elif (out / "embeddings" / "papers.npy").exists():  # an earlier build's: not this build's papers
            (out / "embeddings" / "papers.npy").unlink()
        if config.title_weight > 0 or work.context is not None:  # items.npy is not the items alone
            write_npy(out / "embeddings" / "items_alone.npy", alone.astype(config.embedding_dtype))
        for facet, g in graphs.items():
            write_npz(out / "graph" / f"{facet}.npz", g)
        write_npz(out / "graph" / "citation.npz", signals.score)
        approximate = config.graph_params().candidates.resolve(n) != "exact"
        for facet in graphs:  # the FAISS index each facet's candidates came from (`graft.ann`), or none
            made, ann = out / "cache" / "ann" / f"{facet}.faiss", out / "graph" / f"ann_{facet}.faiss"
            if approximate and made.is_file():
                os.replace(made, ann)
            elif ann.exists():  # an earlier build's
                ann.unlink()
        for name in LEXICAL_SETS:  # this build's lexical rows; an earlier build's are not
            path = out / lexical_file(name)
            if name in lexical:
                write_npz(path, lexical[name])
            elif path.exists():
                path.unlink()
        if lexicon is not None:
            lexicon.write(out / LEXICON_FILE)
        elif (out / LEXICON_FILE).exists():
            (out / LEXICON_FILE).unlink()
        if text is not None:
            write_npz(out / "graph" / "text.npz", text)
        elif (out / "graph" / "text.npz").exists():  # an earlier build's
            (out / "graph" / "text.npz").unlink()
        adv(5 + len(graphs) + (config.title_weight > 0) + (papers_vec is not None) + (text is not None)
            + len(lexical) + (lexicon is not None))

    has_in = {f: float((np.asarray((g > 0).sum(axis=0)).ravel() > 0).mean()) if n else 0.0
              for f, g in graphs.items()}
    facet_col = table["facet"].to_numpy()
    counts: dict[str, Any] = {
        "papers": n,
        "citations": int(a.nnz),
        "facet_items": {f: int((facet_col == f).sum()) for f in FACETS},
        "edges": {f: int(g.nnz) for f, g in graphs.items()},
        "share_with_incoming_edge": has_in,
        "paper_embeddings": 0 if papers_vec is None else int(papers_vec.shape[0]),
        "coupling_pairs": signals.n_coupling_pairs,
        "text_coupled_papers": 0 if text is None else int((np.diff(text.indptr) > 0).sum()),
        "lexicon_terms": 0 if lexicon is None else lexicon.size,
        "cocitation_pairs": signals.n_cocitation_pairs,
        "candidates": config.graph_params().candidates.resolve(n),
        "skipped_records": len(corpus.report.skipped),
        "dropped_references": corpus.report.dropped_references,
        "extractor": work.extractor_stats,
        "engine": engine.name,
    }
    manifest = new_manifest(corpus_hash)
    manifest["build_id"] = uuid.uuid4().hex  # tells this build's files from a later rebuild's (`graft.index`)
    manifest["corpus"] = {"source": str(corpus_path) if corpus_path is not None else "aclsum"}
    manifest["embedding"] = {"model": work.model, "dim": int(vectors.shape[1]), "dtype": config.embedding_dtype,
                             "backend": work.backend}
    recorded = config_to_dict(config)
    if isinstance(recorded.get("llm"), dict) and recorded["llm"].get("base_url"):
        from graft.llm.client import redact_url

        # a password written into the URL is not stored
        recorded["llm"] = {**recorded["llm"], "base_url": redact_url(str(recorded["llm"]["base_url"]))}
    record_stage(out, manifest, "build", config=recorded, counts=counts,
                 timings=reporter.timings(),
                 extra={"peak_rss_bytes": reporter.peaks(), "load_report": corpus.report.as_dict(),
                        "reused_checkpoints": reused, **(extra or {})})
    read_manifest(out)  # the index must open after a build
    with reporter.stage("query files", unit="files") as adv:
        from graft.index import Index

        adv(Index.open(out).prepare_queries())
    with reporter.stage("compact stores", unit="stores") as adv:  # dead rows out of the per-paper stores
        for compact in work.compactions:
            compact()
            adv(1)
    return BuildSummary(out, counts, reporter.timings(), reporter.peaks(), corpus.report.as_dict(),
                        reused, encoder_export, removed, plan.aside, seeded_from, work.seeded)


def _facets(papers: pl.DataFrame, extractor: FacetExtractor, encoder: Any, store: RowStore,
            advance: Callable[[int], None], origin: VectorOrigin, reused: list[str],
            compactions: list[Callable[[], object]]) -> tuple[pl.DataFrame, np.ndarray, dict[str, int]]:
    """Facet items of every paper, the items' own vectors and the extractor's counters. A paper the
    store holds (same title, abstract and full text, same setting) is served from it; the others
    are taken apart CHECKPOINT_PAPERS at a time, each batch stored as it is done (but a paper whose
    LLM request failed: a later build asks again). The store's compaction to this corpus's papers
    is appended to `compactions`, run once the index is written."""
    n = papers.height
    keys = paper_digests(papers)
    stored = store.load()
    todo: dict[str, int] = {}  # key of each paper to take apart -> its first row
    for i, rows in enumerate(stored.positions(keys)):
        if not rows:
            todo.setdefault(keys[i], i)
    advance(n - len(todo))
    if todo and stored.table.height and hasattr(encoder, "remember"):
        # a sentence shared with a stored paper gets the stored vector, as it would in one run
        encoder.remember(stored.table["text"].to_list(), stored.vectors)
    before = extractor.stats()
    tables = [stored.table.drop("shard")] if stored.table.height else []
    vectors = [stored.vectors] if stored.table.height else []
    rows_todo = list(todo.values())
    for start in range(0, len(rows_todo), CHECKPOINT_PAPERS):
        chunk = rows_todo[start : start + CHECKPOINT_PAPERS]
        items, counts = extractor.extract_counted(papers[chunk], progress=advance)
        table = facets_table([keys[i] for i in chunk], items).drop("docid").rename({"paper_id": "key"})
        per_paper = [sum(len(f[facet]) for facet in FACETS) for f in items]
        table = table.with_columns(pl.Series("counts", np.repeat([json.dumps(c, sort_keys=True) for c in counts],
                                                                per_paper).tolist(), dtype=pl.Utf8))
        alone = np.asarray(encoder.encode(table["text"].to_list()), dtype=np.float32)
        ok = np.repeat([c.get("failed", 0) == 0 for c in counts], per_paper)
        if ok.any():
            store.add(table.filter(pl.Series(ok)), alone[ok], origin.made())
        tables.append(table)
        vectors.append(alone)
    every = StoredRows(pl.concat(tables, how="diagonal_relaxed"), np.concatenate(vectors))
    positions = every.positions(keys)
    rows = np.array([r for p in positions for r in p], dtype=np.int64)
    table = every.table[rows].select(
        pl.Series("paper_id", [pid for pid, p in zip(papers["paper_id"].to_list(), positions) for _ in p],
                  dtype=pl.Utf8),
        "facet", pl.col("item_idx").cast(pl.Int32), "text",
        pl.col("text").map_elements(normalize_text, return_dtype=pl.Utf8).alias("docid"))
    # counters: each paper's own, summed over the corpus, and the run's others (an LLM client's)
    stats: dict[str, int] = {}
    counts_col = every.table["counts"]
    for p in positions:
        for k, v in loads(counts_col[p[0]], "a stored paper's counts").items():
            stats[k] = stats.get(k, 0) + v
    stats.update({k: v - before.get(k, 0) for k, v in extractor.stats().items() if k not in stats})
    n_stored = stored.table.height
    for meta in stored.metas_of(int(r) for r in rows if r < n_stored):
        origin.reused(meta)
    reused.extend(_reuse_label("facets", sum(p[0] < n_stored for p in positions), n, "papers"))
    compactions.append(lambda: store.compact(keys))
    return table, every.vectors[rows], stats


def degraded_check(stats: dict[str, int], papers: int, issues: list[tuple[str, str]], out: Path) -> None:
    """Stop an LLM build in which most papers' facets would be the heuristic fallback's: a server that
    is down or answers nonsense must not pass for an LLM-extracted index.

    Raises:
        GraftError: with the counts, the first paper's reason and the ways out.
    """
    fallback = int(stats.get("fallback", 0))
    if papers == 0 or 2 * fallback <= papers:
        return
    first = f"; first: paper {issues[0][0]}: {issues[0][1][:300]}" if issues else ""
    raise GraftError(
        f"the LLM extractor gave no usable answer for {fallback} of {papers} papers ({stats.get('failed', 0)} "
        f"requests failed, {stats.get('discarded', 0)} answers discarded){first}. The index at {out} was not "
        "written (an old one there is kept). Check the server and rerun: answered papers are kept and not asked "
        "again; or pass --allow-degraded to write it with the heuristic extractor's facets for those papers")


def _reuse_label(stage: str, found: int, total: int, unit: str = "") -> list[str]:
    """How much of a stage the stores served: [] (none), [stage] (all), or ["stage (f of t unit)"]."""
    if found == 0 or total == 0:
        return []
    return [stage] if found == total else [f"{stage} ({found:,} of {total:,}{' ' + unit if unit else ''})"]


def _stored_encoder(encoder: Any, cache: Path, stage: str, key: str, fresh: bool, origin: VectorOrigin,
                    seed_root: Path | None) -> StoredEncoder:
    return StoredEncoder(encoder, RowStore(cache / stage, key, reuse=not fresh), origin, chunk=CHECKPOINT_TEXTS,
                         seed=None if seed_root is None else RowStore(seed_root / stage, key))


def _seed_root(cache_from: str | Path | None, out: Path, fresh: bool) -> Path | None:
    """The build stores of the `cache_from` index (None without one), checked before any work."""
    if cache_from is None:
        return None
    if fresh:
        raise GraftError("--cache-from and --fresh contradict each other: --fresh recomputes every paper's "
                         "facets and embeddings; drop one of them")
    root = Path(cache_from) / "cache" / "build"
    if not root.is_dir():
        raise GraftError(f"--cache-from {cache_from}: no build stores there ({root} is missing); give an index "
                         "directory written by `graft build`")
    if out.exists() and root.resolve() == (out / "cache" / "build").resolve():
        raise GraftError(f"--cache-from {cache_from} is the index being built, whose stores are read anyway; "
                         "drop --cache-from")
    return root


def _drop_legacy_checkpoints(cache: Path) -> None:
    """Checkpoints of earlier versions (files directly in INDEX/cache/build, keyed by the whole
    corpus) can never be read again: their space is given back."""
    if cache.is_dir():
        for path in cache.iterdir():
            if path.is_file():
                path.unlink()


class VectorOrigin:
    """Which encoder backends made a build's vectors: the encoder's own for the vectors this run
    makes, the one stored with each shard of INDEX/cache/build it reads (the manifest's
    `embedding.backend`). A rebuild that finds everything stored makes no vectors, and its encoder
    may never reach a bulk call that moves it to ONNX Runtime; what made the vectors is still known."""

    def __init__(self, encoder: Any) -> None:
        self.encoder = encoder
        self.seen: set[str] = set()

    def made(self) -> dict[str, str]:
        """The backend of vectors the encoder has just made, as a stored shard's metadata."""
        backend = str(getattr(self.encoder, "backend", "torch"))
        self.seen.add(backend)
        return {"backend": backend}

    def reused(self, meta: dict[str, Any]) -> None:
        """Vectors read from a stored shard whose metadata is `meta`."""
        if meta.get("backend"):
            self.seen.add(str(meta["backend"]))

    def backend(self) -> str:
        """"torch", "onnx", or "onnx+torch" when stages differ; the encoder's own when nothing said."""
        return "+".join(sorted(self.seen)) or str(getattr(self.encoder, "backend", "torch"))
