"""Scale benchmark of `graft build` on a real corpus (default: cs768, 6,545 papers).

Prints wall time and peak resident memory per stage, edge counts per facet and the share of papers
with an incoming edge; then, in the same run, times the graph stage of one facet against a dense
baseline (the exact item-level similarity materialised as full matrices, then argsorted), to show
what the blocked computation saves; last, rebuilds the index with another top-K from the facets and
vectors the first build stored (what a rerun after a crash, or a change of graph settings, costs).
Writes docs/results/build_scale.{md,json}.

    python -m experiments.build_scale [--corpus PATH] [--index DIR] [--limit N]
"""

from __future__ import annotations

import datetime as dt
import json
import os
import platform
import sys
import time
from dataclasses import replace
from pathlib import Path

import numpy as np

from experiments.common import CS768, add_results_argument, parser

REBUILD_TOP_K = 30  # graph setting of the rebuild from what the first build stored


def dense_baseline(owner: np.ndarray, vecs: np.ndarray, n: int, cite, k: int) -> np.ndarray:
    """Naive exact graph of one facet: full item x item and paper x paper matrices, then argsort."""
    order = np.argsort(owner, kind="stable")
    owner, vecs = owner[order], vecs[order].astype(np.float32)
    starts = np.searchsorted(owner, np.arange(n))
    present = np.bincount(owner, minlength=n) > 0
    sims = vecs @ vecs.T  # m x m
    row_best = np.maximum.reduceat(sims, starts[present], axis=1)  # item of i vs best item of j
    del sims
    fwd = np.add.reduceat(row_best, starts[present], axis=0) / np.bincount(owner)[present][:, None]
    s = 0.5 * (fwd + fwd.T)
    full = np.zeros((n, n), dtype=np.float32)
    full[np.ix_(present, present)] = s
    w = 0.75 * np.clip(full, 0, 1) + 0.25 * cite.toarray()
    np.fill_diagonal(w, -np.inf)
    return np.argsort(-w, axis=1, kind="stable")[:, :k]


