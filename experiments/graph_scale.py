"""The facet graph's stage at growing corpus sizes: the candidate prefilter (exact, and an IVF index
measured against it) and the exact scoring of the candidate pairs.

The graph stage gives every paper its 100 nearest papers by pooled-vector cosine before scoring
them exactly (`graft.similarity.prefilter_blocks`): n^2 d multiply-adds and a selection over
n^2 scores a facet. Then every candidate pair is scored from the two papers' items. This measures,
on real sentence-embedding vectors (MiniLM, as the build's):

1. **prefilter**: each of the first n of a fixed shuffle of real vectors answered as a query against
   all n: cs768's abstract sentences, ACLSum's full-text sentences (each distinct text once) and the
   index's title + abstract vectors, 96,249 in all. Per n: the exact prefilter with the rows' best
   selected by `best_columns` (torch.topk on large blocks, ties by lower row: `graft build`) and by
   np.argpartition over every column (the selection before it: the same candidates), and an
   inverted-file (IVF) index at each number of probed lists, with the share of the exact top 20
   and top 100 it finds.
2. **graph**: each facet graph of the index built with the exact prefilter and with the IVF index
   in its place (at `--graph-probe` lists): time, and how many of the exact graph's edges it keeps
   (the prefilter only proposes candidates; kept edges are scored exactly either way).
3. **scoring**: papers made of 1, 2, 3, 1, 2, 3, ... consecutive sentences of those texts (their
   items), their exact prefilter candidates scored a few rows at a time against the candidates'
   items (`similarity.score_gathered`, `graft build`), pair by pair (`similarity.score_pairs`, what
   the build did beyond 16,000 papers) and against every item of the facet (what it did up to
   16,000 papers; here up to `--all-items-max`).

The IVF index (`ivf_candidates`, here only): spherical k-means lists (2 sqrt(n) by default, seeded),
the papers whose nearest list is g answered together against the union of their `n_probe` nearest
lists by one matrix product. It is what the design's "an ANN index beyond ~10^5 papers" would be;
the build does not use it (README, "Large corpora": at 96,000 points it takes 0.73x the exact
prefilter's time finding 94% of the top 20, 0.92x finding 97%).

    python -m experiments.graph_scale --index INDEX --work DIR [--sizes 24000,48000,96000]
        [--probes 4,8,16] [--lists-per-root 2] [--graph-probe 8] [--no-graph] [--limit-texts N]
        [--scoring-sizes 15000,44850] [--all-items-max 15000]

The sentence vectors are encoded once into DIR/points.npy (about 8 min on 2 cores). Writes
docs/results/graph_scale.{md,json}.
"""

from __future__ import annotations

import datetime as dt
import os
import platform
import sys
import time
from pathlib import Path

import numpy as np
import scipy.sparse as sp

from experiments.common import add_results_argument, int_list, parser, write_tables
from graft.similarity import best_columns

CANDIDATES = 100  # the build's n_candidates
PROBE = 8  # lists probed per query in the graph comparison
LISTS_PER_ROOT = 2.0  # k-means lists = this x sqrt(n)


