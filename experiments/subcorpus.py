"""A citation-dense sub-corpus of a corpus, chosen by a fixed rule: the k-core of its citation graph.

The rule, fixed before any result on the sub-corpus was seen: take the undirected graph of the
corpus's in-corpus citation links (a paper's references that are papers of the corpus; direction
and duplicates ignored), and keep the k-core (every kept paper has >= k links to other kept papers)
with the largest k whose core still holds at least `--min-papers` papers. Reference lists keep only
links into the sub-corpus; every other field is the paper's own. Papers are written in the source
file's order.

A k-core keeps the papers the graph knows most about: every one has at least k citation neighbours
inside, so leak-free in-corpus queries (>= 5 neighbours) are plentiful, and out-of-corpus hold-outs
keep references to find. It is a corpus small enough for a CPU to train the generative retriever on
all of its pairs.

    python -m experiments.subcorpus CORPUS --min-papers 500 --out WORK/corpus.jsonl

Prints the k chosen, the core's size and its link count; writes the sub-corpus as JSONL.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

from experiments.common import parser


def read_records(path: Path) -> list[dict[str, Any]]:
    """The records of a JSONL or JSONL.gz corpus, as they are (no validation: `graft eval prepare` does it)."""
    import gzip

    with (gzip.open(path, "rt", encoding="utf-8") if path.suffix == ".gz" else path.open(encoding="utf-8")) as f:
        return [json.loads(line) for line in f if line.strip()]


def citation_graph(records: list[dict[str, Any]]) -> Any:
    """The undirected graph of in-corpus citation links (every paper a node, isolated ones too)."""
    import networkx as nx

    ids = {r["id"] for r in records}
    graph = nx.Graph()
    graph.add_nodes_from(ids)
    graph.add_edges_from((r["id"], ref) for r in records for ref in r.get("references") or []
                         if ref in ids and ref != r["id"])
    return graph


def densest_core(graph: Any, min_papers: int) -> tuple[int, set[str]]:
    """The k-core with the largest k holding at least `min_papers` papers: (k, its papers)."""
    import networkx as nx

    core = nx.core_number(graph)
    best_k, best = 0, set(graph.nodes)
    for k in sorted(set(core.values())):
        kept = {p for p, c in core.items() if c >= k}
        if len(kept) < min_papers:
            break
        best_k, best = k, kept
    if len(best) < min_papers:
        raise SystemExit(f"the corpus has only {len(best)} papers; --min-papers {min_papers} cannot be met")
    return best_k, best


def sub_corpus(records: list[dict[str, Any]], kept: set[str]) -> list[dict[str, Any]]:
    """The kept papers in source order, their references restricted to kept papers."""
    return [{**r, "references": [x for x in r.get("references") or [] if x in kept]}
            for r in records if r["id"] in kept]


def main(argv: list[str] | None = None) -> int:
    ap = parser(__doc__)
    ap.add_argument("corpus", type=Path, help="corpus file (JSONL or JSONL.gz) with references")
    ap.add_argument("--min-papers", type=int, default=500, help="the core must hold at least this many papers")
    ap.add_argument("--out", type=Path, required=True, help="sub-corpus JSONL to write")
    args = ap.parse_args(argv)
    records = read_records(args.corpus)
    graph = citation_graph(records)
    k, kept = densest_core(graph, args.min_papers)
    out = sub_corpus(records, kept)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    with args.out.open("w", encoding="utf-8") as f:
        for r in out:
            f.write(json.dumps(r, ensure_ascii=False) + "\n")
    links = graph.subgraph(kept).number_of_edges()
    print(f"{k}-core of {args.corpus}: {len(out):,} of {len(records):,} papers, {links:,} citation links "
          f"({2 * links / len(out):.1f} per paper) -> {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
