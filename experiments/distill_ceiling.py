"""What a generative retriever could at best recover of the graph teacher: the memorisation ceiling
of a set of distillation pairs, measured on a split's in-corpus queries without training anything.

GRAFT learns pairs (source item of paper q -> DocID of a neighbour j). A model that memorised its
pairs perfectly would, for query q, decode in facet f exactly the papers of the DocIDs it was
trained to produce from q's items, and nothing else. This script builds that list per facet
(ranked by how often the pair occurs, then by the symmetrised edge weight, then by row: the most
favourable order a model could learn), fuses the four lists as GRAFT does (graph-weighted RRF,
or plain RRF) and scores Recall@k against the split's gold, next to the graph teacher on the same
queries. Each pair set is made exactly as `graft train` makes it (`training.pairs.make_pairs`).

Rows:
- teacher                       the graph teacher (two hops, RRF over facets): the target
- teacher + citation channel    the same with the citation channel (`teacher-cite`)
- every symmetric edge          each facet list = all of q's neighbours in max(W_f, W_f^T), by
                                weight: graph-RRF drops every candidate without a direct edge to
                                q, so this is what a model that returned all of them would reach
- pairs: SAMPLING N=..          the memorisation ceiling of one pair set (graph-RRF, plain RRF, and
                                graph-walk: the graph-RRF candidates walked two hops by the teacher;
                                graph-RRF and graph-walk again with the citation channel)

    python -m experiments.distill_ceiling --split SPLITDIR [--index SPLITDIR/index] \\
        [--base-model smollm2-135m] [--max-edges 10,20] [--part test] [--name cs768]

Writes docs/results/distill_ceiling_{name}.{md,json}. Needs the base model's tokenizer only (the
DocIDs are the index's when they match it, else made in memory).
"""

from __future__ import annotations

import datetime as dt
import sys
import time
from collections import Counter, defaultdict
from pathlib import Path
from typing import Any

import numpy as np

from experiments.common import open_split_queries, split_parser, write_tables


def facet_lists_from_pairs(pairs: Any, docids: Any, row_of: dict[str, int], walk: dict[str, Any],
                           queries: set[str]) -> dict[str, dict[str, list[int]]]:
    """Per query paper and facet, the corpus rows a perfect memoriser of `pairs` would decode.

    A DocID decodes to every paper sharing it. Rows are ranked by pair count (descending), then by
    the symmetrised edge weight to the query (descending), then by row; the query itself is left out.

    Args:
        pairs: a pairs table (`training.pairs` schema).
        docids: the index's `DocidTable` (DocID -> papers).
        row_of: paper id -> corpus row.
        walk: facet -> symmetrised n x n facet graph (edge weights to the query).
        queries: the query paper ids to build lists for.
    Returns:
        query paper id -> facet -> ranked rows.
    """
    import polars as pl

    owners = {f: docids.facet(f)["paper_ids"].to_list() for f in docids.facet_names}
    mine = pairs.filter(pl.col("source_paper").is_in(sorted(queries)))
    counts: dict[str, dict[str, Counter]] = defaultdict(lambda: defaultdict(Counter))
    for facet, source, doc in mine.select(["facet", "source_paper", "target_docid_id"]).iter_rows():
        for paper in owners[facet][doc]:
            counts[source][facet][row_of[paper]] += 1
    out: dict[str, dict[str, list[int]]] = {}
    for source, per_facet in counts.items():
        q = row_of[source]
        out[source] = {}
        for facet, cnt in per_facet.items():
            w = walk[facet][q]
            weight = dict(zip(w.indices.tolist(), w.data.tolist()))
            ranked = sorted((c for c in cnt if c != q), key=lambda c: (-cnt[c], -weight.get(c, 0.0), c))
            out[source][facet] = ranked
    return out


def fused_rows(lists: dict[str, list[int]], q: int, walk: dict[str, Any], *, fusion: str,
               teacher: Any = None, links: Any = None, citation_weight: float = 0.0) -> list[int]:
    """GRAFT's fusion of per-facet lists of corpus rows, as `graft.candidates` fuses a corpus paper's:
    `graph-rrf` (weights = symmetrised edges), `rrf`, or `graph-walk` (the graph-RRF candidates
    and weights walked by `teacher`, a `graft.teacher.GraphTeacher`; needed for it, and its config
    says whether the walk has the citation channel). With `citation_weight` W > 0 (and the citation
    `links`), graph-RRF and RRF get the citation channel (`graft.fusion.add_citation_run`)."""
    from eval.metrics import KS
    from graft.fusion import CITATION, add_citation_run, graph_rrf, rrf, support_rows

    runs = dict(lists)
    if fusion == "rrf":
        fused = rrf(runs)
        if citation_weight > 0:
            runs, _, _ = add_citation_run(runs, fused, links, citation_weight, exclude={q})
            fused = rrf(runs, weights={CITATION: citation_weight})
        return [int(x.doc) for x in fused]
    support = {}
    for facet, ranked in lists.items():
        row = walk[facet][q]
        weight = dict(zip(row.indices.tolist(), row.data.tolist()))
        support[facet] = {c: weight.get(c, 0.0) for c in ranked}
    if fusion == "graph-walk":
        n = next(iter(walk.values())).shape[0]
        fused, _ = teacher.retrieve(support_rows(support, n), exclude={q}, k=max(KS))
        return [int(c) for c, *_ in fused]
    fused = graph_rrf(runs, support).fused
    if citation_weight > 0:
        runs, support, _ = add_citation_run(runs, fused, links, citation_weight, support=support, exclude={q})
        fused = graph_rrf(runs, support).fused
    return [int(x.doc) for x in fused]


