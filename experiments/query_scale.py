"""Querying a large index: how long opening it, a corpus paper's query and a new paper's text query take,
and the memory they need, at growing corpus sizes.

Building a 10^6-paper index takes hours on 2 cores (docs/scale.md), so this benchmark assembles one in
minutes from a synthetic corpus (`experiments/synth_corpus.py`) and a built index of the real corpus it
recombines. Each synthetic paper takes the real facet items (text and MiniLM vectors, with a little noise)
of the real papers its sentences came from, at most `--items` a facet, and their mean title + abstract
vector; its citations are the synthetic corpus's own, and the citation score is computed as the build
computes it. The facet graphs are the build's own where `--graphs` holds them
(`experiments/scale_graph.py` writes them); otherwise each paper gets top-K edges to random papers
sharing its first source paper (a topic of ~N/6,500 papers) with random weights: the query path's cost
depends on the graphs' shapes (n, K edges a row, topic-local neighbourhoods), not on which edges they are.
With FAISS candidates (from 50,000 papers on) each facet's IVF index is trained and written as the build
writes it. The index follows the index contract and opens with `graft.Index.open`. `--coupling-cap M`
counts bibliographic coupling and co-citation (the citation score and the coupling constants) through
references cited by at most M papers: the synthetic corpus's citations are heavy-tailed as real ones
are, and at 10^6 papers the most cited are cited tens of thousands of times, each coupling every pair
of its citers (the sum of squared in-degrees, 8 * 10^7 pairs at 10^5 papers, grows past what 23 GB
holds); the citation links and matrices a query reads stay whole.

Timing: each measurement is a fresh process (its peak RSS is its own): open (`Index.open` and the
artefacts a first query reads), a corpus paper's query (the first and the median of the next ones, the
graph teacher as `graft query --paper` runs it), a new paper's text query (`graft query --text`: facets
read, items embedded, candidates searched and scored, the teacher's walk), and the whole
`graft query IDX --paper P` command.

    python -m experiments.query_scale assemble --corpus /tmp/synth-1e6.jsonl.gz --index CS768_INDEX --out IDX
        [--graphs DIR] [--items 2] [--top-k 20] [--coupling-cap 200]
    python -m experiments.query_scale time --indexes IDX1,IDX2 [--queries 20] [--name NAME]

`time` writes docs/results/query_scale{NAME}.{md,json}.
"""

from __future__ import annotations

import datetime as dt
import gzip
import json
import os
import platform
import resource
import statistics
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

from experiments.common import add_results_argument, parser, write_tables

FACETS = ("problem", "method", "result", "contribution")
CHUNK = 50_000


def _records(corpus: str):
    with gzip.open(corpus, "rt", encoding="utf-8") as fh:
        for line in fh:
            yield json.loads(line)


