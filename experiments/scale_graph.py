"""The graph stage on synthetic corpora of growing size (`experiments/synth_corpus.py`), with exact,
FAISS IVF and HNSW candidates: wall time and peak memory, and the growth exponents they fit.

Encoding 10^5 synthetic papers' sentences takes hours on 2 cores, and only the graph stage is
measured here: each synthetic paper takes as its facet items the real items (MiniLM vectors, from a
built index of the real corpus) of the real papers its sentences came from (`sources`), up to
`--items` a facet. Citations are the synthetic corpus's own. Each run (size x candidates) is a fresh
process, so its peak RSS is its own: citation signals (coupling, co-citation), text coupling of
link-less papers (skipped: `--text-coupling 0`, it is exact and per paper), then the four facet graphs
(`graphbuild.build.facet_graphs`) as `graft build` makes them; the share of the exact graphs' edges
that each other method's graphs keep (the exact graphs of this run, or of an earlier run into the same
`--work` folder).

    python -m experiments.scale_graph --index INDEX --work DIR
        --corpora /tmp/synth-1e4.jsonl.gz,/tmp/synth-1e5.jsonl.gz [--methods exact,faiss,hnsw] [--items 4] [--name NAME]

Writes docs/results/scale_graph{NAME}.{md,json}.
"""

from __future__ import annotations

import datetime as dt
import gzip
import json
import os
import platform
import resource
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

from experiments.common import add_results_argument, growth_exponent, parser, write_tables


