"""Approximate graph candidates (`graft.ann`): a FAISS IVF-Flat index against the exact prefilter, and
HNSW as the alternative it was chosen over.

The graph stage gives every paper its 100 nearest papers by pooled facet vector before scoring them
exactly; the exact prefilter compares all pairs (n^2 d). This measures:

1. **graph** (with `--index`): each facet graph of a built index made with the exact prefilter and
   with FAISS candidates at each `--probes` setting (`BuildConfig(candidates="faiss", faiss_nprobe=P)`,
   2 sqrt(n) lists): seconds (the IVF index's training and filling included), and the share of the
   exact graph's edges kept (each facet keeps the top 20 out-edges a paper; kept edges are scored
   exactly either way, so a missed edge is replaced by the next-best candidate).
2. **prefilter** at each `--sizes` n: n vectors answered as queries against all n (the build's
   100 candidates a paper): the exact prefilter (`graft.similarity.prefilter_blocks`), the IVF path
   of the build (`graft.ann`, index made and searched) at each probe setting, and an HNSW graph index
   (faiss IndexHNSWFlat, M = 32, inner product) at each `--hnsw-ef`; seconds, ratio to exact, and the
   share of the exact top 20 and top 100 each finds. The vectors are the index's real MiniLM vectors
   (its pooled facet vectors, facet items and title + abstract vectors, each distinct row once, in a
   seeded shuffle) up to the number it holds, synthetic ones beyond (`--synthetic`: unit vectors around
   `--clusters` random centres with gaussian noise, in 384 dimensions), as the row says.

    python -m experiments.ann_candidates --index INDEX [--probes 4,8,16,32] [--sizes 6545,100000]
        [--hnsw-ef 64,128,256] [--no-graph] [--name NAME]

Writes docs/results/ann_candidates{NAME}.{md,json}.
"""

from __future__ import annotations

import datetime as dt
import os
import platform
import sys
import time

import numpy as np

from experiments.common import add_results_argument, int_list, parser, write_tables

CANDIDATES = 100  # the build's n_candidates
HNSW_M = 32  # neighbours per HNSW node (faiss's usual choice for 384-d text vectors)


def share(found: np.ndarray, truth: np.ndarray, k: int) -> float:
    """Mean share of each row's exact top k that `found` (rows of candidates) holds anywhere in its first k."""
    hits = [len(set(f[:k].tolist()) & set(t[:k].tolist())) for f, t in zip(found, truth)]
    return float(np.sum(hits) / (k * len(truth)))


def exact_candidates(x: np.ndarray) -> tuple[np.ndarray, float]:
    from graft.similarity import prefilter_blocks

    t0 = time.perf_counter()
    cand = np.vstack([c for _, c in prefilter_blocks(x, x, CANDIDATES)])
    return cand, time.perf_counter() - t0


def ivf_candidates(x: np.ndarray, probe: int) -> tuple[np.ndarray, float, int]:
    from graft.ann import CandidateSearch, IVFCandidates, candidate_blocks

    t0 = time.perf_counter()
    searcher = IVFCandidates(x, CandidateSearch("faiss", nprobe=probe))
    cand = np.vstack([c for _, c in candidate_blocks(x, x, CANDIDATES, searcher)])
    return cand, time.perf_counter() - t0, searcher.lists


def hnsw_candidates(x: np.ndarray, efs: list[int]) -> list[tuple[int, np.ndarray, float, float]]:
    """(efSearch, candidates, build s, search s) per setting; one graph built for all."""
    import faiss

    t0 = time.perf_counter()
    index = faiss.IndexHNSWFlat(x.shape[1], HNSW_M, faiss.METRIC_INNER_PRODUCT)
    index.add(x)
    built = time.perf_counter() - t0
    out = []
    for ef in efs:
        index.hnsw.efSearch = max(ef, CANDIDATES + 1)
        t0 = time.perf_counter()
        _, found = index.search(x, CANDIDATES + 1)
        own = found == np.arange(len(x))[:, None]
        cand = np.vstack([row[~mask][:CANDIDATES] for row, mask in zip(found, own)])
        out.append((ef, cand, built, time.perf_counter() - t0))
    return out


