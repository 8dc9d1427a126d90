"""What validating an index's arrays costs at load (`graft.artefacts`), at the size of a
10^6-paper index, and what bounding JSON costs (`graft.jsonio`).

Synthetic arrays of the shapes `graft build` writes for N papers: one facet graph (CSR, K = 20
out-edges per row, weights in [0, 1], saved compressed as the build saves it) and the title +
abstract embeddings (N x 384 float16, memory-mapped). Per artefact, alternating rounds:

- graph: scipy's `load_npz` (the load before the checks) against `load_csr` (the same load with the
  range checks: row pointers, column indices within N, finite non-negative weights);
- embeddings: a memory-mapped load and the first text query's pass over it (the float32 copy
  `graft.external` makes, then `papers @ q`), against the same with `check_vectors` at load (finite
  everywhere, read in blocks); and the load alone (a memory map: no read at all) against the check
  alone; the file is in the page cache (warm);
- tables: papers.parquet (N ids) and facets.parquet (ITEMS items a paper) read, and each item's
  paper row found, as `Index` did (a dict of ids and a Python loop over the items) against read and
  checked (`check_papers`: unique ids, column types; `check_facets`: every item's paper and facet
  known, which finds the item rows in polars);
- JSON: `json.loads` against `graft.jsonio.loads` on corpus-like lines (the common case: no scan)
  and on a JSON array of such records as one file (the scan runs).

    python -m experiments.artefact_checks [--papers 1000000] [--rounds 3] [--work DIR]

Writes docs/results/artefact_checks.{md,json}.
"""

from __future__ import annotations

import datetime as dt
import json
import os
import platform
import statistics
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import polars as pl
import scipy.sparse as sp

from experiments.common import add_results_argument, parser, write_tables
from graft.artefacts import check_facets, check_papers, check_vectors, load_csr
from graft.facets import FACETS
from graft.jsonio import loads

K = 20  # out-edges per paper and facet (BuildConfig.top_k)
DIM = 384  # MiniLM's dimension
ITEMS = 9  # facet items per paper (cs768 averages 9)


def timed(fn) -> float:
    t0 = time.perf_counter()
    fn()
    return time.perf_counter() - t0


def rounds(pair: dict, n: int) -> dict[str, float]:
    """Median seconds of each of the two ways, run alternately `n` times."""
    times: dict[str, list[float]] = {name: [] for name in pair}
    for _ in range(n):
        for name, fn in pair.items():
            times[name].append(timed(fn))
    return {name: statistics.median(t) for name, t in times.items()}


