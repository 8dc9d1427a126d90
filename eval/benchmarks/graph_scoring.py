"""The graph stage's two ways of scoring candidate pairs, on a built index's item vectors.

`graphbuild.graph.facet_graph` scores each row's candidates exactly, either pair by pair from the
pairs' gathered items (`similarity.score_pairs`) or, up to `similarity.ROW_SCORING_MAX_PAPERS`
papers, by one matrix product of a few rows' items with every item of the facet
(`similarity.score_rows`). This builds each facet's graph both ways from the same vectors, in
alternating rounds, and prints the wall time of each (median over rounds), their ratio, and how far
the two graphs agree (edges shared, rows with the same out-edges, largest weight difference).

    python -m eval.benchmarks.graph_scoring --index INDEX [--rounds 2] [--facets method,...]

Writes eval/results/graph_scoring.{md,json}.
"""

from __future__ import annotations

import argparse
import datetime as dt
import os
import platform
import statistics
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

from eval.benchmarks.index_agreement import edge_agreement  # noqa: E402
from eval.benchmarks.split_queries import write_tables  # noqa: E402

#: the ways compared: the value `similarity.ROW_SCORING_MAX_PAPERS` takes for each
WAYS = {"pairs (score_pairs)": 0, "rows (score_rows)": 10**12}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--index", required=True, help="a built index (graft build)")
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--facets", default=None, help="comma-separated facets (default: all four)")
    ap.add_argument("--name", default="", help="suffix of the results files")
    ap.add_argument("--results", default=str(REPO / "eval" / "results"))
    args = ap.parse_args(argv)

    import numpy as np

    from eval.benchmarks.encoder_backend import cpu_flags
    from graft.facets import FACETS
    from graft.index import Index
    from graphbuild import similarity
    from graphbuild.build import BuildConfig
    from graphbuild.citations import citation_links
    from graphbuild.graph import facet_graph
    from graphbuild.similarity import group_items

    facets = args.facets.split(",") if args.facets else list(FACETS)
    if args.rounds < 1 or not set(facets) <= set(FACETS):
        ap.error(f"--rounds must be >= 1 and --facets among {', '.join(FACETS)}")
    idx = Index.open(args.index)
    params = BuildConfig.from_manifest(idx.manifest).graph_params()
    vectors = np.asarray(idx.item_embeddings, dtype=np.float32)
    cite = idx.citation_score
    links = citation_links(idx.citation_matrix, cite)
    kept = similarity.ROW_SCORING_MAX_PAPERS
    rows = []
    try:
        for facet in facets:
            sel = (idx.facets["facet"] == facet).to_numpy()
            items = group_items(idx.item_rows[sel], vectors[sel], idx.n)
            seconds: dict[str, list[float]] = {way: [] for way in WAYS}
            graphs = {}
            for _ in range(args.rounds):
                for way, limit in WAYS.items():
                    similarity.ROW_SCORING_MAX_PAPERS = limit
                    t0 = time.perf_counter()
                    graphs[way] = facet_graph(items, cite, links, params)
                    seconds[way].append(time.perf_counter() - t0)
            pairs, by_rows = (statistics.median(seconds[w]) for w in WAYS)
            agree = edge_agreement(*graphs.values())
            rows.append({"facet": facet, "pairs_s": pairs, "rows_s": by_rows, "ratio": by_rows / pairs, **agree})
            print(f"{facet}: pairs {pairs:.1f} s, rows {by_rows:.1f} s", file=sys.stderr)
    finally:
        similarity.ROW_SCORING_MAX_PAPERS = kept

    command = "python -m eval.benchmarks.graph_scoring " + " ".join(argv if argv is not None else sys.argv[1:])
    meta = {"command": command, "date": dt.date.today().isoformat(), "index": args.index, "papers": idx.n,
            "corpus_hash": idx.manifest["corpus_hash"], "rounds": args.rounds, "cores": os.cpu_count(),
            "cpu_flags": cpu_flags(), "row_scoring_max_papers": kept}
    lines = [
        f"# Graph stage: candidate pairs scored pair by pair or by rows ({idx.n:,} papers)",
        "",
        f"Command: `{command}`  ",
        f"Date: {meta['date']} · {os.cpu_count()} cores, {platform.machine()} ({cpu_flags()}), Python "
        f"{platform.python_version()} · corpus hash `{meta['corpus_hash'][:16]}` · top-K {params.top_k}, "
        f"{params.n_candidates} prefilter candidates · {args.rounds} alternating rounds, medians",
        "",
        "| facet | pairs s | rows s | rows / pairs | edges | pairs' edges in rows' | rows with the same out-edges | "
        "max weight difference |",
        "|---|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for r in rows:
        lines.append(f"| {r['facet']} | {r['pairs_s']:.1f} | {r['rows_s']:.1f} | {r['ratio']:.2f} | "
                     f"{r['edges_a']:,} | {100 * r['shared_share']:.3f}% | {100 * r['rows_identical_share']:.3f}% | "
                     f"{r['max_weight_diff']:.1e} |")
    total_pairs, total_rows = sum(r["pairs_s"] for r in rows), sum(r["rows_s"] for r in rows)
    lines += ["", f"All facets: {total_pairs:.1f} s pair by pair, {total_rows:.1f} s by rows "
                  f"(**{total_rows / total_pairs:.2f}×**). `graft build` scores by rows up to "
                  f"{kept:,} papers (`graphbuild.similarity.ROW_SCORING_MAX_PAPERS`)."]
    write_tables(args.results, "graph_scoring" + (f"_{args.name}" if args.name else ""), meta, rows, lines)
    return 0


if __name__ == "__main__":
    sys.exit(main())