def assemble(corpus: str, real_index: str, out: str, *, graphs: str | None, items: int, top_k: int,
             coupling_cap: int = 0, seed: int = 0) -> dict:
    """Write the benchmark index at `out`; returns its counts and the seconds each part took."""
    import polars as pl
    import scipy.sparse as sp

    from graft.ann import IVFCandidates
    from graft.build_config import BuildConfig
    from graft.citations import citation_matrix, citation_signals
    from graft.index import Index
    from graft.manifest import new_manifest, record_stage
    from graft.store import write_npz, write_parquet

    timings: dict[str, float] = {}
    t0 = time.perf_counter()
    real = Index.open(real_index)
    real_row = real.row_of
    real_vecs = np.asarray(real.item_embeddings, dtype=np.float32)
    real_papers = np.asarray(real.paper_embeddings, dtype=np.float32)
    real_facet = real.facets["facet"].to_numpy()
    real_text, real_docid = real.facets["text"].to_list(), real.facets["docid"].to_list()
    by_paper: dict[int, dict[str, np.ndarray]] = {}
    order = np.argsort(real.item_rows, kind="stable")
    starts = np.searchsorted(real.item_rows[order], np.arange(real.n + 1))
    for r in range(real.n):
        mine = order[starts[r]:starts[r + 1]]
        by_paper[r] = {f: mine[real_facet[mine] == f] for f in FACETS}

    rng = np.random.default_rng(seed)
    ids, titles, abstracts, years, first_source = [], [], [], [], []
    owner, picked, facet_of, item_idx = [], [], [], []
    paper_src: list[np.ndarray] = []
    refs: list[list[str]] = []
    for i, rec in enumerate(_records(corpus)):
        ids.append(rec["id"])
        titles.append(rec["title"])
        abstracts.append(rec["abstract"])
        years.append(int(rec.get("year") or 2020))
        refs.append(rec.get("references") or [])
        src = [real_row[s] for s in rec["sources"] if s in real_row]
        paper_src.append(np.asarray(src[:4] or [0], dtype=np.int64))
        first_source.append(src[0] if src else 0)
        for f in FACETS:
            pool = np.concatenate([by_paper[s][f] for s in dict.fromkeys(src)]) if src else np.zeros(0, np.int64)
            if len(pool) > items:
                pool = rng.choice(pool, items, replace=False)
            owner.extend([i] * len(pool))
            picked.extend(pool.tolist())
            facet_of.extend([f] * len(pool))
            item_idx.extend(range(len(pool)))
    n = len(ids)
    owner_a, picked_a = np.asarray(owner, dtype=np.int64), np.asarray(picked, dtype=np.int64)
    timings["read"] = time.perf_counter() - t0

    root = Path(out)
    (root / "embeddings").mkdir(parents=True, exist_ok=True)
    (root / "graph").mkdir(exist_ok=True)
    t0 = time.perf_counter()
    row_of = {p: i for i, p in enumerate(ids)}
    citing = np.asarray([i for i, rs in enumerate(refs) for _ in rs], dtype=np.int64)
    cited = np.asarray([row_of[r] for rs in refs for r in rs], dtype=np.int64)
    a = citation_matrix(citing, cited, n)
    scored = a
    if coupling_cap:  # references cited by more papers couple too many pairs to count (see the docstring)
        indegree = np.asarray(a.sum(axis=0)).ravel()
        scored = (a @ sp.diags((indegree <= coupling_cap).astype(np.float32))).tocsr()
        scored.eliminate_zeros()
    signals = citation_signals(scored)
    timings["citations"] = time.perf_counter() - t0

    t0 = time.perf_counter()
    write_parquet(root / "papers.parquet", pl.DataFrame({
        "paper_id": ids, "title": titles, "abstract": abstracts,
        "year": pl.Series(years, dtype=pl.Int32), "venue": [""] * n,
        "authors": pl.Series([[] for _ in range(n)], dtype=pl.List(pl.String)),
        "n_citations": pl.Series(np.asarray(a.sum(axis=0)).ravel().astype(np.int32), dtype=pl.Int32)}))
    del titles, abstracts
    write_parquet(root / "citations.parquet", pl.DataFrame(
        {"citing": [ids[c] for c in citing.tolist()], "cited": [ids[c] for c in cited.tolist()]}))
    write_parquet(root / "facets.parquet", pl.DataFrame({
        "paper_id": [ids[o] for o in owner_a.tolist()], "facet": facet_of,
        "item_idx": pl.Series(item_idx, dtype=pl.Int32),
        "text": [real_text[p] for p in picked_a.tolist()], "docid": [real_docid[p] for p in picked_a.tolist()]}))
    d = real_vecs.shape[1]
    vecs = np.lib.format.open_memmap(root / "embeddings" / "items.npy", mode="w+", dtype=np.float16,
                                     shape=(len(picked_a), d))
    for lo in range(0, len(picked_a), CHUNK):  # a copied sentence is not the same sentence twice
        block = real_vecs[picked_a[lo:lo + CHUNK]]
        block = block + rng.normal(scale=0.01, size=block.shape).astype(np.float32)
        vecs[lo:lo + CHUNK] = block / np.linalg.norm(block, axis=1, keepdims=True)
    vecs.flush()
    os.link(root / "embeddings" / "items.npy", root / "embeddings" / "items_alone.npy")
    pv = np.lib.format.open_memmap(root / "embeddings" / "papers.npy", mode="w+", dtype=np.float16, shape=(n, d))
    for lo in range(0, n, CHUNK):
        block = np.stack([real_papers[s].mean(axis=0) for s in paper_src[lo:lo + CHUNK]])
        pv[lo:lo + CHUNK] = block / np.maximum(np.linalg.norm(block, axis=1, keepdims=True), 1e-9)
    pv.flush()
    timings["tables and vectors"] = time.perf_counter() - t0

    t0 = time.perf_counter()
    config = BuildConfig(top_k=top_k, text_coupling=0)
    params = config.graph_params()
    approximate = params.candidates.resolve(n) == "faiss"
    facet_col = np.asarray(facet_of)
    made = {}
    for f in FACETS:
        if graphs:
            g = sp.load_npz(Path(graphs) / f"{Path(corpus).name}.faiss.{f}.npz")
            if g.shape != (n, n):
                g = sp.load_npz(Path(graphs) / f"{Path(corpus).name}.exact.{f}.npz")
        else:
            g = synthetic_graph(np.asarray(first_source), top_k, rng)
        made[f] = g.tocsr()
        write_npz(root / "graph" / f"{f}.npz", made[f])
        if approximate:
            mine = np.flatnonzero(facet_col == f)  # in owner order
            pooled = np.zeros((n, d), dtype=np.float32)
            for lo in range(0, len(mine), CHUNK):
                part = mine[lo:lo + CHUNK]
                who = owner_a[part]
                starts = np.flatnonzero(np.r_[True, who[1:] != who[:-1]])
                pooled[who[starts]] += np.add.reduceat(np.asarray(vecs[part], dtype=np.float32), starts, axis=0)
            norms = np.linalg.norm(pooled, axis=1, keepdims=True)
            pooled = np.divide(pooled, norms, out=np.zeros_like(pooled), where=norms > 0)
            IVFCandidates(pooled, params.candidates).write(root / "graph" / f"ann_{f}.faiss")
            del pooled
    write_npz(root / "graph" / "citation.npz", signals.score)
    timings["graphs"] = time.perf_counter() - t0

    counts = {
        "papers": n, "citations": int(a.nnz),
        "facet_items": {f: int((facet_col == f).sum()) for f in FACETS},
        "edges": {f: int(g.nnz) for f, g in made.items()},
        "share_with_incoming_edge": {f: float((np.diff(g.tocsc().indptr) > 0).mean()) for f, g in made.items()},
        "paper_embeddings": n, "coupling_pairs": signals.n_coupling_pairs, "text_coupled_papers": 0,
        "cocitation_pairs": signals.n_cocitation_pairs, "candidates": params.candidates.resolve(n),
        "skipped_records": 0, "dropped_references": 0, "extractor": {}, "engine": "synthetic (query_scale)",
    }
    from graft.config import config_to_dict

    manifest = new_manifest(f"synthetic:{Path(corpus).name}")
    manifest["build_id"] = os.urandom(16).hex()
    manifest["corpus"] = {"source": corpus}
    manifest["embedding"] = dict(real.manifest["embedding"], dtype="float16")
    record_stage(root, manifest, "build", config=config_to_dict(config), counts=counts, timings=timings,
                 extra={"graphs": "build's (scale_graph)" if graphs else "synthetic: random, topic-local"})
    index = Index.open(root)
    if hasattr(index, "prepare_queries"):  # what the build writes after the index: the query files
        t0 = time.perf_counter()
        if coupling_cap:  # the coupling constants of the same capped counts as the citation score
            from graft.citations import coupling_row_log

            index._preparing = True
            index._derived(f"coupling-{config.citation_rescale}",
                           lambda: {"row_log": coupling_row_log(scored, config.citation_rescale)}, lambda x: x)
            index._preparing = False
        index.prepare_queries()
        timings["query files"] = time.perf_counter() - t0
    return {"papers": n, "items": len(picked_a), "citations": int(a.nnz), **{f"{k} s": v for k, v in timings.items()}}


