"""How an edge weight should mix facet similarity and citation: the graph teacher's in-corpus recall
for several α (w_f = α·s_f + (1 − α)·cite) and top-K, the four facet graphs rebuilt for each.

The design fixes α = 0.75 and K = 20 (the GRAFT paper's). Here the index's stored item vectors (the
graph's own, title-mixed, float16 as stored) and its citation signals are reused, the four facet
graphs rebuilt with each (α, K) and the other build settings of the index, and the teacher scored
on a split's in-corpus queries without and with the citation channel (`teacher`, `teacher-cite`:
what `graft eval` calls them). The first row rescores the index's own graphs, so a rebuilt row at
the index's setting shows what the float16 round trip moves. In corpus the gold is the query's
citation neighbours, and β carries coupling and co-citation, which correlate with them: read a gain
from a larger β with that in mind. Tune on `dev`.

    python -m experiments.edge_mix --split SPLITDIR [--alphas 0.5,0.6,0.75,0.9,1.0] [--top-k 20]
        [--part dev] [--limit N] [--name cs768]

Writes docs/results/edge_mix_{name}.{md,json}.
"""

from __future__ import annotations

import sys
import time
from dataclasses import replace
from typing import Any

import numpy as np

from experiments.common import (
    float_list,
    int_list,
    open_split_queries,
    split_parser,
    split_report,
    write_tables,
)


def both_teachers(graphs: dict[str, Any], queries: dict[str, int], gold: dict[str, set[int]],
                  links: Any) -> dict[str, float]:
    """Mean Recall@k of the graph teacher over `graphs` (`R@k`) and of the same teacher with the
    citation channel at `graft.fusion.CITATION_WEIGHT` (`cite R@k`) for the query rows."""
    from experiments.title_weight import teacher_recalls
    from graft.fusion import CITATION_WEIGHT
    from graft.teacher import TeacherConfig

    cite = teacher_recalls(graphs, queries, gold, TeacherConfig(citation_weight=CITATION_WEIGHT), links)
    return {**teacher_recalls(graphs, queries, gold), **{f"cite {k}": v for k, v in cite.items()}}


def main(argv: list[str] | None = None) -> int:
    ap = split_parser(__doc__, table="edge_mix", part="dev")
    ap.add_argument("--alphas", default="0.5,0.6,0.75,0.9,1.0", help="comma-separated α (β = 1 − α)")
    ap.add_argument("--top-k", default="20", help="comma-separated top-K out-edges per paper and facet")
    args = ap.parse_args(argv)
    alphas = float_list(ap, args.alphas, "--alphas")
    top_ks = list(dict.fromkeys(int_list(ap, args.top_k, "--top-k")))

    from graft.citations import citation_signals
    from graphbuild.build import BuildConfig, facet_graphs

    opened = open_split_queries(args)
    idx, queries, gold = opened.index, opened.rows, opened.gold
    config = BuildConfig.from_manifest(idx.manifest)
    base = config.graph_params()
    vectors = np.asarray(idx.item_embeddings, dtype=np.float32)
    owner, facet_col = idx.item_rows, idx.facets["facet"].to_numpy()
    a = idx.citation_matrix
    signals = citation_signals(a, config.citation_rescale)
    links = idx.citation_links

    table: list[dict[str, Any]] = []
    t0 = time.perf_counter()
    table.append({"alpha": base.alpha, "top_k": base.top_k, "graphs": "the index's own",
                  **both_teachers(idx.graphs, queries, gold, links), "seconds": round(time.perf_counter() - t0, 1)})
    for k in top_ks:
        for alpha in alphas:
            t0 = time.perf_counter()
            params = replace(base, alpha=alpha, beta=round(1.0 - alpha, 10), top_k=k)
            graphs = facet_graphs(owner, facet_col, vectors, a, signals, params, text=idx.text_coupling,
                                  lexical=idx.lexical or None)
            table.append({"alpha": alpha, "top_k": k, "graphs": "rebuilt",
                          **both_teachers(graphs, queries, gold, links),
                          "seconds": round(time.perf_counter() - t0, 1)})
            print(f"alpha {alpha:g}, top-K {k}: R@20 {table[-1]['R@20']:.3f}, with the citation channel "
                  f"{table[-1]['cite R@20']:.3f}", file=sys.stderr, flush=True)

    name, meta, lines = split_report(
        opened, args, "edge_mix", argv, "Edge weight: facet similarity vs citation",
        "papers · graph teacher (two hops, RRF over facets), without and with the citation channel",
        index_alpha=base.alpha, index_top_k=base.top_k)
    lines += ["| α | β | top-K | graphs | teacher R@20 | R@50 | teacher-cite R@20 | R@50 | seconds |",
              "|---:|---:|---:|---|---:|---:|---:|---:|---:|"]
    for row in table:
        lines.append(f"| {row['alpha']:g} | {1 - row['alpha']:g} | {row['top_k']} | {row['graphs']} | "
                     f"{row['R@20']:.3f} | {row['R@50']:.3f} | {row['cite R@20']:.3f} | {row['cite R@50']:.3f} | "
                     f"{row['seconds']} |")
    lines += ["", "- w_f(i, j) = α·s_f(i, j) + β·cite(i, j), the top K out-edges kept per paper and facet; "
                  "the other build settings are the index's",
              "- rebuilt rows: from the stored item vectors (float16) and the index's citation signals; "
                  "the index's own row: its stored graphs",
              "- in corpus the gold is the query's citation neighbours, which the citation half correlates with"]
    write_tables(args.results, f"edge_mix_{name}", meta, table, lines)
    return 0


if __name__ == "__main__":
    sys.exit(main())
