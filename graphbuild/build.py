"""`graft build`: corpus -> facets -> embeddings -> citation signals -> typed top-K graph -> index."""

from __future__ import annotations

import shutil
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import polars as pl
import scipy.sparse as sp

from graft.config import config_from_dict, config_to_dict
from graft.facets import FACETS, FacetItems
from graft.manifest import manifest_path, new_manifest, read_manifest, record_stage
from graft.progress import Reporter
from graft.store import read_json, write_json, write_npy, write_npz, write_parquet
from graft.text import normalize_text, paper_texts
from graphbuild.checkpoints import StageCheckpoints, make_key, order_digest, source_digest
from graphbuild.citations import (
    RESCALE_MODES,
    CitationSignals,
    citation_links,
    citation_matrix,
    citation_signals,
)
from graphbuild.corpus import Corpus, load_corpus
from graphbuild.embeddings import BACKENDS, DEFAULT_TITLE_WEIGHT, title_vectors, with_title
from graphbuild.extract import EXTRACTORS, FacetExtractor
from graphbuild.graph import GraphParams, facet_graph
from graphbuild.similarity import group_items

#: Papers per checkpoint of the facets stage: a build killed there loses at most this many papers' work.
CHECKPOINT_PAPERS = 1024


@dataclass
class BuildConfig:
    """Settings of `graft build`, recorded in manifest.json."""

    extractor: str = "heuristic"  # facet extractor: "heuristic" (offline default) or "llm"
    embedding_model: str | None = None  # local sentence-transformers folder; None = all-MiniLM-L6-v2
    embedding_batch_size: int | None = None  # texts per encoder batch; None: 16 on the CPU, 128 on a GPU
    embedding_device: str = "cpu"  # torch device of the build's encoder: cpu, cuda, cuda:N, mps or auto
    embedding_backend: str = "auto"  # encoder runtime: "auto" (ONNX Runtime on the CPU: cs768 in 0.63x), "torch", "onnx"
    embedding_dtype: str = "float16"  # dtype of embeddings/items.npy ("float16" halves the file)
    title_weight: float = DEFAULT_TITLE_WEIGHT  # item vector = unit(e(item) + w·e(title)); 0 = the item alone
    paper_embeddings: bool = True  # write embeddings/papers.npy (title + abstract; text coupling, dense baseline)
    top_k: int = 20  # K: out-edges kept per paper and facet (GRAFT paper)
    alpha: float = 0.75  # facet-similarity weight in w_f (GRAFT paper)
    beta: float = 0.25  # citation-score weight in w_f (GRAFT paper)
    n_candidates: int = 100  # facet-similar candidates per paper from the pooled prefilter
    citation_rescale: str = "pair"  # "pair": per-pair rescaling of log counts (README); "global": by the max
    block_rows: int | None = None  # prefilter rows per block; None sizes blocks to ~128 MiB
    skip_bad: bool = False  # skip invalid corpus records (counted and listed) instead of stopping
    limit: int | None = None  # keep only the first N valid records
    llm: dict[str, Any] = field(default_factory=dict)  # LLMConfig fields for extractor="llm"

    def __post_init__(self) -> None:
        if self.extractor not in EXTRACTORS:
            raise ValueError(f"extractor '{self.extractor}' is unknown; allowed: {list(EXTRACTORS)}")
        if self.embedding_dtype not in ("float16", "float32"):
            raise ValueError(f"embedding_dtype '{self.embedding_dtype}'; allowed: float16, float32")
        if not self.title_weight >= 0:
            raise ValueError(f"title_weight must be >= 0, got {self.title_weight}")
        if self.citation_rescale not in RESCALE_MODES:
            raise ValueError(f"citation_rescale '{self.citation_rescale}' is unknown; allowed: {list(RESCALE_MODES)}")
        if self.top_k < 1:
            raise ValueError(f"top_k must be >= 1, got {self.top_k}")
        if self.embedding_backend not in BACKENDS:
            raise ValueError(f"embedding_backend '{self.embedding_backend}' is unknown; allowed: {list(BACKENDS)}")
        if self.embedding_batch_size is not None and self.embedding_batch_size < 1:
            raise ValueError(f"embedding_batch_size must be >= 1, got {self.embedding_batch_size}")
        if not (self.alpha >= 0 and self.beta >= 0 and abs(self.alpha + self.beta - 1) < 1e-6):
            raise ValueError(f"alpha and beta must be >= 0 and sum to 1, got {self.alpha} + {self.beta}")

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> BuildConfig:
        # indexes built before items took their title as context embedded them alone
        return config_from_dict(cls, {"title_weight": 0.0, **data})

    @classmethod
    def from_manifest(cls, manifest: dict[str, Any]) -> BuildConfig:
        """The build settings recorded in an index's manifest (defaults where none are recorded)."""
        return cls.from_dict(manifest.get("stages", {}).get("build", {}).get("config", {}))

    def graph_params(self) -> GraphParams:
        return GraphParams(top_k=self.top_k, alpha=self.alpha, beta=self.beta,
                           n_candidates=self.n_candidates, block_rows=self.block_rows)