def _rows_per_block(width: int, budget_floats: int) -> int:
    return int(max(1, budget_floats // max(width, 1)))


def nearest_lists(x: np.ndarray, centroids: np.ndarray, n_probe: int = 1,
                  budget_floats: int = 1 << 24) -> np.ndarray:
    """(n, n_probe) int64: each row's n_probe most similar centroids, most similar first (ties by
    lower list), computed a block of rows at a time."""
    k = centroids.shape[0]
    p = max(1, min(n_probe, k))
    out = np.empty((x.shape[0], p), dtype=np.int64)
    step = _rows_per_block(k, budget_floats)
    for s in range(0, x.shape[0], step):
        out[s : s + step] = best_columns(x[s : s + step] @ centroids.T, p)
    return out


def spherical_kmeans(x: np.ndarray, k: int, *, iterations: int = 10, sample: int | None = None,
                     seed: int = 0) -> np.ndarray:
    """k unit centroids of unit vectors x by spherical k-means (cosine assignment, normalised means).

    Args:
        x: (n, d) float32 rows; zero rows are never chosen as initial centroids.
        k: number of centroids (at most the number of non-zero rows).
        iterations: assignment / update rounds.
        sample: train on this many rows drawn without replacement (None: 256 per centroid).
        seed: the draw of the sample and of the initial centroids.
    Returns:
        (k, d) float32 centroids. A list left empty in a round is re-seeded with the training row
        least similar to its own centroid, so all k stay in use.
    """
    rng = np.random.default_rng(seed)
    n = x.shape[0]
    sample = 256 * k if sample is None else sample
    train = x if n <= sample else x[np.sort(rng.choice(n, sample, replace=False))]
    nonzero = np.flatnonzero(np.linalg.norm(train, axis=1) > 0)
    k = int(min(k, len(nonzero)))
    if k == 0:
        raise ValueError("spherical_kmeans needs at least one non-zero vector")
    centroids = np.ascontiguousarray(train[np.sort(rng.choice(nonzero, k, replace=False))], dtype=np.float32)
    m = train.shape[0]
    for _ in range(iterations):
        assign = nearest_lists(train, centroids)[:, 0]
        member = sp.csr_matrix((np.ones(m, dtype=np.float32), (assign, np.arange(m))), shape=(k, m))
        sums = np.asarray(member @ train, dtype=np.float32)
        norms = np.linalg.norm(sums, axis=1)
        empty = np.flatnonzero(norms == 0)
        if len(empty):
            fit = np.einsum("ij,ij->i", train, centroids[assign])
            fit[np.linalg.norm(train, axis=1) == 0] = np.inf  # a zero row cannot seed a list
            worst = np.argsort(fit, kind="stable")[: len(empty)]
            sums[empty[: len(worst)]] = train[worst]
            norms = np.linalg.norm(sums, axis=1)
        keep = norms > 0
        centroids[keep] = sums[keep] / norms[keep, None]
    return centroids


def ivf_candidates(
    x: np.ndarray,
    n_candidates: int,
    *,
    n_lists: int,
    n_probe: int = PROBE,
    seed: int = 0,
    budget_floats: int = 1 << 24,
) -> np.ndarray:
    """Each row's approximate top-`n_candidates` other rows of x by cosine.

    Args:
        x: (n, d) float32 unit (or zero) rows.
        n_candidates: candidates per row; c = min(n_candidates, n - 1).
        n_lists: k-means lists; n_probe: lists probed per row (the union over the rows sharing a
            nearest list is scored for each of them).
        seed: k-means seed.
        budget_floats: cosines held at a time per product.
    Returns:
        (n, c) int64 rows, best first (ties by lower row); a row never lists itself.
    """
    x = np.ascontiguousarray(x, dtype=np.float32)
    n = x.shape[0]
    c = max(0, min(n_candidates, n - 1))
    out = np.zeros((n, c), dtype=np.int64)
    if c == 0:
        return out
    centroids = spherical_kmeans(x, n_lists, seed=seed)
    k = centroids.shape[0]
    probes = nearest_lists(x, centroids, n_probe, budget_floats)
    home = probes[:, 0]
    by_list = np.argsort(home, kind="stable")  # the rows of each list, ascending
    bounds = np.searchsorted(home[by_list], np.arange(k + 1))
    closest = nearest_lists(centroids, centroids, k, budget_floats)  # lists by closeness to each list
    for g in range(k):
        rows = by_list[bounds[g] : bounds[g + 1]]
        if not len(rows):
            continue
        probed = np.zeros(k, dtype=bool)
        probed[probes[rows].ravel()] = True
        probed[g] = True
        members = np.flatnonzero(probed[home])
        for extra in closest[g]:  # too few papers in the probed lists: add the lists nearest to g
            if len(members) > c:
                break
            if not probed[extra]:
                probed[extra] = True
                members = np.flatnonzero(probed[home])
        vectors = x[members]
        step = _rows_per_block(len(members), budget_floats)
        for s in range(0, len(rows), step):
            q = rows[s : s + step]
            scores = x[q] @ vectors.T
            scores[np.arange(len(q)), np.searchsorted(members, q)] = -np.inf  # never itself
            out[q] = members[best_columns(scores, c)]
    return out


def real_points(index_dir: str | Path, work: Path, limit: int | None = None) -> tuple[np.ndarray, int]:
    """(m, d) float32 unit vectors of real texts, in text order, and how many of them are sentences
    (the index's title + abstract vectors follow them); encoded once into work (`limit`: only the
    first that many distinct sentences, for a quick run)."""
    path = work / ("points.npy" if limit is None else f"points_{limit}.npy")
    if not path.is_file():
        from graft.encoder import Encoder
        from graft.index import Index
        from graft.text import split_sentences
        from graphbuild.corpus import load_corpus

        idx = Index.open(index_dir)
        texts = [s for a in idx.papers["abstract"].to_list() for s in split_sentences(a or "")]
        texts += [s for t in load_corpus("aclsum").papers["full_text"].to_list() for s in split_sentences(t or "")]
        texts = list(dict.fromkeys(t for t in texts if len(t) > 20))[:limit]
        print(f"encoding {len(texts):,} sentences", file=sys.stderr)
        vecs = np.asarray(Encoder(None).encode(texts), dtype=np.float32)
        work.mkdir(parents=True, exist_ok=True)
        np.save(path.with_suffix(".sentences.npy"), np.array([len(vecs)]))
        if idx.paper_embeddings is not None:
            vecs = np.vstack([vecs, np.asarray(idx.paper_embeddings, dtype=np.float32)])
        np.save(path, vecs)
    x = np.load(path).astype(np.float32)
    x /= np.maximum(np.linalg.norm(x, axis=1, keepdims=True), 1e-12)
    return x, int(np.load(path.with_suffix(".sentences.npy"))[0])


def argpartition_columns(scores: np.ndarray, c: int) -> np.ndarray:
    """The prefilter's selection before `best_columns`: np.argpartition over every column, then the
    c ordered by (score descending, column)."""
    part = np.argpartition(-scores, c - 1, axis=1)[:, :c]
    vals = np.take_along_axis(scores, part, axis=1)
    return np.take_along_axis(part, np.lexsort((part, -vals), axis=1), axis=1)


def exact(x: np.ndarray, select=None) -> tuple[np.ndarray, float]:
    """The exact prefilter's candidates of every row of x and its seconds (`select`: in place of
    `best_columns`)."""
    from graft import similarity

    kept = similarity.best_columns
    if select is not None:
        similarity.best_columns = select
    try:
        t0 = time.perf_counter()
        cand = np.vstack([c for _, c in similarity.prefilter_blocks(x, x, CANDIDATES)])
        return cand, time.perf_counter() - t0
    finally:
        similarity.best_columns = kept


def recall(found: np.ndarray, truth: np.ndarray, top: int) -> float:
    """Mean share of each row's exact top `top` among its found candidates."""
    hits = 0
    for s in range(0, len(truth), 4096):
        f, t = found[s : s + 4096], truth[s : s + 4096, :top]
        hits += int((t[:, :, None] == f[:, None, :]).any(axis=2).sum())
    return hits / (len(truth) * top)


def lists_for(n: int, per_root: float) -> int:
    return int(max(1, min(n, round(per_root * np.sqrt(n)))))


def main(argv: list[str] | None = None) -> int:
    ap = parser(__doc__)
    ap.add_argument("--index", required=True, help="a built index (graft build): its sentences and facet graphs")
    ap.add_argument("--work", required=True, help="scratch folder for the encoded points")
    ap.add_argument("--sizes", default="24000,48000,96000")
    ap.add_argument("--probes", default="4,8,16", help="lists probed per query (comma-separated)")
    ap.add_argument("--lists-per-root", type=float, default=LISTS_PER_ROOT, help="k-means lists = this x sqrt(n)")
    ap.add_argument("--graph-probe", type=int, default=PROBE, help="probed lists of the graph comparison")
    ap.add_argument("--no-graph", action="store_true", help="skip the facet-graph comparison")
    ap.add_argument("--limit-texts", type=int, default=None, help="encode only this many sentences (quick runs)")
    ap.add_argument("--scoring-sizes", default="15000,44850", help="papers of the pair-scoring comparison")
    ap.add_argument("--all-items-max", type=int, default=15000,
                    help="largest n at which pairs are scored against every item too")
    ap.add_argument("--name", default="", help="suffix of the results files")
    add_results_argument(ap)
    args = ap.parse_args(argv)
    sizes, probes = int_list(ap, args.sizes, "--sizes"), int_list(ap, args.probes, "--probes")
    scoring_sizes = int_list(ap, args.scoring_sizes, "--scoring-sizes")

    from experiments.encoder_backend import cpu_flags

    texts, n_sentences = real_points(args.index, Path(args.work), args.limit_texts)
    points = texts[np.random.default_rng(0).permutation(len(texts))]
    if max(sizes) > len(points):
        ap.error(f"--sizes: only {len(points):,} points")
    best_columns(np.zeros((2, 1 << 20), dtype=np.float32), 1)  # torch imported before any timing
    rows: list[dict] = []
    for n in sizes:
        x = np.ascontiguousarray(points[:n])
        old, t_old = exact(x, argpartition_columns)
        truth, t_exact = exact(x)
        base = {"n": n, "exact_s": t_exact}
        rows.append({**base, "method": "exact, best_columns (graft build)", "seconds": t_exact, "ratio": 1.0,
                     "recall20": 1.0, "recall100": 1.0})
        rows.append({**base, "method": "exact, np.argpartition (before)", "seconds": t_old, "ratio": t_old / t_exact,
                     "recall20": recall(old, truth, 20), "recall100": recall(old, truth, CANDIDATES),
                     "rows_equal": float(np.mean((old == truth).all(axis=1)))})
        for p in probes:
            t0 = time.perf_counter()
            cand = ivf_candidates(x, CANDIDATES, n_lists=lists_for(n, args.lists_per_root), n_probe=p)
            t = time.perf_counter() - t0
            rows.append({**base, "method": f"ivf, {lists_for(n, args.lists_per_root)} lists, {p} probed",
                         "seconds": t, "ratio": t / t_exact, "recall20": recall(cand, truth, 20),
                         "recall100": recall(cand, truth, CANDIDATES)})
        for r in rows[-len(probes) - 2:]:
            print(f"n {n:,} {r['method']}: {r['seconds']:.1f} s, recall@20 {r['recall20']:.3f}", file=sys.stderr)

    graph_rows = [] if args.no_graph else graph_agreement(args.index, args.graph_probe, args.lists_per_root)
    scoring = pair_scoring(texts[:n_sentences], scoring_sizes, args.all_items_max)
    command = " ".join(["python -m experiments.graph_scale", *(argv if argv is not None else sys.argv[1:])])
    meta = {"command": command, "date": dt.date.today().isoformat(), "index": args.index, "points": len(points),
            "cores": os.cpu_count(), "cpu_flags": cpu_flags(), "candidates": CANDIDATES,
            "lists_per_root": args.lists_per_root, "graph_probe": args.graph_probe, "graph": graph_rows,
            "scoring": scoring}
    lines = [
        "# Candidate prefilter at growing n: exact selections and an IVF index",
        "",
        f"Command: `{command}`  ",
        f"Date: {meta['date']} · {os.cpu_count()} cores, {platform.machine()} ({cpu_flags()}), Python "
        f"{platform.python_version()} · {len(points):,} real MiniLM vectors (cs768 abstract sentences, ACLSum "
        f"full-text sentences, cs768 titles + abstracts), the first n of a seeded shuffle · top {CANDIDATES} a row",
        "",
        "| n | prefilter | s | ratio to graft build's | share of the exact top 20 | of the top 100 |",
        "|---:|---|---:|---:|---:|---:|",
    ]
    for r in rows:
        lines.append(f"| {r['n']:,} | {r['method']} | {r['seconds']:.1f} | {r['ratio']:.2f} | "
                     f"{r['recall20']:.3f} | {r['recall100']:.3f} |")
    if graph_rows:
        lines += ["", f"Facet graphs of `{args.index}` ({graph_rows[0]['papers']:,} papers) with the IVF index "
                  f"({lists_for(graph_rows[0]['papers'], args.lists_per_root)} lists, {args.graph_probe} probed) "
                  "in place of the exact prefilter:", "",
                  "| facet | exact s | ivf s | exact edges kept | rows with the same out-edges |",
                  "|---|---:|---:|---:|---:|"]
        for g in graph_rows:
            lines.append(f"| {g['facet']} | {g['exact_s']:.1f} | {g['ivf_s']:.1f} | {100 * g['shared_share']:.2f}% | "
                         f"{100 * g['rows_identical_share']:.2f}% |")
    if scoring:
        lines += ["", "Candidate pairs scored exactly: papers of 1, 2, 3, 1, 2, 3, ... consecutive sentences (their "
                  "items), each with its 100 exact prefilter candidates:", "",
                  "| papers | pairs | scoring | s | ratio to graft build's | max difference |",
                  "|---:|---:|---|---:|---:|---:|"]
        for r in scoring:
            lines.append(f"| {r['papers']:,} | {r['pairs']:,} | {r['way']} | {r['seconds']:.1f} | {r['ratio']:.2f} | "
                         f"{r['max_diff']:.1e} |")
    write_tables(args.results, "graph_scale" + (f"_{args.name}" if args.name else ""), meta, rows, lines)
    return 0


def pair_scoring(sentences: np.ndarray, sizes: list[int], all_items_max: int) -> list[dict]:
    """Each size's candidate pairs scored every way, against `score_gathered` (`graft build`)."""
    from experiments.graph_scoring import score_all_items
    from graft.similarity import group_items, prefilter_blocks, score_gathered, score_pairs

    counts = np.resize([1, 2, 3], len(sentences))
    papers = int(np.searchsorted(np.cumsum(counts), len(sentences), side="right"))
    owner = np.repeat(np.arange(papers), counts[:papers])
    out = []
    for n in sizes:
        if n > papers:
            raise ValueError(f"--scoring-sizes: only {papers:,} papers of consecutive sentences")
        m = int(np.sum(counts[:n]))
        items = group_items(owner[:m], sentences[:m], n)
        blocks = list(prefilter_blocks(items.pooled, items.pooled, CANDIDATES))
        rows = np.concatenate([np.repeat(np.arange(s, s + len(c)), c.shape[1]) for s, c in blocks])
        cols = np.concatenate([c.ravel() for _, c in blocks])
        ways = {"gathered (graft build)": score_gathered,
                "pairs": lambda items, rows, cols: score_pairs(items, rows, items, cols)}
        if n <= all_items_max:
            ways["all items"] = score_all_items
        base = None
        for way, run in ways.items():
            t0 = time.perf_counter()
            sims = run(items, rows, cols)
            t = time.perf_counter() - t0
            if base is None:
                base, base_t = sims, t
            out.append({"papers": n, "pairs": len(rows), "way": way, "seconds": t, "ratio": t / base_t,
                        "max_diff": float(np.abs(sims - base).max())})
            print(f"scoring {n:,} papers, {way}: {t:.1f} s", file=sys.stderr)
    return out


def graph_agreement(index_dir: str, probe: int, per_root: float) -> list[dict]:
    """Each facet graph built with the exact prefilter and with the IVF index in its place."""
    from experiments.index_agreement import edge_agreement
    from graft import edges as graph
    from graft.citations import citation_links
    from graft.facets import FACETS
    from graft.index import Index
    from graft.similarity import group_items
    from graphbuild.build import BuildConfig

    idx = Index.open(index_dir)
    params = BuildConfig.from_manifest(idx.manifest).graph_params()
    vectors = np.asarray(idx.item_embeddings, dtype=np.float32)
    cite = idx.citation_score
    links = citation_links(idx.citation_matrix, cite)

    def ivf_blocks(query, corpus, n_candidates, **_):
        cand = ivf_candidates(corpus, n_candidates, n_lists=lists_for(len(corpus), per_root), n_probe=probe)
        for start in range(0, len(cand), 2048):
            yield start, cand[start : start + 2048]

    exact_blocks = graph.prefilter_blocks
    out = []
    for facet in FACETS:
        sel = (idx.facets["facet"] == facet).to_numpy()
        items = group_items(idx.item_rows[sel], vectors[sel], idx.n)
        t0 = time.perf_counter()
        g_exact = graph.facet_graph(items, cite, links, params)
        t1 = time.perf_counter()
        graph.prefilter_blocks = ivf_blocks
        try:
            g_ivf = graph.facet_graph(items, cite, links, params)
        finally:
            graph.prefilter_blocks = exact_blocks
        t2 = time.perf_counter()
        out.append({"facet": facet, "papers": idx.n, "exact_s": t1 - t0, "ivf_s": t2 - t1,
                    **edge_agreement(g_exact, g_ivf)})
        print(f"graph {facet}: exact {t1 - t0:.1f} s, ivf {t2 - t1:.1f} s, "
              f"{100 * out[-1]['shared_share']:.2f}% edges kept", file=sys.stderr)
    return out


if __name__ == "__main__":
    sys.exit(main())