def mean_recalls(ranked: dict[str, list[int]], gold: dict[str, set[int]]) -> dict[str, float]:
    """Recall@k (every k of `eval.metrics.KS`) of ranked rows, averaged over the queries of `gold`."""
    from eval.metrics import KS, recall_at

    return {f"R@{k}": float(np.mean([recall_at(ranked.get(q, []), gold[q], k) for q in gold])) for k in KS}


def ceiling_recalls(lists: dict[str, dict[str, list[int]]], queries: list[Any], row_of: dict[str, int],
                    gold: dict[str, set[int]], walk: dict[str, Any], *, fusion: str,
                    teacher: Any = None, links: Any = None, citation_weight: float = 0.0) -> dict[str, float]:
    """`mean_recalls` of a perfect memoriser: each query's `facet_lists_from_pairs` lists, fused.

    Args:
        lists: query paper id -> facet -> ranked rows (`facet_lists_from_pairs`).
        queries: the queries (`qid`, `paper_id`); only those in `gold` count.
        row_of: paper id -> corpus row.
        gold: qid -> gold rows.
        walk: facet -> symmetrised facet graph.
        fusion / teacher / links / citation_weight: as `fused_rows`.
    """
    ranked = {q.qid: fused_rows(lists.get(q.paper_id, {}), row_of[q.paper_id], walk, fusion=fusion, teacher=teacher,
                                links=links, citation_weight=citation_weight)
              for q in queries if q.qid in gold}
    return mean_recalls(ranked, gold)


def pairs_ceiling(split_dir: Path, index_dir: Path, pairs: Any, queries: list[Any],
                  fusions: tuple[str, ...] = ("graph-rrf",)) -> dict[str, dict[str, float]]:
    """`ceiling_recalls` of a pair set (polars, `training.pairs` schema) on in-corpus `queries` of a
    split (gold: `incorpus/qrels.txt`) over the index at `index_dir`, per fusion."""
    from eval.trec import read_qrels
    from graft.docids import load_docids
    from graft.index import Index
    from graft.teacher import symmetrise

    idx = Index.open(index_dir)
    walk = symmetrise(idx.graphs)
    qrels = read_qrels(Path(split_dir) / "incorpus" / "qrels.txt")
    lists = facet_lists_from_pairs(pairs, load_docids(index_dir), idx.row_of, walk, {q.paper_id for q in queries})
    gold = {q.qid: {idx.row_of[p] for p in qrels[q.qid] if p in idx.row_of} for q in queries if qrels.get(q.qid)}
    return {fusion: ceiling_recalls(lists, queries, idx.row_of, gold, walk, fusion=fusion) for fusion in fusions}