def real_points(index_dir: str) -> np.ndarray:
    """The index's MiniLM vectors: pooled facet vectors, facet items, title + abstract; distinct rows, shuffled."""
    from graft.facets import FACETS
    from graft.index import Index
    from graft.similarity import group_items

    idx = Index.open(index_dir)
    items = np.asarray(idx.item_embeddings, dtype=np.float32)
    parts = [items]
    facet_col = idx.facets["facet"].to_numpy()
    for f in FACETS:
        parts.append(group_items(idx.item_rows[facet_col == f], items[facet_col == f], idx.n).pooled)
    papers = idx.paper_embeddings
    if papers is not None:
        parts.append(np.asarray(papers, dtype=np.float32))
    x = np.vstack(parts)
    x = x[np.linalg.norm(x, axis=1) > 0]
    x = np.unique(x, axis=0)
    x /= np.linalg.norm(x, axis=1, keepdims=True)
    return np.ascontiguousarray(x[np.random.default_rng(0).permutation(len(x))], dtype=np.float32)


def synthetic_points(n: int, d: int, clusters: int, noise: float, seed: int = 0) -> np.ndarray:
    rng = np.random.default_rng(seed)
    centres = rng.normal(size=(clusters, d)).astype(np.float32)
    x = centres[rng.integers(0, clusters, n)] + noise * rng.normal(size=(n, d)).astype(np.float32)
    return np.ascontiguousarray(x / np.linalg.norm(x, axis=1, keepdims=True), dtype=np.float32)


def graph_rows(index_dir: str, probes: list[int]) -> list[dict]:
    from dataclasses import replace

    from experiments.index_agreement import edge_agreement
    from graft.ann import CandidateSearch
    from graft.citations import citation_links
    from graft.edges import facet_graph
    from graft.facets import FACETS
    from graft.index import Index
    from graft.similarity import group_items
    from graphbuild.build import BuildConfig

    idx = Index.open(index_dir)
    params = replace(BuildConfig.from_manifest(idx.manifest).graph_params(), candidates=CandidateSearch("exact"))
    vectors = np.asarray(idx.item_embeddings, dtype=np.float32)
    cite = idx.citation_score
    links = citation_links(idx.citation_matrix, cite)
    text = idx.text_coupling
    if text is not None and text.nnz:  # as the build adds link-less papers' text neighbours
        import scipy.sparse as sp

        cite = (sp.csr_matrix(cite, dtype=np.float32) + text).tocsr()
        links = ((links + text) > 0).astype(np.float32).tocsr()
    rows = []
    facet_col = idx.facets["facet"].to_numpy()
    for facet in FACETS:
        sel = facet_col == facet
        items = group_items(idx.item_rows[sel], vectors[sel], idx.n)
        t0 = time.perf_counter()
        g_exact = facet_graph(items, cite, links, params)
        t_exact = time.perf_counter() - t0
        rows.append({"facet": facet, "papers": idx.n, "method": "exact (graft build)", "seconds": t_exact,
                     "ratio": 1.0, "kept": 1.0, "rows_same": 1.0})
        for p in probes:
            t0 = time.perf_counter()
            g = facet_graph(items, cite, links, replace(params, candidates=CandidateSearch("faiss", nprobe=p)))
            t = time.perf_counter() - t0
            agree = edge_agreement(g_exact, g)
            rows.append({"facet": facet, "papers": idx.n, "method": f"faiss, {p} probed", "seconds": t,
                         "ratio": t / t_exact, "kept": agree["shared_share"],
                         "rows_same": agree["rows_identical_share"]})
            print(f"graph {facet} nprobe {p}: {t:.1f} s vs {t_exact:.1f} s, {100 * agree['shared_share']:.2f}% kept",
                  file=sys.stderr)
    return rows


def prefilter_rows(points: np.ndarray | None, sizes: list[int], probes: list[int], efs: list[int],
                   clusters: int, noise: float) -> list[dict]:
    rows = []
    for n in sizes:
        if points is not None and n <= len(points):
            x, what = np.ascontiguousarray(points[:n]), "real MiniLM"
        else:
            x, what = synthetic_points(n, 384, clusters, noise), f"synthetic ({clusters} centres, noise {noise:g})"
        truth, t_exact = exact_candidates(x)
        base = {"n": n, "vectors": what}
        rows.append({**base, "method": "exact (graft build)", "seconds": t_exact, "ratio": 1.0, "share20": 1.0,
                     "share100": 1.0})
        print(f"n {n}: exact {t_exact:.1f} s", file=sys.stderr)
        for p in probes:
            cand, t, lists = ivf_candidates(x, p)
            rows.append({**base, "method": f"faiss IVF-Flat, {lists} lists, {p} probed", "seconds": t,
                         "ratio": t / t_exact, "share20": share(cand, truth, 20),
                         "share100": share(cand, truth, CANDIDATES)})
            print(f"n {n}: ivf {p}: {t:.1f} s, {rows[-1]['share20']:.3f}", file=sys.stderr)
        for ef, cand, built, searched in hnsw_candidates(x, efs):
            rows.append({**base, "method": f"faiss HNSW, M {HNSW_M}, efSearch {max(ef, CANDIDATES + 1)}",
                         "seconds": built + searched, "ratio": (built + searched) / t_exact,
                         "share20": share(cand, truth, 20), "share100": share(cand, truth, CANDIDATES)})
            print(f"n {n}: hnsw {ef}: {built:.1f} + {searched:.1f} s, {rows[-1]['share20']:.3f}", file=sys.stderr)
    return rows