@dataclass
class BuildSummary:
    index_dir: Path
    counts: dict[str, Any]
    timings: dict[str, float]
    peaks: dict[str, int]
    report: dict[str, Any]
    reused: list[str] = field(default_factory=list)  # stages loaded from INDEX/cache/build
    #: the encoder's ONNX export this build stored for queries (`graphbuild.encoder_store`), or None
    encoder_export: Path | None = None


def make_extractor(config: BuildConfig, encoder: Any, index_dir: Path) -> FacetExtractor:
    """The facet extractor named by the config (the LLM one falls back to the heuristic one)."""
    from graphbuild.facets_heuristic import HeuristicFacetExtractor

    heuristic = HeuristicFacetExtractor(encoder)
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
    """papers.parquet: metadata in node order, with in-corpus citation counts."""
    n_cit = np.asarray(a.sum(axis=0)).ravel().astype(np.int32)
    return corpus.papers.select(["paper_id", "title", "abstract", "year", "venue", "authors"]).with_columns(
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
) -> dict[str, sp.csr_matrix]:
    """The four typed top-K graphs from item embeddings and citation signals.

    Args:
        owner: paper row of each facet item; facet_of_item: its facet name; vectors: its embedding.
        a: the citation matrix; signals: its coupling / co-citation score.
    """
    n = a.shape[0]
    links = citation_links(a, signals.score)  # candidates beyond the facet prefilter
    graphs = {}
    for facet in FACETS:
        sel = facet_of_item == facet
        items = group_items(owner[sel], np.asarray(vectors[sel], dtype=np.float32), n)
        graphs[facet] = facet_graph(items, signals.score, links, params, progress=progress)
    return graphs


def _invalidate(out: Path) -> dict[str, Any] | None:
    """Mark an existing index as being rebuilt so a killed build is never mistaken for a finished one."""
    path = manifest_path(out)
    if not path.is_file():
        return None
    old = read_json(path)
    old["stages"] = {}
    old["in_progress"] = "build"
    write_json(path, old)
    return old


