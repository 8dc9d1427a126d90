"""In-corpus recall of the graph teacher on a built index, against baselines in the same run.

Query = a corpus paper with at least `--min-neighbours` citation neighbours; gold = its direct
citation neighbours in the corpus (references and citing papers). Systems, all on the same queries:

- teacher            the graph teacher on the index's graphs (two hops, RRF over facets)
- teacher, one hop   the same with two-hop weight 0
- teacher, global    graphs rebuilt with citation counts divided by the corpus maximum instead of
                     rescaled per pair (same items, same alpha/beta)
- facet-only         graphs rebuilt with beta = 0 (no citation term)
- citation-only      papers ranked by the coupling/co-citation score alone
- dense MiniLM       cosine of title + abstract embeddings

    python -m eval.benchmarks.teacher_recall --index INDEX [--queries 300] [--seed 0]

Writes eval/results/teacher_recall.{md,json}. A pipeline check on the full graph, not the evaluation
protocol: held-out splits, BM25 and GRAFT are `graft eval` (eval/runner.py).
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import sys
import time
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[2]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--index", required=True)
    ap.add_argument("--queries", type=int, default=300)
    ap.add_argument("--min-neighbours", type=int, default=5)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--results", default=str(REPO / "eval" / "results"))
    args = ap.parse_args(argv)
    os.environ.setdefault("HF_HUB_OFFLINE", "1")

    from eval.metrics import recall_at
    from eval.systems import facet_only_graphs
    from graft.citations import citation_signals
    from graft.encoder import Encoder
    from graft.facets import FACETS
    from graft.index import Index
    from graft.teacher import GraphTeacher, TeacherConfig
    from graphbuild.build import BuildConfig, facet_graphs

    idx = Index.open(args.index)
    a = idx.citation_matrix
    sym = idx.citation_links
    neighbours = {i: set(sym[i].indices.tolist()) for i in range(idx.n)}
    pool = [i for i in range(idx.n) if len(neighbours[i]) >= args.min_neighbours]
    rng = np.random.default_rng(args.seed)
    queries = sorted(rng.choice(pool, size=min(args.queries, len(pool)), replace=False).tolist())

    config = BuildConfig.from_manifest(idx.manifest)
    owner = idx.item_rows
    facet_col = idx.facets["facet"].to_numpy()
    vectors = np.asarray(idx.item_embeddings, dtype=np.float32)

    def teacher_runs(graphs, cfg: TeacherConfig) -> dict[int, list[int]]:
        t = GraphTeacher(graphs, cfg)
        return {q: [n for n, _, _ in t.retrieve(t.node_rows(q), exclude={q}, k=50)[0]] for q in queries}

    runs: dict[str, dict[int, list[int]]] = {}
    seconds: dict[str, float] = {}

    def timed(name: str, fn) -> None:
        t0 = time.perf_counter()
        runs[name] = fn()
        seconds[name] = time.perf_counter() - t0

    timed("teacher", lambda: teacher_runs(idx.graphs, TeacherConfig()))
    timed("teacher, one hop", lambda: teacher_runs(idx.graphs, TeacherConfig(two_hop_weight=0.0)))
    other = "global" if config.citation_rescale == "pair" else "pair"
    timed(f"teacher, citation rescale {other}", lambda: teacher_runs(
        facet_graphs(owner, facet_col, vectors, a, citation_signals(a, other), config.graph_params()),
        TeacherConfig()))
    timed("facet-only graphs (beta = 0)", lambda: teacher_runs(facet_only_graphs(idx), TeacherConfig()))

    def citation_only() -> dict[int, list[int]]:
        cite = idx.citation_score
        out = {}
        for q in queries:
            row = cite[q]
            order = np.lexsort((row.indices, -row.data))
            out[q] = row.indices[order][:50].tolist()
        return out

    timed("citation-only", citation_only)

    def dense() -> dict[int, list[int]]:
        texts = [f"{t}. {s}" for t, s in zip(idx.papers["title"].to_list(), idx.papers["abstract"].to_list())]
        x = Encoder(config.embedding_model).encode(texts)
        out = {}
        for q in queries:
            s = x @ x[q]
            s[q] = -np.inf
            out[q] = np.argsort(-s, kind="stable")[:50].tolist()
        return out

    timed("dense MiniLM (title + abstract)", dense)

    table = {}
    for name, run in runs.items():
        table[name] = {f"R@{k}": float(np.mean([recall_at(run[q], neighbours[q], k) for q in queries]))
                       for k in (20, 50)}
    base = table["dense MiniLM (title + abstract)"]["R@20"]
    lines = [
        f"# Graph teacher recall ({idx.n} papers, {len(queries)} queries)",
        "",
        f"Command: `python -m eval.benchmarks.teacher_recall --index INDEX --queries {args.queries} "
        f"--seed {args.seed}`  ",
        f"Date: {dt.date.today()} · corpus hash `{idx.manifest['corpus_hash'][:16]}` · index citation "
        f"rescale: {config.citation_rescale} · queries: papers with >= {args.min_neighbours} citation "
        f"neighbours, gold = those neighbours",
        "",
        "| system | R@20 | R@50 | R@20 / dense | wall s |",
        "|---|---:|---:|---:|---:|",
    ]
    for name, row in table.items():
        lines.append(f"| {name} | {row['R@20']:.3f} | {row['R@50']:.3f} | {row['R@20'] / base:.2f} | "
                     f"{seconds[name]:.1f} |")
    text = "\n".join(lines) + "\n"
    print(text)
    results = Path(args.results)
    results.mkdir(parents=True, exist_ok=True)
    (results / "teacher_recall.md").write_text(text)
    (results / "teacher_recall.json").write_text(json.dumps({
        "index": str(args.index), "corpus_hash": idx.manifest["corpus_hash"], "queries": len(queries),
        "seed": args.seed, "facets": list(FACETS), "recall": table, "seconds": seconds,
        "date": str(dt.date.today()),
    }, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
