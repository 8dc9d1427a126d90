"""What word overlap (`graft.lexical`) costs on a large index: the lexicon fitted on every paper's
title + abstract, the papers' TF-IDF rows, and one text query's cosines with every paper, through
the rows (a sparse product over all of them) and through its terms' postings (the transpose, what
`graft.Index.lexical_cosines` reads).

    python -m experiments.lexicon_scale INDEX

Prints a table (nothing is written); peak memory is the process's, the index's papers read whole.
"""

from __future__ import annotations

import resource
import sys
import time


def main(argv: list[str] | None = None) -> int:
    import numpy as np

    from experiments.common import parser
    from graft.index import Index
    from graft.lexical import Lexicon
    from graft.text import paper_texts

    ap = parser(__doc__)
    ap.add_argument("index", help="a built index")
    args = ap.parse_args(argv)
    idx = Index.open(args.index)

    def peak() -> str:
        return f"{resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024:,.0f}"

    print(f"| step | s | peak MiB | ({idx.n:,} papers)")
    print("|---|---:|---:|")
    t = time.perf_counter()
    texts = paper_texts(idx.papers)
    print(f"| read titles and abstracts | {time.perf_counter() - t:.1f} | {peak()} |", flush=True)
    t = time.perf_counter()
    lexicon = Lexicon.fit(texts)
    print(f"| fit the lexicon ({lexicon.size:,} terms) | {time.perf_counter() - t:.1f} | {peak()} |", flush=True)
    t = time.perf_counter()
    rows = lexicon.vectors(texts)
    size = (rows.data.nbytes + rows.indices.nbytes + rows.indptr.nbytes) / 2**20
    print(f"| the papers' rows ({rows.nnz / max(1, rows.shape[0]):.0f} terms a paper, {size:,.0f} MiB) | "
          f"{time.perf_counter() - t:.1f} | {peak()} |", flush=True)
    query = lexicon.vectors([texts[len(texts) // 2]])
    postings = rows.T.tocsr()
    times = {"through the rows": [], "through the postings": []}
    for _ in range(5):
        t = time.perf_counter()
        a = (rows @ query.T).toarray().ravel()
        times["through the rows"].append(time.perf_counter() - t)
        t = time.perf_counter()
        b = np.asarray(postings[query.indices].T @ query.data).ravel()
        times["through the postings"].append(time.perf_counter() - t)
    if not np.allclose(a, b, atol=1e-6):
        raise SystemExit("the two ways disagree")
    for way, ts in times.items():
        print(f"| one text's cosines with every paper, {way} (median of 5) | {sorted(ts)[2]:.3f} | {peak()} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