def build_index(
    corpus_path: str | Path | None,
    out: str | Path,
    config: BuildConfig | None = None,
    *,
    reporter: Reporter | None = None,
    encoder: Any = None,
    fresh: bool = False,
) -> BuildSummary:
    """Build a GRAFT index directory from a corpus.

    Args:
        corpus_path: JSONL / JSONL.gz / Parquet file, S2ORC JSON file or folder, or None / "aclsum"
            for the ACLSum demo corpus.
        out: index directory (created; artefacts of an earlier build are replaced).
        config: build settings; defaults as in DESIGN.md.
        reporter: progress and timing; a quiet one by default.
        encoder: an already loaded `Encoder` to reuse (tests); built from the config otherwise.
        fresh: recompute every stage instead of loading matching checkpoints from
            INDEX/cache/build (`graphbuild.checkpoints`); the checkpoints are rewritten either way.
    Returns:
        counts, per-stage timings and peak memory, the corpus load report and the stages reused.
    Raises:
        InputValidationError: bad corpus records (unless `skip_bad`).
    """
    config = config or BuildConfig()
    reporter = reporter or Reporter(quiet=True)
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    _invalidate(out)
    for stale in ("docids", "train", "model"):  # artefacts of later stages belong to the old graph
        if (out / stale).exists():
            shutil.rmtree(out / stale)

    with reporter.stage("load", unit="papers") as adv:
        corpus = load_corpus(corpus_path, skip_bad=config.skip_bad, limit=config.limit)
        adv(corpus.papers.height)
    n = corpus.papers.height
    paper_ids = corpus.papers["paper_id"].to_list()

    with reporter.stage("model", unit="") as adv:
        if encoder is None:
            from graphbuild.embeddings import Encoder
            from graphbuild.encoder_store import default_store

            # the export to ONNX Runtime is kept for queries, which then start without torch (and a
            # stored one is run instead of exporting again); the build itself always tokenises and
            # pools through sentence-transformers, so a resumed build's vectors are those of a build
            # from scratch
            encoder = Encoder(config.embedding_model, batch_size=config.embedding_batch_size,
                              device=config.embedding_device, backend=config.embedding_backend,
                              store=default_store(), from_store=False)
        extractor = make_extractor(config, encoder, out)

    ckpt = StageCheckpoints(out / "cache" / "build", reuse=not fresh)
    origin = VectorOrigin(encoder)
    same_corpus = {"corpus": corpus.content_hash(), "order": order_digest(paper_ids)}
    same_model = {"model": encoder.name, "batch_size": getattr(encoder, "batch_size", None),
                  "device": getattr(encoder, "device", "cpu")}
    facets_key = make_key(stage="facets", **same_corpus, **same_model, extractor=config.extractor,
                          llm=config.llm, code=source_digest("graphbuild/facets_heuristic.py",
                                                             "graphbuild/facets_llm.py", "graft/facets.py",
                                                             "graft/text.py"))
    with reporter.stage("facets", total=n, unit="papers") as adv:
        # facet items, and the items' own vectors (mostly the encoder's memo of the sentences the
        # extractor embedded), checkpointed every CHECKPOINT_PAPERS papers
        table, alone, extractor_stats = _facets_in_parts(corpus.papers, extractor, encoder, ckpt, facets_key, adv,
                                                         origin)

    row_of = {pid: i for i, pid in enumerate(paper_ids)}
    owner = np.array([row_of[p] for p in table["paper_id"].to_list()], dtype=np.int64)
    with reporter.stage("embed", total=n, unit="titles") as adv:
        # the items in their paper's context (the graph's vectors)
        if config.title_weight > 0:
            titles = _checkpointed(ckpt, "titles", make_key(stage="titles", **same_corpus, **same_model),
                                   lambda: title_vectors(encoder, corpus.papers["title"].to_list()), origin=origin)
            vectors = with_title(alone, titles[owner], config.title_weight)
        else:
            vectors = alone
        adv(n)

    papers_vec = None
    if config.paper_embeddings:
        with reporter.stage("embed papers", total=n, unit="papers") as adv:
            # title + abstract per paper: text-only queries' stand-in for citation coupling, the dense baseline
            papers_key = make_key(stage="papers", **same_corpus, **same_model, code=source_digest("graft/text.py"))
            papers_vec = _checkpointed(ckpt, "papers", papers_key,
                                       lambda: encoder.encode(paper_texts(corpus.papers), progress=adv),
                                       on_reuse=lambda: adv(n), origin=origin)

    cites = corpus.citations()
    with reporter.stage("citations", unit="edges") as adv:
        citing = np.array([row_of[p] for p in cites["citing"].to_list()], dtype=np.int64)
        cited = np.array([row_of[p] for p in cites["cited"].to_list()], dtype=np.int64)
        a = citation_matrix(citing, cited, n)
        signals = citation_signals(a, config.citation_rescale)
        adv(int(a.nnz))

    with reporter.stage("graph", total=n * len(FACETS), unit="rows") as adv:
        graphs = facet_graphs(owner, table["facet"].to_numpy(), vectors, a, signals, config.graph_params(),
                              progress=adv)

    with reporter.stage("write", unit="files") as adv:
        write_parquet(out / "papers.parquet", papers_table(corpus, a))
        write_parquet(out / "citations.parquet", cites)
        write_parquet(out / "facets.parquet", table)
        write_npy(out / "embeddings" / "items.npy", vectors.astype(config.embedding_dtype))
        if papers_vec is not None:
            write_npy(out / "embeddings" / "papers.npy", papers_vec.astype(config.embedding_dtype))
        elif (out / "embeddings" / "papers.npy").exists():  # an earlier build's: not this build's papers
            (out / "embeddings" / "papers.npy").unlink()
        if config.title_weight > 0:
            write_npy(out / "embeddings" / "items_alone.npy", alone.astype(config.embedding_dtype))
        for facet, g in graphs.items():
            write_npz(out / "graph" / f"{facet}.npz", g)
        write_npz(out / "graph" / "citation.npz", signals.score)
        adv(5 + len(graphs) + (config.title_weight > 0) + (papers_vec is not None))

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
        "cocitation_pairs": signals.n_cocitation_pairs,
        "skipped_records": len(corpus.report.skipped),
        "dropped_references": corpus.report.dropped_references,
        "extractor": extractor_stats,
    }
    manifest = new_manifest(corpus.content_hash())
    manifest["corpus"] = {"source": str(corpus_path) if corpus_path is not None else "aclsum"}
    manifest["embedding"] = {"model": encoder.name, "dim": int(vectors.shape[1]), "dtype": config.embedding_dtype,
                             "backend": origin.backend()}
    record_stage(out, manifest, "build", config=config_to_dict(config), counts=counts,
                 timings=reporter.timings(),
                 extra={"peak_rss_bytes": reporter.peaks(), "load_report": corpus.report.as_dict(),
                        "reused_checkpoints": list(ckpt.reused)})
    read_manifest(out)  # the index must open after a build
    return BuildSummary(out, counts, reporter.timings(), reporter.peaks(), corpus.report.as_dict(),
                        list(ckpt.reused), getattr(encoder, "stored", None))


