"""The graph stage's ways of scoring and ranking candidate pairs, on a built index's item vectors.

`graft.edges.facet_graph` scores each row's candidates exactly, a few rows at a time against
their candidates' gathered items (`similarity.score_gathered`); before, up to 16,000 papers, by one
matrix product of a few rows' items with every item of the facet (`score_all_items` here), and
pair by pair from the pairs' gathered items (`similarity.score_pairs`) beyond. It dedupes the
candidate pairs and keeps each row's top K by one sort each (`graph._unique`, `graph._top_k_rows`)
where NumPy's `np.unique` and a three-key `np.lexsort` did it before. This builds each facet's
graph every way (`WAYS`) from the same vectors, in alternating rounds, and prints the wall time of
each (median over rounds), its ratio to the first way, and how far each graph agrees with the last
way's, `graft build`'s (edges shared, rows with the same out-edges, largest weight difference).

    python -m experiments.graph_scoring --index INDEX [--rounds 2] [--facets method,...]

Writes docs/results/graph_scoring.{md,json}.
"""

from __future__ import annotations

import datetime as dt
import os
import platform
import statistics
import sys
import time

import numpy as np

from experiments.common import add_results_argument, parser, write_tables
from experiments.index_agreement import edge_agreement

#: the ways compared: how the candidate pairs are scored, and whether they are deduped and ranked by
#: NumPy's np.unique and three-key np.lexsort (the graph stage before its one-sort ranking)
WAYS = {"pairs, np.unique + lexsort": ("pairs", True), "all items, np.unique + lexsort": ("all items", True),
        "all items, one sort each": ("all items", False),
        "gathered, one sort each (graft build)": ("gathered", False)}


