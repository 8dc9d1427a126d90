"""How the graph stage's approximate candidate search grows with the corpus: FAISS IVF-Flat (the
build's `--candidates faiss`) against HNSW (`--candidates hnsw`) from 10^4 to 10^6 vectors.

The graph stage asks every one of n papers for its 100 nearest papers by pooled facet vector, so its
search costs n queries against n vectors. At 10^6 the exact answer for all n is out of reach on 2
cores, so this times each index on a sample of queries and scales the per-query time to n:

- vectors: the first n rows of `--vectors` (an index's `embeddings/papers.npy`, or its pooled facet
  vectors with `--facet`), normalised; the query sample is the same `--queries` rows (drawn with a
  fixed seed from the first `min(sizes)` rows) at every size;
- truth: each sampled row's exact top 100 among the n (blocked brute force);
- IVF: 2 sqrt(n) lists trained on 64 vectors a list, `--probes` lists probed (the build's
  `graft.ann.IVFCandidates`); HNSW: `graft.ann.HNSWCandidates` (M neighbours a node,
  efConstruction 40, `--ef` efSearch);
- make s: training and filling (IVF) or inserting every vector (HNSW), measured whole; search s for
  n queries: the sample's seconds x n / sample; recall: share of the exact top 20 and top 100 found.

    python -m experiments.ann_growth --vectors /tmp/scale/q1e6/embeddings/papers.npy \
        --sizes 10000,100000,1000000 [--queries 2000] [--probes 16] [--ef 128] [--name NAME]

Writes docs/results/ann_growth{NAME}.{md,json}.
"""

from __future__ import annotations

import datetime as dt
import os
import platform
import sys
import time

import numpy as np

from experiments.common import add_results_argument, growth_exponent, int_list, parser, write_tables

CANDIDATES = 100  # the build's n_candidates


def recall(found: np.ndarray, truth: np.ndarray, k: int) -> float:
    """Mean share of each row's exact top k found anywhere among its first k candidates."""
    return float(np.mean([len(set(f[:k].tolist()) & set(t[:k].tolist())) / k for f, t in zip(found, truth)]))


def load_vectors(path: str, n: int, facet: str | None) -> np.ndarray:
    """The first n unit rows of a vector file (`.npy`), or of an index's pooled vectors of `facet`."""
    if facet is None:
        x = np.asarray(np.load(path, mmap_mode="r")[:n], dtype=np.float32)
    else:
        from graft.index import Index
        from graft.similarity import group_items

        idx = Index.open(path)
        rows, vectors = idx.item_groups[facet]
        x = group_items(rows, np.asarray(vectors, dtype=np.float32), idx.n).pooled[:n]
    norm = np.linalg.norm(x, axis=1, keepdims=True)
    return np.ascontiguousarray(x / np.where(norm > 0, norm, 1.0), dtype=np.float32)


def exact_top(x: np.ndarray, sample: np.ndarray) -> np.ndarray:
    from graft.similarity import best_columns

    out = []
    for start in range(0, len(sample), 256):
        q = sample[start : start + 256]
        s = x[q] @ x.T
        s[np.arange(len(q)), q] = -np.inf
        out.append(best_columns(s, CANDIDATES))
    return np.vstack(out)


def timed(searcher: object, x: np.ndarray, sample: np.ndarray) -> tuple[np.ndarray, float]:
    t0 = time.perf_counter()
    found = searcher.search(x[sample], CANDIDATES, self_rows=sample)  # type: ignore[attr-defined]
    return found, time.perf_counter() - t0


def size_rows(x: np.ndarray, sample: np.ndarray, probes: list[int], efs: list[int], m: int) -> list[dict]:
    from graft.ann import CandidateSearch, HNSWCandidates, IVFCandidates

    n = len(x)
    t0 = time.perf_counter()
    truth = exact_top(x, sample)
    print(f"n {n:,}: exact top {CANDIDATES} of {len(sample)} queries in {time.perf_counter() - t0:.1f} s",
          file=sys.stderr)
    rows = []

    def row(method: str, made: float, searched: float, found: np.ndarray) -> None:
        scaled = searched * n / len(sample)
        rows.append({"n": n, "method": method, "make_s": made, "search_s": scaled, "total_s": made + scaled,
                     "ms_per_query": 1000 * searched / len(sample), "recall20": recall(found, truth, 20),
                     "recall100": recall(found, truth, CANDIDATES)})
        r = rows[-1]
        print(f"n {n:,}: {method}: make {made:.1f} s, search {scaled:.1f} s (n queries), recall@20 "
              f"{r['recall20']:.3f} @100 {r['recall100']:.3f}", file=sys.stderr)

    for p in probes:
        t0 = time.perf_counter()
        ivf = IVFCandidates(x, CandidateSearch("faiss", nprobe=p))
        made = time.perf_counter() - t0
        found, searched = timed(ivf, x, sample)
        row(f"IVF-Flat, {ivf.lists} lists, {p} probed", made, searched, found)
        del ivf
    for ef in efs:
        t0 = time.perf_counter()
        hnsw = HNSWCandidates(x, CandidateSearch("hnsw", hnsw_m=m, hnsw_ef=ef))
        made = time.perf_counter() - t0
        found, searched = timed(hnsw, x, sample)
        row(f"HNSW, M {m}, efSearch {hnsw.ef_search(CANDIDATES)}", made, searched, found)
        del hnsw
    return rows