def main(argv: list[str] | None = None) -> int:
    ap = parser(__doc__)
    ap.add_argument("--index", default=None, help="a built index: its facet graphs and its real vectors")
    ap.add_argument("--probes", default="4,8,16,32", help="IVF lists probed per query (comma-separated)")
    ap.add_argument("--sizes", default="6545,100000", help="vectors of the prefilter comparison")
    ap.add_argument("--hnsw-ef", default="128,256", help="HNSW efSearch settings (at least 101: 100 candidates)")
    ap.add_argument("--clusters", type=int, default=2000, help="centres of the synthetic vectors")
    ap.add_argument("--noise", type=float, default=0.12, help="per-dimension gaussian noise of the synthetic vectors")
    ap.add_argument("--no-graph", action="store_true", help="skip the facet-graph comparison")
    ap.add_argument("--name", default="", help="suffix of the results files")
    add_results_argument(ap)
    args = ap.parse_args(argv)
    probes, sizes = int_list(ap, args.probes, "--probes"), int_list(ap, args.sizes, "--sizes")
    efs = int_list(ap, args.hnsw_ef, "--hnsw-ef")
    if args.index is None and not args.no_graph:
        ap.error("--index is needed for the graph comparison (or pass --no-graph)")

    from experiments.encoder_backend import cpu_flags
    from graft.similarity import best_columns

    best_columns(np.zeros((2, 1 << 20), dtype=np.float32), 1)  # torch imported before any timing
    graph = [] if args.no_graph else graph_rows(args.index, probes)
    points = real_points(args.index) if args.index else None
    pre = prefilter_rows(points, sizes, probes, efs, args.clusters, args.noise)

    import faiss

    meta = {"date": dt.date.today().isoformat(), "cpus": os.cpu_count(), "machine": platform.machine(),
            "cpu_flags": cpu_flags(), "python": platform.python_version(), "faiss": faiss.__version__,
            "index": args.index, "real_points": 0 if points is None else len(points),
            "command": "python -m experiments.ann_candidates " + " ".join(argv if argv is not None else sys.argv[1:])}
    lines = ["# Approximate graph candidates: FAISS IVF-Flat against the exact prefilter (and HNSW)", "",
             f"Command: `{meta['command']}`  ",
             f"Date: {meta['date']} · {meta['cpus']} cores (shared), {meta['machine']} ({meta['cpu_flags']}), "
             f"Python {meta['python']}, faiss {meta['faiss']}", ""]
    if graph:
        lines += [f"Facet graphs of `{args.index}` ({graph[0]['papers']:,} papers; top 20 out-edges a paper, "
                  f"{CANDIDATES} candidates) with FAISS candidates in place of the exact prefilter (time includes "
                  "making the IVF index):", "",
                  "| facet | candidates | s | ratio to exact | exact edges kept | rows with the same out-edges |",
                  "|---|---|---:|---:|---:|---:|"]
        lines += [f"| {r['facet']} | {r['method']} | {r['seconds']:.1f} | {r['ratio']:.2f} | {100 * r['kept']:.2f}% | "
                  f"{100 * r['rows_same']:.2f}% |" for r in graph]
        lines.append("")
    lines += [f"Prefilter: n vectors each answered against all n, {CANDIDATES} candidates a row (IVF: the build's "
              "path, index made and searched; HNSW: graph built and searched):", "",
              "| n | vectors | method | s | ratio to exact | share of the exact top 20 | of the top 100 |",
              "|---:|---|---|---:|---:|---:|---:|"]
    lines += [f"| {r['n']:,} | {r['vectors']} | {r['method']} | {r['seconds']:.1f} | {r['ratio']:.2f} | "
              f"{r['share20']:.3f} | {r['share100']:.3f} |" for r in pre]
    write_tables(args.results, f"ann_candidates{args.name}", meta, [*graph, *pre], lines)
    return 0


if __name__ == "__main__":
    sys.exit(main())