def score_all_items(items, rows, cols, budget_floats: int = 1 << 23):
    """The graph's scoring up to 16,000 papers before `score_gathered`: a few rows' items against
    every item of the facet by one product (at most `budget_floats` cosines at a time)."""
    from graft.similarity import _mean_best_matches, _row_blocks

    n, width, d = items.padded.shape
    out = np.zeros(len(rows), dtype=np.float32)
    if not len(rows):
        return out
    flat = items.padded.reshape(n * width, d)
    count = items.mask.sum(axis=1)
    step = max(1, budget_floats // (width * n * width))
    for start, lo, hi in _row_blocks(rows, step):
        cos = flat[start * width : (start + step) * width] @ flat.T
        out[lo:hi] = _mean_best_matches(items, count, rows[lo:hi], cols[lo:hi], cos, rows[lo:hi] - start,
                                        cols[lo:hi])
    return out


def scorers() -> dict:
    """The scoring function of each way, as `graph.facet_graph` calls it."""
    from graft.similarity import score_gathered, score_pairs

    return {"pairs": lambda items, rows, cols: score_pairs(items, rows, items, cols),
            "all items": score_all_items, "gathered": score_gathered}


def _numpy_unique_and_lexsort() -> tuple:
    """`graph._unique` and `graph._top_k_rows` as they were: np.unique and a three-key lexsort."""
    import numpy as np

    def top_k(rows, cols, weights, k):
        order = np.lexsort((cols, -weights, rows))
        r = rows[order]
        return order[np.arange(len(r)) - np.searchsorted(r, r, side="left") < k]

    return np.unique, top_k


def main(argv: list[str] | None = None) -> int:
    ap = parser(__doc__)
    ap.add_argument("--index", required=True, help="a built index (graft build)")
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--facets", default=None, help="comma-separated facets (default: all four)")
    ap.add_argument("--name", default="", help="suffix of the results files")
    add_results_argument(ap)
    args = ap.parse_args(argv)

    from experiments.encoder_backend import cpu_flags
    from graft import edges as graph
    from graft.citations import citation_links
    from graft.edges import facet_graph
    from graft.facets import FACETS
    from graft.index import Index
    from graft.similarity import group_items
    from graphbuild.build import BuildConfig

    facets = args.facets.split(",") if args.facets else list(FACETS)
    if args.rounds < 1 or not set(facets) <= set(FACETS):
        ap.error(f"--rounds must be >= 1 and --facets among {', '.join(FACETS)}")
    idx = Index.open(args.index)
    params = BuildConfig.from_manifest(idx.manifest).graph_params()
    vectors = np.asarray(idx.item_embeddings, dtype=np.float32)
    cite = idx.citation_score
    links = citation_links(idx.citation_matrix, cite)
    kept = graph.score_gathered, graph._unique, graph._top_k_rows
    before = _numpy_unique_and_lexsort()
    scoring = scorers()
    rows = []
    try:
        for facet in facets:
            sel = (idx.facets["facet"] == facet).to_numpy()
            items = group_items(idx.item_rows[sel], vectors[sel], idx.n)
            seconds: dict[str, list[float]] = {way: [] for way in WAYS}
            graphs = {}
            for _ in range(args.rounds):
                for way, (scorer, numpy_sorts) in WAYS.items():
                    graph.score_gathered = scoring[scorer]
                    graph._unique, graph._top_k_rows = before if numpy_sorts else kept[1:]
                    t0 = time.perf_counter()
                    graphs[way] = facet_graph(items, cite, links, params)
                    seconds[way].append(time.perf_counter() - t0)
            final = list(WAYS)[-1]
            first_s = statistics.median(seconds[list(WAYS)[0]])
            for way in WAYS:
                median = statistics.median(seconds[way])
                rows.append({"facet": facet, "way": way, "seconds": median, "ratio": median / first_s,
                             **edge_agreement(graphs[way], graphs[final])})
            print(f"{facet}: " + ", ".join(f"{w} {statistics.median(seconds[w]):.1f} s" for w in WAYS),
                  file=sys.stderr)
    finally:
        graph.score_gathered, graph._unique, graph._top_k_rows = kept

    command = " ".join(["python -m experiments.graph_scoring", *(argv if argv is not None else sys.argv[1:])])
    meta = {"command": command, "date": dt.date.today().isoformat(), "index": args.index, "papers": idx.n,
            "corpus_hash": idx.manifest["corpus_hash"], "rounds": args.rounds, "cores": os.cpu_count(),
            "cpu_flags": cpu_flags(), "ways": list(WAYS)}
    first, final = list(WAYS)[0], list(WAYS)[-1]
    lines = [
        f"# Graph stage: candidate pairs scored, deduped and ranked, four ways ({idx.n:,} papers)",
        "",
        f"Command: `{command}`  ",
        f"Date: {meta['date']} · {os.cpu_count()} cores, {platform.machine()} ({cpu_flags()}), Python "
        f"{platform.python_version()} · corpus hash `{meta['corpus_hash'][:16]}` · top-K {params.top_k}, "
        f"{params.n_candidates} prefilter candidates · {args.rounds} alternating rounds, medians",
        "",
        f"| facet | way | s | ratio to {first} | edges | its edges in {final}'s | rows with the same out-edges | "
        "max weight difference |",
        "|---|---|---:|---:|---:|---:|---:|---:|",
    ]
    for r in rows:
        lines.append(f"| {r['facet']} | {r['way']} | {r['seconds']:.1f} | {r['ratio']:.2f} | "
                     f"{r['edges_a']:,} | {100 * r['shared_share']:.3f}% | {100 * r['rows_identical_share']:.3f}% | "
                     f"{r['max_weight_diff']:.1e} |")
    totals = {w: sum(r["seconds"] for r in rows if r["way"] == w) for w in WAYS}
    lines += ["", "All facets: " + ", ".join(f"{w} {t:.1f} s ({t / totals[first]:.2f}×)" for w, t in totals.items())
              + ". Pairs: `similarity.score_pairs`; all items: a few rows' items against every item "
              "of the facet; gathered: a few rows against their candidates' items (`similarity.score_gathered`)."]
    write_tables(args.results, "graph_scoring" + (f"_{args.name}" if args.name else ""), meta, rows, lines)
    return 0


if __name__ == "__main__":
    sys.exit(main())
