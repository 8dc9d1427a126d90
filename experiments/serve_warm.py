"""What `graft serve` loads before its first page (`graft.web.data.Explorer.warm`), step by step:
seconds and the process's peak resident memory after each step, on one index; then the median of
five searches of a title fragment (`Explorer.search`, what the search box runs).

    python -m experiments.serve_warm INDEX

Prints a table (nothing is written).
"""

from __future__ import annotations

import resource
import sys
import time
from collections.abc import Callable
from typing import Any


def main(argv: list[str] | None = None) -> int:
    from experiments.common import parser

    ap = parser(__doc__)
    ap.add_argument("index", help="a built index")
    args = ap.parse_args(argv)
    t0 = time.perf_counter()
    from graft.web.data import DEFAULT_K, Explorer

    explorer = Explorer(args.index)
    idx = explorer.index
    print(f"| step | s | peak MiB |  (imports and opening: {time.perf_counter() - t0:.1f} s, {idx.n:,} papers)")
    print("|---|---:|---:|")
    start = time.perf_counter()

    def step(name: str, load: Callable[[], Any]) -> None:
        t = time.perf_counter()
        load()
        peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
        print(f"| {name} | {time.perf_counter() - t:.1f} | {peak:,.0f} |", flush=True)

    # the steps of `Explorer.warm`, in its order
    step("titles and years", lambda: (idx.paper_column("title"), idx.paper_column("year")))
    step("graphs", lambda: idx.graphs)
    step("citation links", lambda: idx.citation_links)
    step("paper rows", lambda: idx.row_of)
    step("item groups", lambda: idx.item_groups)
    step("title search", explorer._titles)
    step("summary", explorer.summary)
    if idx.n:
        step("first related papers", lambda: explorer.related_of({"id": idx.paper_ids[0]}, k=DEFAULT_K))
    print(f"| **warm, in all** | **{time.perf_counter() - start:.1f}** | |")
    if idx.n:
        fragment = " ".join(str(idx.paper_column("title")[0]).split()[:3]) or "learning"
        times = []
        for _ in range(5):
            t = time.perf_counter()
            explorer.search(fragment)
            times.append(time.perf_counter() - t)
        peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
        print(f"| a title search, median of 5 | {sorted(times)[2]:.2f} | {peak:,.0f} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