def synthetic_graph(topic: np.ndarray, k: int, rng: np.random.Generator):
    """n x n top-K out-edges: each row k random other papers of its topic (`topic[i]`), weights in
    [0.3, 0.9) (a topic smaller than k + 1 gives its rows fewer edges)."""
    import scipy.sparse as sp

    n = len(topic)
    order = np.argsort(topic, kind="stable")
    sorted_topic = topic[order]
    lo = np.searchsorted(sorted_topic, topic, side="left")
    hi = np.searchsorted(sorted_topic, topic, side="right")
    pos = lo[:, None] + (rng.random((n, k)) * (hi - lo)[:, None]).astype(np.int64)
    cols = order[np.minimum(pos, hi[:, None] - 1)]
    rows = np.repeat(np.arange(n), k)
    cols = cols.ravel()
    keep = cols != rows
    w = rng.uniform(0.3, 0.9, size=int(keep.sum())).astype(np.float32)
    g = sp.csr_matrix((w, (rows[keep], cols[keep])), shape=(n, n))  # repeated pairs are summed ...
    g.data = np.minimum(g.data, 0.95).astype(np.float32)  # ... and kept in range
    return g


# ---- timing --------------------------------------------------------------------------------------

def _peak() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def probe(index: str, what: str, queries: int, seed: int) -> dict:
    """One measurement in this process."""
    t0 = time.perf_counter()
    import graft
    from graft import Index

    out: dict = {"import_s": time.perf_counter() - t0}
    t0 = time.perf_counter()
    idx = Index.open(index)
    out["open_s"] = time.perf_counter() - t0
    if what == "open":
        out["peak_rss_mib"] = _peak()
        return out
    import pyarrow.parquet as pq

    n = pq.read_metadata(Path(index) / "papers.parquet").num_rows
    rng = np.random.default_rng(seed)
    rows = rng.choice(n, queries + 1, replace=False)
    if what == "paper":
        ids = pq.read_table(Path(index) / "papers.parquet", columns=["paper_id"]).column(0)
        searcher = idx.searcher(retriever="teacher")
        times, answered = [], 0
        for r in rows.tolist():
            t0 = time.perf_counter()
            res = searcher.paper(str(ids[r]))
            times.append(time.perf_counter() - t0)
            answered += bool(res.hits)
    else:
        real = [json.loads(line) for line in gzip.open(os.environ.get("GRAFT_QUERY_TEXTS", str(Path(
            __file__).resolve().parents[2] / "shared" / "data" / "cs768" / "papers.jsonl.gz")), "rt")][:200]
        picks = [real[int(i) % len(real)] for i in rows.tolist()[: max(2, queries // 4)]]
        searcher = idx.searcher(retriever="teacher")
        times, answered = [], 0
        for rec in picks:
            t0 = time.perf_counter()
            res = searcher.text(rec["title"], rec["abstract"])
            times.append(time.perf_counter() - t0)
            answered += bool(res.hits)
    out.update(first_s=times[0], p50_s=statistics.median(times[1:]), queries=len(times) - 1, answered=answered,
               peak_rss_mib=_peak())
    del graft
    return out


def cli_wall(index: str, runs: int = 3) -> float:
    """Median wall seconds of `graft query INDEX --paper P` (a whole command)."""
    import pyarrow.parquet as pq

    pid = str(pq.read_table(Path(index) / "papers.parquet", columns=["paper_id"]).column(0)[0])
    graft = Path(sys.executable).with_name("graft")
    walls = []
    for _ in range(runs):
        t0 = time.perf_counter()
        subprocess.run([str(graft), "query", index, "--paper", pid, "--k", "10"], capture_output=True, check=True,
                       timeout=900)
        walls.append(time.perf_counter() - t0)
    return statistics.median(walls)


def time_indexes(indexes: list[str], queries: int, timeout: int, parts: tuple[str, ...] = ("open", "paper", "text"),
                 ) -> list[dict]:
    rows = []
    for index in indexes:
        import pyarrow.parquet as pq

        row: dict = {"index": index, "papers": pq.read_metadata(Path(index) / "papers.parquet").num_rows}
        for what in ("open", "paper", "text"):
            if what not in parts:
                row[what] = {"error": "not run"}
                continue
            cmd = [sys.executable, "-m", "experiments.query_scale", "probe", "--index", index, "--what", what,
                   "--queries", str(queries)]
            try:
                res = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, check=False)
            except subprocess.TimeoutExpired:
                row[what] = {"error": f"over {timeout} s"}
                continue
            if res.returncode:
                row[what] = {"error": (res.stderr.strip().splitlines() or ["?"])[-1][:200]}
                continue
            row[what] = json.loads(res.stdout.strip().splitlines()[-1])
        try:
            row["cli_s"] = cli_wall(index)
        except (subprocess.SubprocessError, OSError) as exc:
            row["cli_s"] = None
            row["cli_error"] = str(exc)[:200]
        print(row, file=sys.stderr)
        rows.append(row)
    return rows


def _cell(part: dict, key: str, fmt: str = "{:.2f}") -> str:
    if "error" in part:
        return part["error"] if key in ("first_s", "open_s") else "—"
    return fmt.format(part[key]) if key in part else "—"


def main(argv: list[str] | None = None) -> int:
    ap = parser(__doc__)
    sub = ap.add_subparsers(dest="cmd", required=True)
    a = sub.add_parser("assemble", help="write a benchmark index from a synthetic corpus")
    a.add_argument("--corpus", required=True)
    a.add_argument("--index", required=True, help="a built index of the real corpus the synthetic one recombines")
    a.add_argument("--out", required=True)
    a.add_argument("--graphs", help="folder of experiments/scale_graph.py's graphs of this corpus (else synthetic)")
    a.add_argument("--items", type=int, default=2, help="items a facet per paper, at most")
    a.add_argument("--top-k", type=int, default=20)
    a.add_argument("--coupling-cap", type=int, default=0,
                   help="count coupling and co-citation through references cited by at most this many papers (0: all)")
    t = sub.add_parser("time", help="time opening and querying indexes")
    t.add_argument("--indexes", required=True, help="index folders, comma-separated, smallest first")
    t.add_argument("--queries", type=int, default=20)
    t.add_argument("--timeout", type=int, default=1200, help="seconds a measurement may take")
    t.add_argument("--parts", default="open,paper,text", help="measurements to make (comma-separated)")
    t.add_argument("--name", default="")
    add_results_argument(t)
    p = sub.add_parser("probe")
    p.add_argument("--index", required=True)
    p.add_argument("--what", choices=("open", "paper", "text"), required=True)
    p.add_argument("--queries", type=int, default=20)
    args = ap.parse_args(argv)
    if args.cmd == "assemble":
        t0 = time.perf_counter()
        res = assemble(args.corpus, args.index, args.out, graphs=args.graphs, items=args.items, top_k=args.top_k,
                       coupling_cap=args.coupling_cap)
        print(json.dumps({**res, "seconds": round(time.perf_counter() - t0, 1), "peak_rss_mib": _peak()}))
        return 0
    if args.cmd == "probe":
        print(json.dumps(probe(args.index, args.what, args.queries, seed=0)))
        return 0
    rows = time_indexes(args.indexes.split(","), args.queries, args.timeout, tuple(args.parts.split(",")))
    meta = {"date": dt.date.today().isoformat(), "cpus": os.cpu_count(), "machine": platform.machine(),
            "python": platform.python_version(),
            "command": "python -m experiments.query_scale " + " ".join(argv if argv is not None else sys.argv[1:])}
    report(args.results, f"query_scale{args.name}", meta, rows)
    return 0


def report(results: str, stem: str, meta: dict, rows: list[dict]) -> None:
    """The table of `time`'s rows (`{stem}.md` and `.json` in `results`)."""
    commands = meta["command"] if isinstance(meta["command"], list) else [meta["command"]]
    lines = ["# Querying large indexes: open, a corpus paper, a new paper's text", "",
             *(f"Command: `{c}`  " for c in commands),
             f"Date: {meta['date']} · {meta['cpus']} cores, {meta['machine']}, Python {meta['python']}", "",
             "| papers | open s | open MiB | --paper first s | --paper p50 s | --paper MiB | --text first s "
             "| --text p50 s | --text MiB | `graft query --paper` s |",
             "|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for r in rows:
        o, pa, te = r["open"], r["paper"], r["text"]
        lines.append(f"| {r['papers']:,} | {_cell(o, 'open_s')} | {_cell(o, 'peak_rss_mib', '{:,.0f}')} | "
                     f"{_cell(pa, 'first_s')} | {_cell(pa, 'p50_s')} | {_cell(pa, 'peak_rss_mib', '{:,.0f}')} | "
                     f"{_cell(te, 'first_s')} | {_cell(te, 'p50_s')} | {_cell(te, 'peak_rss_mib', '{:,.0f}')} | "
                     f"{'—' if r.get('cli_s') is None else format(r['cli_s'], '.2f')} |")
    lines += ["", "first: the first query in a fresh process after `Index.open` (what it loads on first use); p50: the "
              "median of the next ones; MiB: the process's peak resident memory; the last column a whole command."]
    write_tables(results, stem, meta, rows, lines)


if __name__ == "__main__":
    sys.exit(main())