def main(argv: list[str] | None = None) -> int:
    ap = split_parser(__doc__, table="distill_ceiling", part="test")
    ap.add_argument("--base-model", default="smollm2-135m", help="tokenizer of the DocIDs")
    ap.add_argument("--max-edges", default="10,20", help="comma-separated N of the coverage-aware pairs")
    args = ap.parse_args(argv)

    from eval.metrics import KS
    from eval.runner import corpus_name
    from graft.docids import load_or_build_docids
    from graft.facets import FACETS
    from graft.fusion import CITATION_WEIGHT
    from graft.teacher import TeacherConfig, symmetrise
    from training.base_models import load_tokenizer
    from training.pairs import DistillConfig, make_pairs

    opened = open_split_queries(args)
    split, index_dir, idx, queries, gold, rows = (opened.split, opened.index_dir, opened.index, opened.queries,
                                                  opened.gold, opened.rows)
    walk = symmetrise(idx.graphs)
    docids = load_or_build_docids(index_dir, load_tokenizer(args.base_model), write=False)

    table: list[dict[str, Any]] = []
    t0 = time.perf_counter()
    teacher = idx.teacher()
    cited = idx.teacher(TeacherConfig(citation_weight=CITATION_WEIGHT))  # with the citation channel
    ranked = {}
    for qid, q in rows.items():
        fused, _ = teacher.retrieve(teacher.node_rows(q), exclude={q}, k=max(KS))
        ranked[qid] = [c for c, *_ in fused]
    table.append({"system": "teacher", "fusion": "rrf (teacher)", "pairs": None, **mean_recalls(ranked, gold),
                  "seconds": round(time.perf_counter() - t0, 1)})
    t0 = time.perf_counter()
    ranked = {}
    for qid, q in rows.items():
        fused, _ = cited.retrieve(cited.node_rows(q), exclude={q}, k=max(KS))
        ranked[qid] = [c for c, *_ in fused]
    table.append({"system": "teacher + citation channel", "fusion": f"rrf, W = {CITATION_WEIGHT:g} (teacher-cite)",
                  "pairs": None, **mean_recalls(ranked, gold), "seconds": round(time.perf_counter() - t0, 1)})
    t0 = time.perf_counter()
    every = {}
    for qid, q in rows.items():
        lists = {}
        for f in FACETS:
            r = walk[f][q]
            order = np.lexsort((r.indices, -r.data))
            lists[f] = [int(c) for c in r.indices[order] if c != q]
        every[qid] = fused_rows(lists, q, walk, fusion="graph-rrf")
    table.append({"system": "every symmetric edge", "fusion": "graph-rrf", "pairs": None, **mean_recalls(every, gold),
                  "seconds": round(time.perf_counter() - t0, 1)})

    variants = [DistillConfig(sampling="coverage", max_edges_per_source=int(n))
                for n in args.max_edges.split(",") if n.strip()] + [DistillConfig(sampling="naive")]
    papers = {q.paper_id for q in queries}
    for config in variants:
        t0 = time.perf_counter()
        pairs = make_pairs(idx, docids, config)
        lists = facet_lists_from_pairs(pairs, docids, idx.row_of, walk, papers)
        label = (f"pairs: coverage-aware N={config.max_edges_per_source}" if config.sampling == "coverage"
                 else "pairs: naive (every edge)")
        for fusion in ("graph-rrf", "rrf", "graph-walk"):
            table.append({"system": label, "fusion": fusion, "pairs": pairs.height,
                          **ceiling_recalls(lists, queries, idx.row_of, gold, walk, fusion=fusion, teacher=teacher),
                          "seconds": round(time.perf_counter() - t0, 1)})
        for fusion in ("graph-rrf", "graph-walk"):
            table.append({"system": label, "fusion": f"{fusion} + citation channel (W = {CITATION_WEIGHT:g})",
                          "pairs": pairs.height,
                          **ceiling_recalls(lists, queries, idx.row_of, gold, walk, fusion=fusion, teacher=cited,
                                            links=idx.citation_links, citation_weight=CITATION_WEIGHT),
                          "seconds": round(time.perf_counter() - t0, 1)})
        print(f"{label}: {pairs.height:,} pairs", file=sys.stderr, flush=True)

    teacher_r20 = table[0]["R@20"]
    for row in table:
        row["R@20 / teacher"] = row["R@20"] / teacher_r20 if teacher_r20 else None
    name = args.name or corpus_name(split)
    command = "python -m experiments.distill_ceiling " + " ".join(argv if argv is not None else sys.argv[1:])
    meta = {"command": command, "date": dt.date.today().isoformat(), "corpus_hash": split.get("corpus_hash"),
            "index": str(index_dir), "queries": len(queries), "part": args.part,
            "tokenizer": Path(str(docids.meta.get("tokenizer", {}).get("name"))).name}
    lines = [f"# Memorisation ceiling of the distillation pairs — {name}", "",
             f"Command: `{command}`  ",
             f"Date: {meta['date']} · corpus hash `{str(meta['corpus_hash'])[:16]}` · {len(queries)} in-corpus "
             f"{args.part} queries · DocIDs of {meta['tokenizer']}", "",
             "| system | fusion | pairs | R@20 | R@50 | R@20 / teacher | seconds |",
             "|---|---|---:|---:|---:|---:|---:|"]
    for row in table:
        pairs_cell = f"{row['pairs']:,}" if row["pairs"] is not None else ""
        lines.append(f"| {row['system']} | {row['fusion']} | {pairs_cell} | {row['R@20']:.3f} | "
                     f"{row['R@50']:.3f} | {row['R@20 / teacher']:.2f} | {row['seconds']} |")
    lines += ["", "- ceiling: the recall of a model that decodes, for each query item, exactly the DocIDs "
              "its pairs taught it (ranked by pair count, then edge weight) and nothing else; a real "
              "model can exceed it only by returning papers it was never taught for this query",
              "- every symmetric edge: graph-RRF keeps only candidates with a direct edge to the query; "
              "this row returns all of them, ranked by edge weight",
              "- graph-walk: the graph-RRF candidates, weighted by their edges, walked two hops by the graph "
              "teacher (`graft query --fusion graph-walk`): it also returns their neighbours",
              "- citation channel: the papers that cite or are cited by the first 3 results of the fusion join it "
              "as a fifth list of weight W (`graft query`'s default; eval system `graft-cite` for graph-RRF); the "
              "first teacher row is without it (the `teacher` system), the second with it (`teacher-cite`)"]
    write_tables(args.results, f"distill_ceiling_{name}", meta, table, lines)
    return 0


if __name__ == "__main__":
    sys.exit(main())