def _facets_in_parts(papers: pl.DataFrame, extractor: FacetExtractor, encoder: Any, ckpt: StageCheckpoints,
                     key: str, advance: Callable[[int], None],
                     origin: VectorOrigin) -> tuple[pl.DataFrame, np.ndarray, dict[str, int]]:
    """Facet items of every paper, the items' own vectors and the extractor's counters, made
    CHECKPOINT_PAPERS papers at a time; a part checkpointed by an earlier run with the same key is
    loaded instead (its item vectors are remembered by the encoder, as if it had just made them)."""
    ids = papers["paper_id"].to_list()
    tables, vectors, stats, loaded = [], [], {}, 0
    parts = -(-len(ids) // CHECKPOINT_PAPERS)
    for part, start in enumerate(range(0, len(ids), CHECKPOINT_PAPERS)):
        chunk = ids[start : start + CHECKPOINT_PAPERS]
        part_key = make_key(stage="facets", facets=key, part=part, papers=order_digest(chunk))
        saved = ckpt.load(f"facets.{part:05d}", part_key, record=False)
        if saved is not None:
            loaded += 1
            table, alone, counts = saved["table"], saved["arrays"]["vectors"], saved["meta"]["extractor"]
            origin.reused(saved["meta"])
            if hasattr(encoder, "remember"):
                encoder.remember(table["text"].to_list(), alone)
            advance(len(chunk))
        else:
            before = extractor.stats()
            table = facets_table(chunk, extractor.extract(papers.slice(start, len(chunk)), progress=advance))
            alone = np.asarray(encoder.encode(table["text"].to_list()), dtype=np.float32)
            counts = {k: v - before.get(k, 0) for k, v in extractor.stats().items()}
            ckpt.save(f"facets.{part:05d}", part_key, table=table, arrays={"vectors": alone},
                      meta={"extractor": counts, **origin.made()})
        tables.append(table)
        vectors.append(alone)
        stats = {k: stats.get(k, 0) + v for k, v in counts.items()}
    ckpt.remove_parts("facets", keep=parts)  # those of a longer corpus
    if loaded:
        ckpt.reused.append("facets" if loaded == parts else f"facets ({loaded} of {parts} parts)")
    dim = int(getattr(encoder, "dim", 0))
    table = pl.concat(tables) if tables else facets_table([], [])
    return table, np.concatenate(vectors) if vectors else np.zeros((0, dim), np.float32), stats


class VectorOrigin:
    """Which encoder backends made a build's vectors: the encoder's own for the stages this run
    computes, the one a reused checkpoint recorded for the stages it loads (the manifest's
    `embedding.backend`). A rebuild from checkpoints makes no vectors, and its encoder may never
    reach a bulk call that moves it to ONNX Runtime; what made the vectors is still known."""

    def __init__(self, encoder: Any) -> None:
        self.encoder = encoder
        self.seen: set[str] = set()

    def made(self) -> dict[str, str]:
        """The backend of vectors the encoder has just made, as a checkpoint's metadata."""
        backend = str(getattr(self.encoder, "backend", "torch"))
        self.seen.add(backend)
        return {"backend": backend}

    def reused(self, meta: dict[str, Any]) -> None:
        """Vectors loaded from a checkpoint whose metadata is `meta` (checkpoints written before
        the backend was recorded name none)."""
        if meta.get("backend"):
            self.seen.add(str(meta["backend"]))

    def backend(self) -> str:
        """"torch", "onnx", or "onnx+torch" when stages differ; the encoder's own when nothing said."""
        return "+".join(sorted(self.seen)) or str(getattr(self.encoder, "backend", "torch"))


def _checkpointed(ckpt: StageCheckpoints, stage: str, key: str, compute: Callable[[], Any],
                  on_reuse: Callable[[], None] | None = None, *, origin: VectorOrigin) -> np.ndarray:
    """The stage's float32 vectors from its checkpoint (then `on_reuse()`), else `compute()`d and
    checkpointed, with the backend that made them recorded in `origin`."""
    saved = ckpt.load(stage, key)
    if saved is not None:
        origin.reused(saved["meta"])
        if on_reuse is not None:
            on_reuse()
        return saved["arrays"]["vectors"]
    vectors = np.asarray(compute(), dtype=np.float32)
    ckpt.save(stage, key, arrays={"vectors": vectors}, meta=origin.made())
    return vectors
