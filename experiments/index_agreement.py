"""How far two builds of the same corpus agree: vectors, facet items and graph edges.

For checking that a change to how an index is built (another encoder backend, batch size or
device) leaves the index as it was: both must hold the same papers in the same order. Prints, per
facet, the share of the first index's edges that the second has too and the largest weight
difference on those shared edges; and the largest difference of the item and paper vectors.

    python -m experiments.index_agreement INDEX_A INDEX_B [--name NAME]

Writes docs/results/index_agreement[_NAME].{md,json}.
"""

from __future__ import annotations

import datetime as dt
import sys
from pathlib import Path
from typing import Any

from experiments.common import add_results_argument, parser, write_tables


def edge_agreement(a: Any, b: Any) -> dict[str, float]:
    """Edges of CSR graph `a` also in `b` (share of `a`'s), and the largest |w_a - w_b| over them."""
    import numpy as np

    a, b = a.tocsr(), b.tocsr()
    shared = a.multiply(b != 0)  # a's weights where b has an edge too
    both = shared.nnz
    diff = abs(shared - b.multiply(a != 0))
    return {"edges_a": int(a.nnz), "edges_b": int(b.nnz), "shared_share": both / max(a.nnz, 1),
            "max_weight_diff": float(diff.max()) if diff.nnz else 0.0,
            "rows_identical_share": float(np.mean([
                np.array_equal(a.indices[a.indptr[i]:a.indptr[i + 1]], b.indices[b.indptr[i]:b.indptr[i + 1]])
                for i in range(a.shape[0])]))}


def agreement(index_a: str | Path, index_b: str | Path) -> dict[str, Any]:
    """Agreement of two indexes of the same papers (see the module's docstring).

    Raises:
        ValueError: the indexes hold different papers or orders.
    """
    import numpy as np

    from graft.facets import FACETS
    from graft.index import Index

    a, b = Index.open(index_a), Index.open(index_b)
    if a.papers["paper_id"].to_list() != b.papers["paper_id"].to_list():
        raise ValueError(f"{index_a} and {index_b} hold different papers (or the same in another order)")
    out: dict[str, Any] = {"papers": a.n, "facet_items_equal": a.facets.equals(b.facets), "facets": {}}
    for facet in FACETS:
        out["facets"][facet] = edge_agreement(a.graphs[facet], b.graphs[facet])
    if out["facet_items_equal"]:
        out["max_item_vector_diff"] = float(np.abs(np.asarray(a.item_embeddings, np.float32)
                                                   - np.asarray(b.item_embeddings, np.float32)).max())
    pa, pb = a.paper_embeddings, b.paper_embeddings
    if pa is not None and pb is not None:
        out["max_paper_vector_diff"] = float(np.abs(np.asarray(pa, np.float32) - np.asarray(pb, np.float32)).max())
    out["builds"] = {name: idx.manifest.get("embedding", {}) for name, idx in (("a", a), ("b", b))}
    return out


def agreement_lines(res: dict[str, Any], a: str = "A", b: str = "B") -> list[str]:
    """Markdown of an `agreement` result: the per-facet edge table, then the items and vectors,
    naming the two indexes `a` and `b`."""
    lines = [f"| facet | edges {a} | edges {b} | {a}'s edges in {b} | rows with the same out-edges | "
             "max weight difference |", "|---|---:|---:|---:|---:|---:|"]
    for facet, r in res["facets"].items():
        lines.append(f"| {facet} | {r['edges_a']:,} | {r['edges_b']:,} | {100 * r['shared_share']:.2f}% | "
                     f"{100 * r['rows_identical_share']:.2f}% | {r['max_weight_diff']:.1e} |")
    lines += ["", f"- facet items equal: {'yes' if res['facet_items_equal'] else 'no'}"]
    if "max_item_vector_diff" in res:
        lines.append(f"- largest item-vector difference (embeddings/items.npy): {res['max_item_vector_diff']:.1e}")
    if "max_paper_vector_diff" in res:
        lines.append(f"- largest paper-vector difference (embeddings/papers.npy): {res['max_paper_vector_diff']:.1e}")
    return lines


def main(argv: list[str] | None = None) -> int:
    ap = parser(__doc__)
    ap.add_argument("index_a")
    ap.add_argument("index_b")
    ap.add_argument("--name", default="", help="suffix of the results files")
    add_results_argument(ap)
    args = ap.parse_args(argv)
    try:
        res = agreement(args.index_a, args.index_b)
    except ValueError as exc:
        print(exc, file=sys.stderr)
        return 1
    command = "python -m experiments.index_agreement " + " ".join(argv if argv is not None else sys.argv[1:])
    meta = {"command": command, "date": dt.date.today().isoformat(), "index_a": args.index_a,
            "index_b": args.index_b, **{k: v for k, v in res.items() if k != "facets"}}
    rows = [{"facet": f, **v} for f, v in res["facets"].items()]
    lines = ["# Agreement of two builds", "", f"Command: `{command}`  ", f"Date: {meta['date']} · {res['papers']} papers · "
             f"A: {res['builds']['a']} · B: {res['builds']['b']}", "", *agreement_lines(res)]
    write_tables(args.results, "index_agreement" + (f"_{args.name}" if args.name else ""), meta, rows, lines)
    return 0


if __name__ == "__main__":
    sys.exit(main())
