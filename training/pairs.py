"""Distillation pairs: the facet graph's edges turned into (pseudo-query -> DocID) examples.

For an edge i -> j of facet f, the source is one of i's facet-f items (its text is the
pseudo-query) and the target a DocID of j in facet f. Two samplers:

- `naive_pairs`: every edge and every source item. Each edge gives max(m_i, d_j) pairs, cycling
  i's m_i items against j's d_j DocIDs, so every source item and every DocID of j is used once per
  edge (a deterministic choice; the full cross product would multiply the data for no coverage).
  Papers without incoming edges are never targets: ~16% of papers are unlearnable (GRAFT paper).
- `coverage_pairs` (GRAFT's coverage-aware distillation), rules recorded per pair:
  `edge_sample`: up to N out-edges per source paper and facet, sampled without replacement with
  probability proportional to weight; `floor`: every DocID of a paper with an incoming edge is
  topped up to K_min targets from its strongest incoming edges; `reverse`: a DocID whose papers
  have no incoming edge gets K_min pairs from their strongest outgoing edges, flipped (source = the
  neighbour's item); `self`: last resort for a paper with no edge at all in the facet (source =
  its own item, weight 0). Every DocID — so every paper — is then a target at least K_min times.

Coverage is counted on DocIDs: a paper is covered in facet f when one of its facet-f DocIDs is a
target (decoding that DocID returns the paper, also when the pair was made for another paper
sharing it); the headline paper share asks for every facet (`coverage_report`).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

import numpy as np
import polars as pl
import scipy.sparse as sp

from graft.config import config_from_dict, config_to_dict, type_problems
from graft.docids import MAX_TOKENS, DocidTable, load_or_build_docids, tokenizer_info
from graft.errors import ConfigError
from graft.facets import FACETS
from graft.manifest import read_manifest, record_stage
from graft.store import write_parquet

RULES = ("naive", "edge_sample", "floor", "reverse", "self")
SAMPLINGS = ("coverage", "naive")


@dataclass
class DistillConfig:
    """Settings of the distillation data, recorded in manifest.json."""

    sampling: str = "coverage"  # "coverage" (GRAFT's coverage-aware sampling) or "naive" (every edge, every item)
    max_edges_per_source: int = 10  # N: out-edges sampled per source paper and facet, ∝ weight (GRAFT paper)
    k_min: int = 3  # K_min: times every target DocID appears at least (GRAFT paper)
    seed: int = 0  # seed of the numpy Generator behind edge sampling and item rotation
    max_tokens: int = MAX_TOKENS  # tokens per DocID (GRAFT paper: 12)

    def __post_init__(self) -> None:
        problems = type_problems(self)
        if problems:
            raise ConfigError("DistillConfig: " + "; ".join(problems))
        if self.seed < 0:  # numpy's Generator takes no negative seed
            raise ConfigError(f"seed must be >= 0, got {self.seed}")
        if self.sampling not in SAMPLINGS:
            raise ConfigError(f"sampling '{self.sampling}' is unknown; allowed: {list(SAMPLINGS)}")
        if self.max_edges_per_source < 1 or self.k_min < 1 or self.max_tokens < 1:
            raise ConfigError(f"max_edges_per_source, k_min and max_tokens must be >= 1, got "
                             f"{self.max_edges_per_source}, {self.k_min}, {self.max_tokens}")

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> DistillConfig:
        return config_from_dict(cls, data)


class GraphSource(Protocol):
    """What the samplers read; `graft.Index` is one."""

    paper_ids: list[str]
    facets: pl.DataFrame  # paper_id, facet, item_idx, text
    graphs: dict[str, sp.csr_matrix]  # facet -> n x n top-K out-edge weights


@dataclass
class _Facet:
    """One facet's items and DocIDs in node order, CSR-style (`*_start` has n + 1 entries)."""

    name: str
    graph: sp.csr_matrix
    item_start: np.ndarray  # items of paper i: positions item_start[i]:item_start[i+1]
    item_idx: np.ndarray
    item_text: pl.Series
    doc_start: np.ndarray  # distinct DocIDs of paper j: doc_ids[doc_start[j]:doc_start[j+1]]
    doc_ids: np.ndarray
    docid_text: pl.Series  # indexed by docid_id
    n_docids: int

    @property
    def m(self) -> np.ndarray:
        return np.diff(self.item_start)

    @property
    def d(self) -> np.ndarray:
        return np.diff(self.doc_start)

    def usable_edges(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(rows, cols, weights) of the edges whose source has items and target has DocIDs."""
        g = self.graph.tocsr()
        rows = np.repeat(np.arange(g.shape[0]), np.diff(g.indptr))
        cols, w = g.indices.astype(np.int64), g.data.astype(np.float64)
        keep = (self.m[rows] > 0) & (self.d[cols] > 0) & (rows != cols)
        return rows[keep], cols[keep], w[keep]


def _facet_views(source: GraphSource, docids: DocidTable) -> list[_Facet]:
    n = len(source.paper_ids)
    row_of = pl.DataFrame({"paper_id": source.paper_ids, "row": np.arange(n, dtype=np.int64)})
    facets = (source.facets.select(["paper_id", "facet", "item_idx", "text"])
              .with_columns(pl.col("item_idx").cast(pl.Int32))
              .join(docids.items, on=["paper_id", "facet", "item_idx"], how="left")
              .join(row_of, on="paper_id", how="inner"))
    views = []
    for f in [f for f in FACETS if f in source.graphs] + sorted(set(source.graphs) - set(FACETS)):
        items = facets.filter(pl.col("facet") == f).sort(["row", "item_idx"])
        rows = items["row"].to_numpy()
        item_start = np.concatenate([[0], np.cumsum(np.bincount(rows, minlength=n))])
        docs = (items.filter(pl.col("docid_id").is_not_null()).select(["row", "docid_id"])
                .unique(maintain_order=True))  # a paper's DocIDs in item order, each once
        doc_start = np.concatenate([[0], np.cumsum(np.bincount(docs["row"].to_numpy(), minlength=n))])
        table = docids.facet(f)
        views.append(_Facet(f, source.graphs[f], item_start, items["item_idx"].to_numpy(), items["text"],
                            doc_start, docs["docid_id"].to_numpy().astype(np.int64), table["docid"],
                            table.height))
    return views


class _Pairs:
    """Column buffers of pairs as node/item/DocID positions, turned into a table at the end."""

    def __init__(self) -> None:
        self.parts: list[dict[str, np.ndarray]] = []

    def add(self, rule: str, src: np.ndarray, pos: np.ndarray, tgt: np.ndarray, doc: np.ndarray,
            w: np.ndarray) -> None:
        if len(src):
            self.parts.append({"src": np.asarray(src, np.int64), "pos": np.asarray(pos, np.int64),
                               "tgt": np.asarray(tgt, np.int64), "doc": np.asarray(doc, np.int64),
                               "w": np.asarray(w, np.float64), "rule": np.full(len(src), RULES.index(rule))})

    def counts(self, n_docids: int) -> np.ndarray:
        docs = [p["doc"] for p in self.parts]
        return np.bincount(np.concatenate(docs), minlength=n_docids) if docs else np.zeros(n_docids, np.int64)

    def frame(self, view: _Facet, paper_ids: pl.Series) -> pl.DataFrame:
        cols = {k: np.concatenate([p[k] for p in self.parts]) if self.parts else np.empty(0, np.int64)
                for k in ("src", "pos", "tgt", "doc", "w", "rule")}
        return pl.DataFrame({
            "facet": pl.Series([view.name] * len(cols["src"]), dtype=pl.Utf8),
            "source_paper": paper_ids.gather(cols["src"]),
            "source_item_idx": pl.Series(view.item_idx[cols["pos"]], dtype=pl.Int32),
            "source_text": view.item_text.gather(cols["pos"]),
            "target_paper": paper_ids.gather(cols["tgt"]),
            "target_docid_id": pl.Series(cols["doc"], dtype=pl.Int32),
            "target_docid": view.docid_text.gather(cols["doc"]),
            "weight": pl.Series(cols["w"], dtype=pl.Float32),
            "rule": pl.Series(np.asarray(RULES, dtype=object)[cols["rule"].astype(np.int64)].tolist(),
                              dtype=pl.Utf8),
        })


def _within_group_rank(keys: np.ndarray) -> np.ndarray:
    """For each element, how many earlier elements share its key (0, 1, 2, ... per key)."""
    order = np.argsort(keys, kind="stable")
    sorted_keys = keys[order]
    first = np.searchsorted(sorted_keys, sorted_keys, side="left")
    rank = np.empty(len(keys), np.int64)
    rank[order] = np.arange(len(keys)) - first
    return rank


def _empty_frame() -> pl.DataFrame:
    return pl.DataFrame(schema={"facet": pl.Utf8, "source_paper": pl.Utf8, "source_item_idx": pl.Int32,
                                "source_text": pl.Utf8, "target_paper": pl.Utf8, "target_docid_id": pl.Int32,
                                "target_docid": pl.Utf8, "weight": pl.Float32, "rule": pl.Utf8})


def naive_pairs(source: GraphSource, docids: DocidTable) -> pl.DataFrame:
    """Every edge, every source item (see the module docstring for how targets are chosen).

    Args:
        source: paper ids, facets table and facet graphs (a `graft.Index`).
        docids: the index's DocIDs.
    Returns:
        the pairs table (rule "naive"), facet by facet, edges in graph order.
    """
    paper_ids = pl.Series(source.paper_ids, dtype=pl.Utf8)
    frames = [_empty_frame()]
    for view in _facet_views(source, docids):
        rows, cols, w = view.usable_edges()
        m, d = view.m[rows], view.d[cols]
        cnt = np.maximum(m, d)
        e = np.repeat(np.arange(len(rows)), cnt)
        k = np.arange(len(e)) - np.repeat(np.cumsum(cnt) - cnt, cnt)
        buf = _Pairs()
        buf.add("naive", rows[e], view.item_start[rows[e]] + k % m[e], cols[e],
                view.doc_ids[view.doc_start[cols[e]] + k % d[e]], w[e])
        frames.append(buf.frame(view, paper_ids))
    return pl.concat(frames)


def coverage_pairs(source: GraphSource, docids: DocidTable, config: DistillConfig | None = None) -> pl.DataFrame:
    """Coverage-aware pairs: edge-importance sampling, the K_min floor and the reverse fallback.

    Args:
        source: paper ids, facets table and facet graphs (a `graft.Index`).
        docids: the index's DocIDs.
        config: N, K_min and the seed.
    Returns:
        the pairs table, with the rule that made each pair; every DocID of every facet is a target
        at least K_min times.
    """
    config = config or DistillConfig()
    rng = np.random.default_rng(config.seed)
    paper_ids = pl.Series(source.paper_ids, dtype=pl.Utf8)
    frames = [_empty_frame()]
    for view in _facet_views(source, docids):
        buf = _Pairs()
        rows, cols, w = view.usable_edges()
        # Random starting points so the first item / DocID of every paper is not favoured.
        item_off = rng.integers(0, np.maximum(view.m, 1))
        doc_off = rng.integers(0, np.maximum(view.d, 1))
        _edge_sample(view, buf, rows, cols, w, item_off, doc_off, config, rng)
        _floor_and_reverse(view, buf, rows, cols, w, item_off, config)
        frames.append(buf.frame(view, paper_ids))
    return pl.concat(frames)


def _edge_sample(view: _Facet, buf: _Pairs, rows: np.ndarray, cols: np.ndarray, w: np.ndarray,
                 item_off: np.ndarray, doc_off: np.ndarray, config: DistillConfig,
                 rng: np.random.Generator) -> None:
    """Up to N out-edges per source, without replacement, with probability ∝ weight.

    Efraimidis & Spirakis (2006): keeping the N largest keys log(u)/w, u ~ U(0,1), is exactly
    successive sampling without replacement ∝ w, and vectorises over the whole CSR at once.
    """
    pos = w > 0  # a zero-weight edge has probability 0
    rows, cols, w = rows[pos], cols[pos], w[pos]
    with np.errstate(divide="ignore"):
        key = np.log(rng.random(len(w))) / w
    order = np.lexsort((-key, rows))  # by source, then key descending
    rank = _within_group_rank(rows[order])
    chosen = order[rank < config.max_edges_per_source]
    src, tgt, k = rows[chosen], cols[chosen], rank[rank < config.max_edges_per_source]
    pos_item = view.item_start[src] + (item_off[src] + k) % view.m[src]
    c = _within_group_rank(tgt)  # how often j was already a target: cycle through j's DocIDs
    doc = view.doc_ids[view.doc_start[tgt] + (doc_off[tgt] + c) % view.d[tgt]]
    buf.add("edge_sample", src, pos_item, tgt, doc, w[chosen])


def _floor_and_reverse(view: _Facet, buf: _Pairs, rows: np.ndarray, cols: np.ndarray, w: np.ndarray,
                       item_off: np.ndarray, config: DistillConfig) -> None:
    """Top every DocID up to K_min targets: from incoming edges (floor), else flipped outgoing edges
    (reverse), else the paper's own items (self)."""
    n = len(view.item_start) - 1
    counts = buf.counts(view.n_docids)
    if not (counts < config.k_min).any():
        return
    reachable = np.bincount(cols, minlength=n) > 0
    owner = np.repeat(np.arange(n), view.d)  # owner[t] = paper of doc_ids[t]
    by_doc = np.argsort(view.doc_ids, kind="stable")
    doc_first = np.searchsorted(view.doc_ids[by_doc], np.arange(view.n_docids + 1))
    # Incoming / outgoing edges of a node, strongest first (ties by the other end, for determinism).
    by_in = np.lexsort((rows, -w, cols))
    in_start = np.searchsorted(cols[by_in], np.arange(n + 1))
    by_out = np.lexsort((cols, -w, rows))
    out_start = np.searchsorted(rows[by_out], np.arange(n + 1))

    for stage in ("floor", "reverse"):  # the floor first: the fallback only fills what it cannot
        out: dict[str, list[tuple[int, int, int, int, float]]] = {}
        for did in np.flatnonzero(counts < config.k_min):
            owners = owner[by_doc[doc_first[did]:doc_first[did + 1]]]
            rule = stage
            if stage == "floor":
                owners = owners[reachable[owners]]
                if not len(owners):
                    continue
                edges = np.concatenate([by_in[in_start[j]:in_start[j + 1]] for j in owners])
                edges = edges[np.lexsort((rows[edges], -w[edges]))][: config.k_min]
                # (paper giving the source item, paper the DocID is credited to, weight)
                plan = [(int(rows[e]), int(cols[e]), float(w[e])) for e in edges]
            else:
                edges = np.concatenate([by_out[out_start[j]:out_start[j + 1]] for j in owners])
                edges = edges[np.lexsort((cols[edges], -w[edges]))][: config.k_min]
                plan = [(int(cols[e]), int(rows[e]), float(w[e])) for e in edges]  # flipped
                if not plan:  # no edge at all in this facet: the paper's own items are the queries
                    rule, plan = "self", [(int(j), int(j), 0.0) for j in owners]
            need = config.k_min - int(counts[did])
            for t in range(need):  # cycle the plan; each pass moves to the source's next item
                i, j, wt = plan[t % len(plan)]
                item = int(view.item_start[i] + (item_off[i] + t // len(plan)) % view.m[i])
                out.setdefault(rule, []).append((i, item, j, int(did), wt))
            counts[did] += need
        for rule, recs in out.items():
            src, pos, tgt, doc, wt = (np.array(c) for c in zip(*recs))
            buf.add(rule, src, pos, tgt, doc, wt)


def make_pairs(source: GraphSource, docids: DocidTable, config: DistillConfig | None = None) -> pl.DataFrame:
    """The pairs of `config.sampling` ("coverage" or "naive")."""
    config = config or DistillConfig()
    return coverage_pairs(source, docids, config) if config.sampling == "coverage" else naive_pairs(source, docids)


# ---- coverage, artefacts, dry run --------------------------------------------------------------
def coverage_report(pairs: pl.DataFrame, docids: DocidTable, n_papers: int) -> dict[str, Any]:
    """How much of the index the pairs can teach: papers and DocIDs that appear as a target.

    A paper is covered in facet f when one of its facet-f DocIDs is a target (decoding that DocID
    returns it). Decoding runs per facet, so the headline paper share asks for every facet in
    which the paper has a DocID; `papers_any_share` asks for at least one.

    Args:
        pairs: a pairs table.
        docids: the DocIDs the pairs target.
        n_papers: papers in the index (the denominator of the paper shares).
    Returns:
        pairs; papers_covered / papers_share (every facet), papers_any_covered / papers_any_share;
        docids_covered / docids_total / docids_share; the fewest times a DocID is a target
        (`min_target_count`, 0 when some DocID never is); pair counts per rule; per-facet figures.
    """
    targets = (pairs.group_by(["facet", "target_docid_id"]).len()
               .rename({"target_docid_id": "docid_id"}).with_columns(pl.col("docid_id").cast(pl.Int32)))
    table = (docids.docids.select(["facet", "docid_id", "paper_ids"])
             .join(targets, on=["facet", "docid_id"], how="left").with_columns(pl.col("len").fill_null(0)))
    per_paper_facet = (table.explode("paper_ids").rename({"paper_ids": "paper_id"})
                       .group_by(["facet", "paper_id"]).agg((pl.col("len") > 0).any().alias("covered")))
    per_paper = per_paper_facet.group_by("paper_id").agg(pl.col("covered").all().alias("all"),
                                                         pl.col("covered").any().alias("any"))

    def share(a: int, b: int) -> float:
        return a / b if b else 0.0

    per_facet = {}
    for f in docids.facet_names:
        t = table.filter(pl.col("facet") == f)
        p = per_paper_facet.filter(pl.col("facet") == f)
        n_cov, p_cov = int((t["len"] > 0).sum()), int(p["covered"].sum())
        per_facet[f] = {"pairs": int((pairs["facet"] == f).sum()),
                        "docids_covered": n_cov, "docids_total": t.height, "docids_share": share(n_cov, t.height),
                        "papers_covered": p_cov, "papers_total": p.height, "papers_share": share(p_cov, p.height)}
    n_all, n_any, n_docs = int(per_paper["all"].sum()), int(per_paper["any"].sum()), int((table["len"] > 0).sum())
    return {
        "pairs": pairs.height,
        "papers_covered": n_all,
        "papers_total": n_papers,
        "papers_share": share(n_all, n_papers),
        "papers_any_covered": n_any,
        "papers_any_share": share(n_any, n_papers),
        "docids_covered": n_docs,
        "docids_total": table.height,
        "docids_share": share(n_docs, table.height),
        "min_target_count": int(table["len"].min()) if table.height else 0,
        "by_rule": {r: int((pairs["rule"] == r).sum()) for r in RULES if (pairs["rule"] == r).any()},
        "per_facet": per_facet,
    }


def pairs_path(index_dir: str | Path) -> Path:
    return Path(index_dir) / "train" / "pairs.parquet"


def write_pairs(index_dir: str | Path, pairs: pl.DataFrame, config: DistillConfig,
                report: dict[str, Any] | None = None) -> Path:
    """Write `train/pairs.parquet` atomically and record a `pairs` stage (config, coverage).

    Raises:
        IndexFormatError: the directory is not a built index.
    """
    manifest = read_manifest(index_dir, require=("build",))
    path = pairs_path(index_dir)
    write_parquet(path, pairs)
    counts = {k: v for k, v in (report or {"pairs": pairs.height}).items() if k != "per_facet"}
    record_stage(index_dir, manifest, "pairs", config=config_to_dict(config), counts=counts, timings={})
    return path


def build_pairs(index_dir: str | Path, tokenizer: Any, config: DistillConfig | None = None,
                ) -> tuple[DocidTable, pl.DataFrame, dict[str, Any]]:
    """What training needs: DocIDs (made and saved unless present), pairs (saved) and their coverage.

    Args:
        index_dir: a built index.
        tokenizer: the base model's tokenizer.
        config: sampling settings.
    Returns:
        (DocIDs, pairs, coverage report).
    Raises:
        IndexFormatError: the directory is not a built index.
    """
    from graft.index import Index

    config = config or DistillConfig()
    index = Index.open(index_dir)
    # every input read first: a damaged file is refused (naming it) before DocIDs or pairs are written
    _ = index.papers, index.facets, index.graphs
    docids = load_or_build_docids(index_dir, tokenizer, max_tokens=config.max_tokens)
    pairs = make_pairs(index, docids, config)
    report = coverage_report(pairs, docids, index.n)
    write_pairs(index_dir, pairs, config, report)
    return docids, pairs, report


def dry_run(index_dir: str | Path, tokenizer: Any, config: DistillConfig | None = None) -> dict[str, Any]:
    """Coverage of naive vs coverage-aware pairs, without writing anything (`graft train --dry-run`).

    Args:
        index_dir: a built index.
        tokenizer: the base model's tokenizer (saved DocIDs are reused when they match it).
        config: N, K_min, seed and max_tokens for the coverage-aware sampler.
    Returns:
        {"index", "tokenizer", "config", "docids": per-facet DocID counts (shared ones included),
        "naive": report, "coverage": report} — reports as `coverage_report`.
    Raises:
        IndexFormatError: the directory is not a built index.
    """
    from graft.index import Index

    config = config or DistillConfig()
    index = Index.open(index_dir)
    docids = load_or_build_docids(index_dir, tokenizer, max_tokens=config.max_tokens, write=False)
    return {
        "index": str(index_dir),
        "tokenizer": tokenizer_info(tokenizer),
        "config": config_to_dict(config),
        "docids": docids.meta.get("counts", {}),
        "naive": coverage_report(naive_pairs(index, docids), docids, index.n),
        "coverage": coverage_report(coverage_pairs(index, docids, config), docids, index.n),
    }


def print_coverage_table(report: dict[str, Any], console: Any = None) -> None:
    """Print a `dry_run` report as a rich table: naive vs coverage-aware.

    Args:
        report: the dict `dry_run` returns.
        console: a `rich.console.Console`; a new one by default.
    """
    from rich.console import Console
    from rich.table import Table

    console = console or Console()
    naive, cov = report["naive"], report["coverage"]
    table = Table(title=f"Distillation coverage — {report.get('index', '')}")
    table.add_column("")
    table.add_column("naive", justify="right")
    table.add_column("coverage-aware", justify="right")

    def share(r: dict[str, Any], what: str) -> str:
        return f"{r[f'{what}_share']:.2%} ({r[f'{what}_covered']:,}/{r[f'{what}_total']:,})"

    table.add_row("papers, every facet", share(naive, "papers"), share(cov, "papers"))
    table.add_row("papers, any facet", f"{naive['papers_any_share']:.2%}", f"{cov['papers_any_share']:.2%}")
    table.add_row("DocIDs as target", share(naive, "docids"), share(cov, "docids"))
    for f in cov["per_facet"]:
        for what, label in (("papers", "papers"), ("docids", "DocIDs")):
            table.add_row(f"  {f} {label}", share(naive["per_facet"][f], what), share(cov["per_facet"][f], what))
    table.add_row("pairs", f"{naive['pairs']:,}", f"{cov['pairs']:,}")
    for rule in RULES:
        if rule in naive["by_rule"] or rule in cov["by_rule"]:
            table.add_row(f"  rule {rule}", f"{naive['by_rule'].get(rule, 0):,}", f"{cov['by_rule'].get(rule, 0):,}")
    table.add_row("fewest targets per DocID", str(naive["min_target_count"]), str(cov["min_target_count"]))
    console.print(table)
    shared = {f: c.get("shared_docids", 0) for f, c in report.get("docids", {}).items()}
    if shared:
        console.print("DocIDs shared by several papers: " + ", ".join(f"{f} {v:,}" for f, v in shared.items()))