def main(argv: list[str] | None = None) -> int:
    ap = parser(__doc__)
    ap.add_argument("--vectors", required=True, help="an .npy file of vectors, or an index (with --facet)")
    ap.add_argument("--facet", default=None, help="take the index's pooled vectors of this facet")
    ap.add_argument("--sizes", default="10000,100000,1000000", help="vectors (first rows), comma-separated")
    ap.add_argument("--queries", type=int, default=2000, help="sampled query rows, the same at every size")
    ap.add_argument("--probes", default="16", help="IVF lists probed (comma-separated)")
    ap.add_argument("--ef", default="128", help="HNSW efSearch settings (comma-separated)")
    ap.add_argument("--m", type=int, default=16, help="HNSW neighbours a node")
    ap.add_argument("--name", default="", help="suffix of the results files")
    add_results_argument(ap)
    args = ap.parse_args(argv)
    sizes, probes, efs = (int_list(ap, v, f) for v, f in ((args.sizes, "--sizes"), (args.probes, "--probes"),
                                                           (args.ef, "--ef")))
    sample = np.sort(np.random.default_rng(0).choice(min(sizes), min(args.queries, min(sizes)), replace=False))
    rows: list[dict] = []
    for n in sizes:
        x = load_vectors(args.vectors, n, args.facet)
        if len(x) < n:
            ap.error(f"{args.vectors} holds {len(x):,} vectors, fewer than {n:,}")
        rows += size_rows(x, sample, probes, efs, args.m)
        del x

    import faiss

    from experiments.encoder_backend import cpu_flags

    meta = {"date": dt.date.today().isoformat(), "cpus": os.cpu_count(), "machine": platform.machine(),
            "cpu_flags": cpu_flags(), "python": platform.python_version(), "faiss": faiss.__version__,
            "vectors": args.vectors, "facet": args.facet, "queries": len(sample),
            "command": "python -m experiments.ann_growth " + " ".join(argv if argv is not None else sys.argv[1:])}
    lines = ["# The graph stage's candidate search as the corpus grows: IVF-Flat against HNSW", "",
             f"Command: `{meta['command']}`  ",
             f"Date: {meta['date']} · {meta['cpus']} cores, {meta['machine']} ({meta['cpu_flags']}), "
             f"Python {meta['python']}, faiss {meta['faiss']} · {len(sample):,} sampled queries a size", "",
             "| n | method | make s | search s (n queries) | total s | ms a query | recall@20 | recall@100 |",
             "|---:|---|---:|---:|---:|---:|---:|---:|"]
    lines += [f"| {r['n']:,} | {r['method']} | {r['make_s']:.1f} | {r['search_s']:.1f} | {r['total_s']:.1f} | "
              f"{r['ms_per_query']:.2f} | {r['recall20']:.3f} | {r['recall100']:.3f} |" for r in rows]
    methods = list(dict.fromkeys(r["method"].split(",")[0] for r in rows))
    lines += ["", "Growth exponent b of the total (make + search for n queries), first size to last:", ""]
    for method in methods:
        mine = [r for r in rows if r["method"].startswith(method)]
        if len(mine) > 1:
            b = growth_exponent(mine[0]["n"], mine[0]["total_s"], mine[-1]["n"], mine[-1]["total_s"])
            lines.append(f"- {method}: b = {b:.2f} ({mine[0]['total_s']:.1f} s -> {mine[-1]['total_s']:.1f} s)")
    lines += ["", "- search s: the sample's wall seconds scaled to n queries (one graph stage's search of one "
              "facet); make s measured whole", "- recall: share of each sampled row's exact top k (brute force "
              "over the n vectors) among its first k candidates"]
    write_tables(args.results, f"ann_growth{args.name}", meta, rows, lines)
    return 0


if __name__ == "__main__":
    sys.exit(main())