def main(argv: list[str] | None = None) -> None:
    ap = parser(__doc__)
    ap.add_argument("--papers", type=int, default=1_000_000, help="N: papers of the synthetic index")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--work", default=None, help="folder for the synthetic files (default: a temporary one)")
    add_results_argument(ap)
    args = ap.parse_args(argv)
    n = args.papers
    rng = np.random.default_rng(0)
    work = Path(args.work or tempfile.mkdtemp(prefix="artefact-checks-"))
    (work / "graph").mkdir(parents=True, exist_ok=True)
    (work / "embeddings").mkdir(parents=True, exist_ok=True)

    graph = sp.csr_matrix((rng.random(n * K, dtype=np.float32),
                           rng.integers(0, n, n * K, dtype=np.int32),
                           np.arange(0, n * K + 1, K, dtype=np.int32)), shape=(n, n))
    sp.save_npz(work / "graph" / "method.npz", graph, compressed=True)
    vectors = rng.standard_normal((n, DIM), dtype=np.float32)
    vectors /= np.linalg.norm(vectors, axis=1, keepdims=True)
    np.save(work / "embeddings" / "papers.npy", vectors.astype(np.float16))
    del graph, vectors
    query = rng.standard_normal(DIM).astype(np.float32)

    rows = []
    t = rounds({"plain": lambda: sp.csr_matrix(sp.load_npz(work / "graph" / "method.npz")),
                "checked": lambda: load_csr(work, "graph/method.npz", n)}, args.rounds)
    rows.append({"artefact": "graph/method.npz (load)", "size": f"{n * K:,} edges", **t})

    def plain_vectors() -> None:  # as `graft.external.RecordFacets.paper_vectors` reads them, then one query
        papers = np.load(work / "embeddings" / "papers.npy", mmap_mode="r")
        np.asarray(papers, dtype=np.float32) @ query

    def checked_vectors() -> None:
        papers = check_vectors(np.load(work / "embeddings" / "papers.npy", mmap_mode="r"), work,
                               "embeddings/papers.npy", DIM)
        np.asarray(papers, dtype=np.float32) @ query

    def check_only() -> None:
        check_vectors(np.load(work / "embeddings" / "papers.npy", mmap_mode="r"), work, "embeddings/papers.npy", DIM)

    plain_vectors()  # into the page cache, for both
    t = rounds({"plain": plain_vectors, "checked": checked_vectors}, args.rounds)
    rows.append({"artefact": "embeddings/papers.npy (load + first text query)", "size": f"{n:,} x {DIM} float16", **t})
    t = rounds({"plain": lambda: np.load(work / "embeddings" / "papers.npy", mmap_mode="r"),
                "checked": check_only}, args.rounds)
    rows.append({"artefact": "embeddings/papers.npy (load alone)", "size": f"{n:,} x {DIM} float16", **t})

    ids = pl.Series("paper_id", [f"paper-{i:07d}" for i in range(n)])
    pl.DataFrame({"paper_id": ids, "title": ids, "abstract": ids,
                  "year": pl.Series(rng.integers(1990, 2026, n), dtype=pl.Int32)}).write_parquet(work / "papers.parquet")
    owner = np.repeat(np.arange(n), ITEMS)
    pl.DataFrame({"paper_id": ids.gather(owner), "facet": np.tile(np.array(FACETS), len(owner) // 4 + 1)[:len(owner)],
                  "item_idx": pl.Series(np.zeros(len(owner)), dtype=pl.Int32),
                  "text": ids.gather(owner)}).write_parquet(work / "facets.parquet")
    def plain_tables() -> None:  # as `Index` read them and found each item's paper row before the checks
        papers, facets = pl.read_parquet(work / "papers.parquet"), pl.read_parquet(work / "facets.parquet")
        row_of = {pid: i for i, pid in enumerate(papers["paper_id"].to_list())}
        np.array([row_of[p] for p in facets["paper_id"].to_list()], dtype=np.int64)

    def checked_tables() -> None:  # read and checked; the check finds the item rows
        papers = check_papers(pl.read_parquet(work / "papers.parquet"), work, "papers.parquet")
        check_facets(pl.read_parquet(work / "facets.parquet"), papers["paper_id"], work, "facets.parquet")

    t = rounds({"plain": plain_tables, "checked": checked_tables}, args.rounds)
    rows.append({"artefact": "papers.parquet + facets.parquet (load + item rows)",
                 "size": f"{n:,} papers, {len(owner):,} items", **t})

    record = json.dumps({"id": "2020.acl-main.1", "title": "A study of [bracketed] things " * 3,
                         "abstract": "We study parsing. " * 80, "year": 2020, "authors": ["A. B", "C. D"],
                         "references": [f"ref-{i}" for i in range(40)]})
    lines = [record] * 20_000
    t = rounds({"plain": lambda: [json.loads(line) for line in lines],
                "checked": lambda: [loads(line) for line in lines]}, args.rounds)
    rows.append({"artefact": "corpus lines (JSONL)", "size": f"{len(lines):,} lines of {len(record):,} B", **t})
    array = "[" + ",".join(lines) + "]"
    t = rounds({"plain": lambda: json.loads(array), "checked": lambda: loads(array)}, args.rounds)
    rows.append({"artefact": "corpus as one JSON array", "size": f"{len(array) / 2**20:,.0f} MiB", **t})

    for row in rows:
        row["ratio"] = row["checked"] / row["plain"]
    command = "python -m experiments.artefact_checks " + " ".join(argv if argv is not None else sys.argv[1:])
    meta = {"command": command, "date": dt.date.today().isoformat(), "papers": n, "rounds": args.rounds,
            "cpus": os.cpu_count(), "machine": platform.machine(), "python": platform.python_version()}
    md = ["# Validating index arrays and bounding JSON: cost at load", "",
          f"Command: `{command.strip()}`  ",
          f"Date: {meta['date']} · {meta['cpus']} cores, {meta['machine']}, Python {meta['python']} · "
          f"synthetic index of {n:,} papers · {args.rounds} alternating rounds, medians, warm page cache", "",
          "| artefact | size | before (s) | checked (s) | ratio |", "|---|---|---:|---:|---:|"]
    md += [f"| {r['artefact']} | {r['size']} | {r['plain']:.3f} | {r['checked']:.3f} | {r['ratio']:.2f} |"
           for r in rows]
    md += ["", "- before: the load as it was (scipy's `load_npz`; a plain memory map; `json.loads`); checked: "
               "`graft.artefacts.load_csr`, `check_vectors`, `graft.jsonio.loads`",
           "- the first embeddings row includes the first text query's pass over the vectors (their float32 copy and "
           "`papers @ q`), which reads the whole file either way; the second is the load alone, where the "
           "memory map reads nothing before the check; opening an index (`Index.open`) reads only headers and is "
           "unchanged"]
    write_tables(args.results, "artefact_checks", meta, rows, md)


if __name__ == "__main__":
    main()