def main(argv: list[str] | None = None) -> int:
    ap = parser(__doc__)
    ap.add_argument("--corpus", default=str(CS768))
    ap.add_argument("--index", default="/tmp/graft-bench-cs768")
    ap.add_argument("--limit", type=int, default=None)
    ap.add_argument("--title-weight", type=float, default=None,
                    help="build with this title weight (default: the build's default); named in the table file")
    from graft.encoder import BACKENDS

    ap.add_argument("--encoder-backend", default=None, choices=BACKENDS,
                    help="build with this encoder backend (default: the build's default); named in the table file")
    add_results_argument(ap)
    args = ap.parse_args(argv)
    if not Path(args.corpus).exists():
        print(f"corpus not found: {args.corpus} (../shared/data is absent); nothing to measure")
        return 1

    from experiments.encoder_backend import cpu_flags
    from graft.citations import citation_links
    from graft.edges import GraphParams, facet_graph
    from graft.facets import FACETS
    from graft.index import Index
    from graft.progress import Reporter, _PeakSampler
    from graft.similarity import group_items
    from graphbuild.build import BuildConfig, build_index

    t0 = time.perf_counter()
    reporter = Reporter(quiet=not sys.stderr.isatty())
    config = BuildConfig(limit=args.limit, **({} if args.title_weight is None else {"title_weight": args.title_weight}),
                         **({} if args.encoder_backend is None else {"embedding_backend": args.encoder_backend}))
    summary = build_index(args.corpus, args.index, config, reporter=reporter, fresh=True)
    total = time.perf_counter() - t0
    peak_total = max(summary.peaks.values())

    # Same run: blocked graph stage vs the dense baseline, one facet, same inputs.
    idx = Index.open(args.index)
    sel = (idx.facets["facet"] == "method").to_numpy()
    owner = idx.item_rows[sel]
    vecs = np.asarray(idx.item_embeddings, dtype=np.float32)[sel]
    cite = idx.citation_score
    links = citation_links(idx.citation_matrix, cite)
    with _PeakSampler() as s_blocked:
        base_rss = s_blocked.peak
        tb = time.perf_counter()
        g = facet_graph(group_items(owner, vecs, idx.n), cite, links, GraphParams())
        blocked_s = time.perf_counter() - tb
    blocked_mem = s_blocked.peak - base_rss
    with _PeakSampler() as s_dense:
        base_rss = s_dense.peak
        td = time.perf_counter()
        dense_top = dense_baseline(owner, vecs, idx.n, cite, 20)
        dense_s = time.perf_counter() - td
    dense_mem = s_dense.peak - base_rss
    overlap = np.mean([len(set(g[i].indices) & set(dense_top[i])) / 20 for i in range(idx.n)])

    t1 = time.perf_counter()  # last: it replaces the index's graphs
    rebuild = build_index(args.corpus, args.index, replace(config, top_k=REBUILD_TOP_K),
                          reporter=Reporter(quiet=not sys.stderr.isatty()))
    rebuild_s = time.perf_counter() - t1

    c = summary.counts
    backend = idx.manifest["embedding"].get("backend", "torch")  # what ran the encoder
    lines = [
        f"# Build scale benchmark ({Path(args.corpus).name}, {c['papers']} papers)",
        "",
        f"Command: `python -m experiments.build_scale {' '.join(argv if argv is not None else sys.argv[1:])}`  ",
        f"Date: {dt.date.today()} · machine: {os.cpu_count()} cores, {platform.machine()} ({cpu_flags()}), "
        f"Python {platform.python_version()} · corpus hash `{idx.manifest['corpus_hash'][:16]}` · "
        f"encoder backend {backend}",
        "",
        "| stage | wall s | peak RSS MiB |",
        "|---|---:|---:|",
    ]
    for name, secs in summary.timings.items():
        lines.append(f"| {name} | {secs:.1f} | {summary.peaks[name] / 2**20:,.0f} |")
    lines.append(f"| **total** | **{total:.1f}** | **{peak_total / 2**20:,.0f}** |")
    lines += ["", "| facet | items | edges | papers with an incoming edge |", "|---|---:|---:|---:|"]
    for f in FACETS:
        lines.append(f"| {f} | {c['facet_items'][f]} | {c['edges'][f]} | "
                     f"{100 * c['share_with_incoming_edge'][f]:.1f}% |")
    lines += [
        "",
        f"Citations: {c['citations']} in-corpus edges, {c['coupling_pairs']} coupled pairs, "
        f"{c['cocitation_pairs']} co-cited pairs.",
        "",
        "Graph stage of one facet (method), blocked vs dense baseline, same inputs, same run:",
        "",
        "| computation | wall s | extra peak RSS MiB | top-20 overlap with exact |",
        "|---|---:|---:|---:|",
        f"| blocked prefilter + exact candidates | {blocked_s:.2f} | {blocked_mem / 2**20:,.0f} | {overlap:.3f} |",
        f"| dense exact (m x m items, n x n papers) | {dense_s:.2f} | {dense_mem / 2**20:,.0f} | 1.000 |",
        f"| ratio blocked / dense | {blocked_s / dense_s:.2f} | {blocked_mem / max(dense_mem, 1):.2f} | |",
        "",
        f"Rebuild with top-K {REBUILD_TOP_K} from what the first build stored (INDEX/cache/build; the same "
        f"as a rerun after a crash in the graph stage): {rebuild_s:.1f} s, "
        f"{rebuild_s / total:.2f} of the first build (reused: {', '.join(rebuild.reused) or 'nothing'}).",
        "",
        f"Targets (2-core CPU): whole build < 600 s -> {'met' if total < 600 else 'MISSED'} ({total:.0f} s); "
        f"peak < 4 GiB -> {'met' if peak_total < 4 * 2**30 else 'MISSED'} ({peak_total / 2**30:.2f} GiB).",
    ]
    text = "\n".join(lines) + "\n"
    print(text)
    results = Path(args.results)
    results.mkdir(parents=True, exist_ok=True)
    stem = "build_scale" if args.limit is None else f"build_scale_limit{args.limit}"
    if args.title_weight is not None:
        stem += f"_w{args.title_weight:g}"
    if args.encoder_backend is not None:
        stem += f"_{args.encoder_backend}"
    (results / f"{stem}.md").write_text(text)
    (results / f"{stem}.json").write_text(json.dumps({
        "corpus": args.corpus, "date": str(dt.date.today()), "cores": os.cpu_count(), "cpu_flags": cpu_flags(),
        "encoder_backend": backend,
        "total_s": total, "peak_rss_bytes": peak_total, "timings_s": summary.timings,
        "peak_rss_bytes_per_stage": summary.peaks, "counts": c,
        "graph_stage_method": {"blocked_s": blocked_s, "blocked_extra_rss": blocked_mem,
                               "dense_s": dense_s, "dense_extra_rss": dense_mem, "top20_overlap": overlap},
        "corpus_hash": idx.manifest["corpus_hash"],
        "rebuild_from_checkpoints": {"top_k": REBUILD_TOP_K, "total_s": rebuild_s, "timings_s": rebuild.timings,
                                     "reused": rebuild.reused},
    }, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
