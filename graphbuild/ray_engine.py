"""`graft build --engine ray`: the build spread over a Ray cluster (a local one when no address is
given), writing the same index contract as the single-process build.

Stages, each resumable (a rerun after a killed driver redoes only what was not finished):

1. **shards** (driver, streaming): the corpus validated and cut into Parquet shards
   (`graphbuild.shards`, INDEX/cache/ray/shards); only ids are held in memory.
2. **papers** (Ray Data): `read_parquet` over the shards not yet done, `map_batches` of an actor
   class that loads the encoder and the facet extractor once and gives each paper its facet items,
   the items' own vectors, its title vector and its title + abstract vector (`num_gpus` per actor
   where GPUs are there; LLM extraction goes through the same OpenAI-compatible client as the local
   build). The driver gathers the rows of each shard and writes them as one Parquet file in
   INDEX/cache/ray/papers as soon as the shard is complete.
3. **citations** (Ray tasks): the coupling and co-citation counts in row blocks
   (`graft.citations.link_count_rows`), rescaled as the local build does.
4. **graph** (Ray tasks): per facet, the rows in ranges of whole candidate blocks
   (`graft.edges.facet_graph_rows`: the prefilter, exact or FAISS, and the exact scoring of the
   candidates); each facet's graph is kept in INDEX/cache/ray/graph once made.
5. **write** (driver): the index files, as `graphbuild.build.finish_index` writes them.

Actors and tasks are retried when a worker or a node dies (Ray Data restarts its actors and retries
their batches by default; the graph's tasks have `max_retries`). The
graph stage's numbers are those of the local build (same blocks, same code); the vectors can differ
from a local build's in the last bits, since the encoder batches other sentences together.

Ray is imported only here; `graft build` without `--engine ray` never imports it.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import polars as pl
import scipy.sparse as sp

from graft.build_config import BuildConfig
from graft.citations import CitationSignals, citation_signals, count_blocks, link_count_rows
from graft.config import config_to_dict
from graft.errors import GraftError
from graft.facets import FACETS
from graft.progress import Reporter
from graft.store import atomic_path, index_lock, read_json, write_json
from graphbuild.build import (
    GraphEngine,
    PaperWork,
    check_out,
    facets_table,
    finish_index,
    make_extractor,
    plan_rebuild,
)
from graphbuild.shards import SHARD_PAPERS, Shards, write_shards

#: Papers per batch handed to a per-paper actor.
BATCH_PAPERS = 64


@dataclass(frozen=True)
class RaySettings:
    """How the Ray engine runs: `address` of an existing cluster (None: start a local Ray on this
    machine with `local_cpus` CPUs), papers per shard and per batch, per-paper actors (None: one per
    CPU of the cluster but one, which reads the shards) and the CPUs and GPUs each actor holds, and
    row ranges per facet graph (None: two per CPU)."""

    address: str | None = None
    local_cpus: int | None = None
    shard_papers: int = SHARD_PAPERS
    batch_papers: int = BATCH_PAPERS
    actors: int | None = None
    actor_cpus: float = 1.0
    actor_gpus: float = 0.0
    graph_tasks: int | None = None

    def __post_init__(self) -> None:
        for name in ("shard_papers", "batch_papers"):
            if getattr(self, name) < 1:
                raise GraftError(f"{name} must be >= 1, got {getattr(self, name)}")
        if self.actors is not None and self.actors < 1:
            raise GraftError(f"actors must be >= 1, got {self.actors}")
        if self.actor_cpus <= 0 or self.actor_gpus < 0:
            raise GraftError("actor CPUs must be > 0 and actor GPUs >= 0")


def _ray() -> Any:
    try:
        import ray
    except ImportError:
        raise GraftError("the Ray engine needs Ray: pip install 'ray[data]' (or `pip install graft[ray]`)") from None
    return ray


class Session:
    """A connection to the cluster for one build: joins the one this process is already connected
    to, or `address`, or starts a local Ray (shut down again at the end)."""

    def __init__(self, settings: RaySettings) -> None:
        self.ray = _ray()
        self.started = False
        if not self.ray.is_initialized():
            kwargs: dict[str, Any] = {"include_dashboard": False, "log_to_driver": False,
                                      "configure_logging": False}
            if settings.address:
                self.ray.init(address=settings.address, **kwargs)
            else:
                self.ray.init(num_cpus=settings.local_cpus or os.cpu_count() or 1, **kwargs)
            self.started = True
        self.cpus = max(1, int(self.ray.cluster_resources().get("CPU", 1)))
        import logging

        import ray.data

        # the build reports its own progress; Ray Data's bars and per-dataset logs would bury it
        context = ray.data.DataContext.get_current()
        context.enable_progress_bars = False
        context.print_on_execution_start = False
        logging.getLogger("ray.data").setLevel(logging.WARNING)

    def close(self) -> None:
        if self.started:
            self.ray.shutdown()


# ---- the per-paper stage ------------------------------------------------------------------------


class PaperWorker:
    """A Ray Data actor: the encoder and the facet extractor loaded once, then one batch of papers
    at a time made into their facet items and vectors (the local build's per-paper work)."""

    def __init__(self, config: BuildConfig, index_dir: str, threads: int) -> None:
        import torch

        from graft.encoder import Encoder
        from graft.encoder_store import default_store

        torch.set_num_threads(max(1, threads))
        self.config = config
        self.encoder = Encoder(config.embedding_model, batch_size=config.embedding_batch_size,
                               device=config.embedding_device, backend=config.embedding_backend,
                               store=default_store(), from_store=False)
        self.extractor = make_extractor(config, self.encoder, Path(index_dir))

    def __call__(self, batch: Any) -> Any:
        import pyarrow as pa

        from graft.encoder import ContextReader, context_keys, title_vectors
        from graft.text import paper_texts

        papers = pl.from_arrow(batch)
        ids = papers["paper_id"].to_list()
        items, counts = self.extractor.extract_counted(papers)
        table = facets_table(ids, items)
        alone = np.asarray(self.encoder.encode(table["text"].to_list()), dtype=np.float32) if table.height else \
            np.zeros((0, self.encoder.dim), np.float32)
        titles = title_vectors(self.encoder, papers["title"].to_list()) if self.config.title_weight > 0 else None
        context = None
        if self.config.item_context == "late":  # before `whole`: the pass leaves the texts' vectors in the memo
            context = ContextReader(self.encoder).encode(context_keys(papers, table))
        whole = (np.asarray(self.encoder.encode(paper_texts(papers)), dtype=np.float32)
                 if self.config.paper_embeddings else None)
        per = table.group_by("paper_id", maintain_order=True).len()
        count = dict(zip(per["paper_id"].to_list(), per["len"].to_list()))
        bounds = np.cumsum([0] + [count.get(p, 0) for p in ids])
        rows_items, rows_vecs, rows_context = [], [], []
        facet, idx, text = table["facet"].to_list(), table["item_idx"].to_list(), table["text"].to_list()
        for k in range(len(ids)):
            lo, hi = int(bounds[k]), int(bounds[k + 1])
            rows_items.append(json.dumps([[facet[j], idx[j], text[j]] for j in range(lo, hi)], ensure_ascii=False))
            rows_vecs.append(alone[lo:hi].tobytes())
            rows_context.append(context[lo:hi].tobytes() if context is not None else b"")
        backend = str(getattr(self.encoder, "backend", "torch"))
        return pa.table({
            "paper_id": ids, "path": batch.column("path").to_pylist(), "items": rows_items,
            "item_vectors": pa.array(rows_vecs, pa.binary()),
            "context_vectors": pa.array(rows_context, pa.binary()),
            "title_vector": pa.array([titles[k].tobytes() if titles is not None else b"" for k in range(len(ids))],
                                     pa.binary()),
            "paper_vector": pa.array([whole[k].tobytes() if whole is not None else b"" for k in range(len(ids))],
                                     pa.binary()),
            "counts": [json.dumps(c, sort_keys=True) for c in counts],
            "meta": [json.dumps({"model": self.encoder.name, "backend": backend, "dim": self.encoder.dim})] * len(ids),
        })


def papers_stage(session: Session, shards: Shards, folder: Path, config: BuildConfig, settings: RaySettings,
                 index_dir: Path, progress: Callable[[int], None] | None = None) -> list[Path]:
    """Every shard's per-paper results as `folder/<shard file>` (those already there are kept):
    Ray Data maps the missing shards through `PaperWorker` actors."""
    ray = session.ray
    folder.mkdir(parents=True, exist_ok=True)
    done = [folder / f for f in shards.files]
    todo = [k for k, p in enumerate(done) if not p.is_file()]
    if progress is not None:
        progress(sum(shards.papers[k] for k, p in enumerate(done) if p.is_file()))
    if not todo:
        return done
    actors = settings.actors or max(1, int(session.cpus // settings.actor_cpus) - 1)
    expected = {shards.files[k]: shards.papers[k] for k in todo}
    order = {}
    for k in todo:
        ids = pl.read_parquet(shards.paths[k], columns=["paper_id"])["paper_id"].to_list()
        order[shards.files[k]] = {pid: i for i, pid in enumerate(ids)}
    ds = ray.data.read_parquet([str(shards.paths[k]) for k in todo], include_paths=True).select_columns(
        ["paper_id", "title", "abstract", "full_text", "path"])  # Ray pushes the projection into the read
    ds = ds.map_batches(
        PaperWorker, fn_constructor_args=(config, str(index_dir), max(1, int(settings.actor_cpus))),
        batch_size=settings.batch_papers, batch_format="pyarrow", compute=ray.data.ActorPoolStrategy(size=actors),
        num_cpus=settings.actor_cpus, num_gpus=settings.actor_gpus or None)  # actors restart, batches retry (defaults)
    pending: dict[str, list[Any]] = {}
    got: dict[str, int] = {}
    import pyarrow as pa
    import pyarrow.parquet as pq

    for batch in ds.iter_batches(batch_size=None, batch_format="pyarrow"):
        paths = batch.column("path").to_pylist()
        for name in sorted({os.path.basename(p) for p in paths}):
            mask = pa.array([os.path.basename(p) == name for p in paths])
            part = batch.filter(mask).drop_columns(["path"])
            pending.setdefault(name, []).append(part)
            got[name] = got.get(name, 0) + part.num_rows
            if progress is not None:
                progress(part.num_rows)
            if got[name] == expected[name]:
                whole = pa.concat_tables(pending.pop(name))
                rank = [order[name][p] for p in whole.column("paper_id").to_pylist()]
                whole = whole.take(pa.array(np.argsort(rank, kind="stable")))
                with atomic_path(folder / name) as tmp:
                    pq.write_table(whole, tmp)
    missing = [n for n in expected if not (folder / n).is_file()]
    if missing:
        raise GraftError(f"the per-paper stage ended without {len(missing)} shard(s), e.g. {missing[0]}")
    return done


def read_paper_work(files: list[Path], config: BuildConfig) -> Any:
    """The per-paper results of every shard in order, as the local build's `PaperWork`."""
    import pyarrow.parquet as pq

    ids: list[str] = []
    facets: list[dict[str, list[str]]] = []
    vecs, titles, papers, context = [], [], [], []
    stats: dict[str, int] = {}
    meta: dict[str, Any] = {}
    for f in files:
        t = pq.read_table(f)
        meta = json.loads(t.column("meta")[0].as_py()) if t.num_rows else meta
        dim = int(meta.get("dim", 0))
        read = (t.column("context_vectors").to_pylist() if "context_vectors" in t.column_names
                else [b""] * t.num_rows)
        for pid, items, iv, tv, pv, counts, cv in zip(*(t.column(c).to_pylist() for c in (
                "paper_id", "items", "item_vectors", "title_vector", "paper_vector", "counts")), read):
            ids.append(pid)
            facets.append({facet: [] for facet in FACETS})
            for facet, _, text in json.loads(items):  # in facets_table's order: facet, then item
                facets[-1][facet].append(text)
            vecs.append(np.frombuffer(iv, dtype=np.float32).reshape(-1, dim))
            context.append(np.frombuffer(cv, dtype=np.float32).reshape(-1, dim) if cv else np.zeros_like(vecs[-1]))
            if tv:
                titles.append(np.frombuffer(tv, dtype=np.float32))
            if pv:
                papers.append(np.frombuffer(pv, dtype=np.float32))
            for k, v in json.loads(counts).items():
                stats[k] = stats.get(k, 0) + v
    dim = int(meta.get("dim", 0))
    return PaperWork(
        table=facets_table(ids, facets), alone=np.concatenate(vecs) if vecs else np.zeros((0, dim), np.float32),
        titles=np.stack(titles) if config.title_weight > 0 and titles else None,
        papers=np.stack(papers) if config.paper_embeddings and papers else None,
        context=(np.concatenate(context) if context else np.zeros((0, dim), np.float32))
        if config.item_context == "late" else None,
        extractor_stats=stats, model=str(meta.get("model", config.embedding_model)),
        backend=str(meta.get("backend", "torch")))


# ---- citation and graph stages ------------------------------------------------------------------


def _graph_rows(items: Any, score: sp.csr_matrix, links: sp.csr_matrix, params: Any, start: int, stop: int,
                ann: bytes | None) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    from graft.ann import searcher_from_bytes
    from graft.edges import facet_graph_rows

    searcher = searcher_from_bytes(items.pooled, params.candidates, ann) if ann is not None else None
    return facet_graph_rows(items, score, links, params, start, stop, searcher=searcher)


def ray_graph_engine(session: Session, cache: Path, settings: RaySettings) -> Any:
    """The `graphbuild.build.GraphEngine` whose counts and graphs are Ray tasks over row ranges."""
    ray = session.ray
    count_task = ray.remote(max_retries=3)(link_count_rows)
    graph_task = ray.remote(max_retries=3)(_graph_rows)
    parts = settings.graph_tasks or 2 * session.cpus

    def signals(a: sp.csr_matrix, rescale: str, partners: int = 0) -> CitationSignals:
        n = a.shape[0]
        a32 = sp.csr_matrix(a, dtype=np.float32)
        a_ref, at_ref = ray.put(a32), ray.put(sp.csr_matrix(a32.T))
        step = max(1, -(-n // parts))  # at least `parts` tasks, none producing more than a count block
        ranges = [(s, min(e, s + step)) for b, e in count_blocks(a32) for s in range(b, e, step)]
        blocks = ray.get([count_task.remote(a_ref, at_ref, s, e, partners) for s, e in ranges])
        if not blocks:
            return citation_signals(a, rescale, partners=partners)
        counts = (sp.vstack([b[0] for b in blocks]).tocsr(), sp.vstack([b[1] for b in blocks]).tocsr())
        return citation_signals(a, rescale, counts=counts, partners=partners)

    put: dict[int, Any] = {}  # the score and link matrices, shared by the four facets: put once

    def one_graph(facet: str, items: Any, score: sp.csr_matrix, links: sp.csr_matrix, params: Any, *,
                  progress: Any = None, searcher: Any = None) -> sp.csr_matrix:
        """A facet's graph from Ray tasks over row ranges, kept in INDEX/cache/ray/graph once made."""
        from graft.edges import graph_from_rows, graph_row_ranges

        kept = cache / "graph" / f"{facet}.npz"
        n = items.n
        if kept.is_file():
            graph = sp.load_npz(kept).tocsr()
        else:
            for m in (score, links):
                if id(m) not in put:
                    put[id(m)] = ray.put(sp.csr_matrix(m))
            ann = ray.put(searcher.to_bytes() if searcher is not None else None)
            items_ref = ray.put(items)
            pieces = ray.get([graph_task.remote(items_ref, put[id(score)], put[id(links)], params, s, e, ann)
                              for s, e in graph_row_ranges(n, params, parts)])
            graph = graph_from_rows(n, pieces)
            kept.parent.mkdir(parents=True, exist_ok=True)
            with atomic_path(kept, ".npz") as tmp:
                sp.save_npz(tmp, graph)
        if progress is not None:
            progress(n)
        return graph

    return GraphEngine("ray", signals, one_graph)


# ---- the build ----------------------------------------------------------------------------------


def build_index_ray(corpus_path: str | Path | None, out: str | Path, config: BuildConfig | None = None, *,
                    settings: RaySettings | None = None, reporter: Reporter | None = None,
                    fresh: bool = False, on_note: Callable[[str], None] | None = None) -> Any:
    """Build a GRAFT index with the Ray engine (stages in the module docstring).

    Args:
        corpus_path: as `graphbuild.build.build_index`.
        out: index directory; INDEX/cache/ray keeps the finished stages for a rerun.
        settings: cluster address, shard and batch sizes, actors.
        fresh: drop INDEX/cache/ray first (everything is recomputed).
        on_note: called with what the rebuild does with the later stages of the index.
    Returns:
        the `BuildSummary` of `graphbuild.build.build_index`.
    """
    import shutil

    config = config or BuildConfig()
    settings = settings or RaySettings()
    reporter = reporter or Reporter(quiet=True)
    out = Path(out)
    check_out(out)
    out.mkdir(parents=True, exist_ok=True)
    cache = out / "cache" / "ray"
    if fresh:
        shutil.rmtree(cache, ignore_errors=True)
    plan = plan_rebuild(out)
    message = plan.message(out)
    if message and on_note is not None:
        on_note(message)
    with index_lock(out, "graft build"):
        with reporter.stage("shards", unit="papers") as adv:
            shards = write_shards(corpus_path, cache / "shards", skip_bad=config.skip_bad, limit=config.limit,
                                  shard_papers=settings.shard_papers, progress=adv)
        # the finished per-paper and graph stages are this build's only for the same corpus and settings
        signature = {"config": config_to_dict(config), "corpus": shards.content_hash, "files": shards.files}
        stamp = cache / "settings.json"
        if not stamp.is_file() or read_json(stamp) != signature:
            for sub in ("papers", "graph"):
                shutil.rmtree(cache / sub, ignore_errors=True)
            write_json(stamp, signature)
        session = Session(settings)
        try:
            with reporter.stage("papers", total=shards.n, unit="papers") as adv:
                files = papers_stage(session, shards, cache / "papers", config, settings, out, progress=adv)
            work = read_paper_work(files, config)
            corpus = shards.corpus()
            engine = ray_graph_engine(session, cache, settings)
            summary = finish_index(out, corpus, shards.content_hash, corpus_path, config, reporter, work, plan, engine,
                                   extra={"ray": {"address": settings.address or "local", "cpus": session.cpus,
                                                  "shards": len(shards.files)}})
        finally:
            session.close()
        shutil.rmtree(cache / "graph", ignore_errors=True)  # written into the index; papers and shards are kept
        return summary