def run_one(index_dir: str, corpus: str, method: str, items: int, work: str, linked: int) -> dict:
    """One graph stage in this process: seconds per part and peak RSS; the graphs written to `work`."""
    import polars as pl

    from graft.build_config import BuildConfig
    from graft.citations import citation_matrix, citation_signals
    from graft.index import Index
    from graphbuild.build import facet_graphs

    t0 = time.perf_counter()
    idx = Index.open(index_dir)
    real_row = {p: i for i, p in enumerate(idx.paper_ids)}
    vectors = np.asarray(idx.item_embeddings, dtype=np.float32)
    facet_col = idx.facets["facet"].to_numpy()
    by_paper = pl.DataFrame({"row": idx.item_rows, "item": np.arange(len(facet_col))}).group_by("row").agg("item")
    items_of = {int(r): np.asarray(v) for r, v in zip(by_paper["row"], by_paper["item"])}
    rng = np.random.default_rng(0)
    owner, picked, ids, citing, cited = [], [], [], [], []
    with gzip.open(corpus, "rt", encoding="utf-8") as fh:
        recs = [json.loads(line) for line in fh]
    row_of = {r["id"]: i for i, r in enumerate(recs)}
    for i, rec in enumerate(recs):
        ids.append(rec["id"])
        pool = np.concatenate([items_of.get(real_row.get(s, -1), np.zeros(0, np.int64)) for s in rec["sources"]])
        for f in ("problem", "method", "result", "contribution"):
            mine = pool[facet_col[pool] == f] if len(pool) else pool
            if len(mine) > items:
                mine = rng.choice(mine, items, replace=False)
            owner.extend([i] * len(mine))
            picked.extend(mine.tolist())
        citing.extend([i] * len(rec["references"]))
        cited.extend(row_of[r] for r in rec["references"])
    n = len(recs)
    owner_a, picked_a = np.asarray(owner, dtype=np.int64), np.asarray(picked, dtype=np.int64)
    noise = rng.normal(scale=0.01, size=(len(picked_a), vectors.shape[1])).astype(np.float32)
    item_vecs = vectors[picked_a] + noise  # a copied sentence is not the same sentence twice
    item_vecs /= np.linalg.norm(item_vecs, axis=1, keepdims=True)
    t_setup = time.perf_counter() - t0
    t0 = time.perf_counter()
    a = citation_matrix(np.asarray(citing), np.asarray(cited), n)
    signals = citation_signals(a)
    t_cite = time.perf_counter() - t0
    config = BuildConfig(candidates=method, text_coupling=0, linked_candidates=linked)
    t0 = time.perf_counter()
    graphs = facet_graphs(owner_a, facet_col[picked_a], item_vecs, a, signals, config.graph_params())
    t_graph = time.perf_counter() - t0
    from graft.store import write_npz

    for facet, g in graphs.items():
        write_npz(Path(work) / f"{Path(corpus).name}.{method}.{facet}.npz", g)
    return {"papers": n, "items": len(picked_a), "citations": int(a.nnz), "method": method,
            "setup_s": t_setup, "citations_s": t_cite, "graph_s": t_graph,
            "edges": int(sum(g.nnz for g in graphs.values())),
            "peak_rss_mib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024}


def kept(work: Path, name: str, method: str) -> dict:
    """Share of the exact graphs' edges (all facets) that `method`'s graphs keep."""
    import scipy.sparse as sp

    from experiments.index_agreement import edge_agreement
    from graft.facets import FACETS

    agree = [edge_agreement(sp.load_npz(work / f"{name}.exact.{f}.npz"), sp.load_npz(work / f"{name}.{method}.{f}.npz"))
             for f in FACETS]
    edges = sum(a["edges_a"] for a in agree)
    return {"kept": sum(a["shared_share"] * a["edges_a"] for a in agree) / max(edges, 1)}


def kept_cell(row: dict) -> str:
    if row["method"] == "exact":
        return "100.00%"
    return f"{100 * row['kept']:.2f}%" if "kept" in row else "–"


def exponent(rows: list[dict], method: str, key: str) -> float | None:
    pts = sorted((r["papers"], r[key]) for r in rows if r["method"] == method and r[key] > 0)
    if len(pts) < 2:
        return None
    (n0, t0), (n1, t1) = pts[0], pts[-1]
    return growth_exponent(n0, t0, n1, t1)


def main(argv: list[str] | None = None) -> int:
    ap = parser(__doc__)
    ap.add_argument("--index", required=True, help="a built index of the real corpus the synthetic ones recombine")
    ap.add_argument("--corpora", required=True, help="synthetic corpora (comma-separated, smallest first)")
    ap.add_argument("--methods", default="exact,faiss", help="candidate methods to run (comma-separated)")
    ap.add_argument("--items", type=int, default=4, help="items a facet per synthetic paper, at most")
    ap.add_argument("--linked-candidates", type=int, default=None,
                    help="coupled or co-cited candidates a paper (the build's default; 0 = all)")
    ap.add_argument("--work", required=True, help="scratch folder for the graphs (compared across methods)")
    ap.add_argument("--one", nargs=2, metavar=("CORPUS", "METHOD"), help=argparse_hidden())
    ap.add_argument("--name", default="", help="suffix of the results files")
    add_results_argument(ap)
    args = ap.parse_args(argv)
    if args.linked_candidates is None:
        from graft.edges import LINKED_CANDIDATES

        args.linked_candidates = LINKED_CANDIDATES
    if args.one:
        print(json.dumps(run_one(args.index, args.one[0], args.one[1], args.items, args.work,
                                 args.linked_candidates)))
        return 0
    rows = []
    for corpus in args.corpora.split(","):
        for method in args.methods.split(","):
            cmd = [sys.executable, "-m", "experiments.scale_graph", "--index", args.index, "--corpora", corpus,
                   "--items", str(args.items), "--work", args.work, "--one", corpus, method,
                   "--linked-candidates", str(args.linked_candidates)]
            res = subprocess.run(cmd, capture_output=True, text=True, check=False)
            if res.returncode:
                print(res.stderr[-3000:], file=sys.stderr)
                return res.returncode
            rows.append({"corpus": corpus, **json.loads(res.stdout.strip().splitlines()[-1])})
            # the exact graphs of this run, or of an earlier one into the same work folder
            if method != "exact" and (Path(args.work) / f"{Path(corpus).name}.exact.problem.npz").is_file():
                rows[-1].update(kept(Path(args.work), Path(corpus).name, method))
            print(rows[-1], file=sys.stderr)
    meta = {"date": dt.date.today().isoformat(), "cpus": os.cpu_count(), "machine": platform.machine(),
            "python": platform.python_version(), "index": args.index, "linked_candidates": args.linked_candidates,
            "command": "python -m experiments.scale_graph " + " ".join(argv if argv is not None else sys.argv[1:])}
    lines = ["# The graph stage on synthetic corpora: exact and approximate candidates", "",
             f"Command: `{meta['command']}`  ",
             f"Date: {meta['date']} · {meta['cpus']} cores (shared with other work), {meta['machine']}, "
             f"Python {meta['python']}", "",
             f"Coupled or co-cited candidates a paper: {args.linked_candidates or 'all'} (`--linked-candidates`).", "",
             "| papers | items | citations | candidates | citation signals s | facet graphs s | edges | exact edges kept "
             "| peak RSS MiB |",
             "|---:|---:|---:|---|---:|---:|---:|---:|---:|"]
    lines += [f"| {r['papers']:,} | {r['items']:,} | {r['citations']:,} | {r['method']} | {r['citations_s']:.1f} | "
              f"{r['graph_s']:.1f} | {r['edges']:,} | {kept_cell(r)} | {r['peak_rss_mib']:,.0f} |"
              for r in rows]
    fits = {m: exponent(rows, m, "graph_s") for m in args.methods.split(",")}
    if any(b is not None for b in fits.values()):
        lines += ["", "Growth exponent of the facet graphs' time between the smallest and largest size (t ~ n^b): "
                  + ", ".join(f"{m} b = {b:.2f}" for m, b in fits.items() if b is not None) + "."]
    write_tables(args.results, f"scale_graph{args.name}", {**meta, "exponents": fits}, rows, lines)
    return 0


def argparse_hidden() -> str:
    import argparse

    return argparse.SUPPRESS


if __name__ == "__main__":
    sys.exit(main())
