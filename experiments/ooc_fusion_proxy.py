"""Out of corpus, what can the generative retriever's fusion reach? A proxy without a trained model.

Out of corpus, GRAFT decodes each facet's list from the query's extracted items and fuses the lists
by graph-RRF with support from *mutual corroboration* (`graft.fusion.corroboration`): the query
has no row in the graph. No model is trained here. Each facet's decoded list is stood in for by the
L papers whose facet items are most similar to the query's (facet similarity alone, what a decoder
that generalised perfectly by meaning would return). The split's in-corpus papers are posed as
text-only queries (their own item vectors, the paper itself never returned; gold = its citation
neighbours), and these fusions are compared:

- `rrf`: plain RRF of the four lists;
- `graph-rrf (corroboration)`: GRAFT's out-of-corpus fusion;
- `graph-walk`: the lists' support weights taken as the query's facet rows and walked by the
  graph teacher (two hops over the stored graph; `graft query --fusion graph-walk`, built by
  `graft.fusion.support_rows`): an expansion through the sparse graph the retriever holds;
- `graph-walk + links of its first R`: that walk again with beta x the share of its first R papers that
  a paper cites or is cited by added to the rows (the feedback pass of the teacher's rows);
- `graph-rrf + citation channel`, `+ text channel W_t`: the generative retriever's out-of-corpus
  fusion as `graft query --text` runs it (`graft.candidates.CandidateFusion.fuse_items`, the code
  the trained model's lists go through): the citation channel at W = `CITATION_WEIGHT`, then the
  text channel (the query's `TEXT_NEIGHBOURS` nearest papers by title + abstract as a run of weight
  W_t, `graft.fusion.TEXT`); `graph-walk + both channels`: the same in the graph-walk fusion;
- `teacher (graft query --text)`: the graph teacher from the paper's text-only rows, text coupling
  and the feedback pass (`ExternalScorer`'s rows with M = `TEXT_NEIGHBOURS`, R = `FEEDBACK`): the
  out-of-corpus target GRAFT is to match.

The query papers sit in the graph, so their own citations shaped their neighbours' edges: compare
rows with each other, not with the out-of-corpus tables. A real model's lists differ from the
stand-in (it is trained on graph edges, whose weights hold citation coupling too); the GPU run
measures the real ones. Tune on `dev`.

    python -m experiments.ooc_fusion_proxy --split SPLITDIR [--part dev] [--limit N] [--list-length 30]

Writes docs/results/ooc_fusion_proxy_{name}.{md,json}.
"""

from __future__ import annotations

import sys
import time

from experiments.citation_channel import stand_in_rows, text_only_rows
from experiments.common import int_list, open_split_queries, split_parser, split_report, write_tables


def main(argv: list[str] | None = None) -> int:
    ap = split_parser(__doc__, table="ooc_fusion_proxy", part="dev")
    ap.add_argument("--list-length", type=int, default=30, help="L: papers per facet list of the stand-in decoder")
    ap.add_argument("--feedback", default="3", help="R of the walk's links row (comma-separated)")
    ap.add_argument("--text-weight", default="1,2,3", help="W_t of the text channel (comma-separated)")
    args = ap.parse_args(argv)
    feedback = int_list(ap, args.feedback, "--feedback")
    text_weights = int_list(ap, args.text_weight, "--text-weight")
    if args.list_length < 1:
        ap.error(f"--list-length must be >= 1, got {args.list_length}")

    import numpy as np
    import scipy.sparse as sp

    from experiments.distill_ceiling import mean_recalls
    from graft.candidates import CandidateFusion
    from graft.external import FEEDBACK, TEXT_NEIGHBOURS, CorpusScorer, text_coupling_row
    from graft.facets import FACETS
    from graft.fusion import CITATION_WEIGHT, TEXT_WEIGHT, corroboration, graph_rrf, rrf, support_rows
    from graft.teacher import symmetrise

    opened = open_split_queries(args, paper_embeddings=True)
    idx = opened.index
    scorer = CorpusScorer(idx, feedback=FEEDBACK)
    walk, teacher = symmetrise(idx.graphs), idx.teacher()
    fuser = CandidateFusion(idx)
    depth, length, n = 50, args.list_length, idx.n
    dense = np.asarray(idx.paper_embeddings, dtype=np.float32)
    empty = sp.csr_matrix((1, n), dtype=np.float32)

    def decoded(node: int) -> dict[str, list[int]]:
        """The stand-in decoder: per facet, the L papers most similar to the node's items (not itself)."""
        rows = stand_in_rows(scorer, node, length)
        return {f: row.indices[np.lexsort((row.indices, -row.data))].tolist() for f, row in rows.items()}

    def walked(rows: dict[str, sp.csr_matrix], node: int) -> list[int]:
        return [n_ for n_, _, _ in teacher.retrieve(rows, exclude={node}, k=depth)[0]]

    channels = [("graph-rrf + citation channel", "graph-rrf", 0.0),
                *((f"graph-rrf + citation channel + text channel W_t = {w}", "graph-rrf", float(w)) for w in text_weights),
                ("graph-walk + citation channel", "graph-walk", 0.0),
                ("graph-walk + citation channel + text neighbours", "graph-walk", TEXT_WEIGHT)]
    runs: dict[str, dict[str, list[int]]] = {}
    t0 = time.perf_counter()
    for qid, node in opened.rows.items():
        lists = decoded(node)
        runs.setdefault("rrf", {})[qid] = [int(x.doc) for x in rrf(lists)][:depth]
        support = {f: dict(zip(c, corroboration(walk[f], np.asarray(c, dtype=np.int64)).tolist()))
                   for f, c in lists.items()}
        runs.setdefault("graph-rrf (corroboration)", {})[qid] = [int(x.doc) for x in graph_rrf(lists, support).fused][
            :depth]
        rows = support_rows(support, n)
        first = walked(rows, node)
        runs.setdefault("graph-walk", {})[qid] = first
        for r in feedback:
            links = scorer.params.beta * scorer.raised(empty, first[:r], node)
            runs.setdefault(f"graph-walk + links of its first {r}", {})[qid] = walked(
                {f: rows[f] + links for f in FACETS}, node)
        pid = idx.paper_ids[node]
        scored = {f: {idx.paper_ids[c]: 1.0 / (r + 1) for r, c in enumerate(cands)} for f, cands in lists.items()}
        coupling = text_coupling_row(dense, dense[node], TEXT_NEIGHBOURS, exclude=node)
        near = {idx.paper_ids[c]: float(v) for c, v in zip(coupling.indices, coupling.data)}
        for label, fusion, w_t in channels:
            result = fuser.fuse_items(qid, scored, k=depth, fusion=fusion, citation_weight=CITATION_WEIGHT,
                                      exclude={pid}, neighbours=near, text_weight=w_t)
            runs.setdefault(label, {})[qid] = [idx.row_of[h.paper_id] for h in result.hits]
        runs.setdefault("teacher (graft query --text)", {})[qid] = walked(text_only_rows(scorer, dense, node), node)
    seconds = round(time.perf_counter() - t0, 1)

    table = [{"fusion": label, **mean_recalls(run, opened.gold)} for label, run in runs.items()]
    target = table[-1]["R@20"]
    for row in table:
        row["R@20 / teacher"] = row["R@20"] / target if target else float("nan")
    name, meta, lines = split_report(
        opened, args, "ooc_fusion_proxy", argv, "Out-of-corpus fusion of the generative retriever, with a stand-in decoder",
        f"papers posed as text-only queries · stand-in lists: the {length} most facet-similar papers per facet · "
        f"{seconds} s", list_length=length, seconds=seconds)
    lines += ["| fusion of the stand-in lists | R@20 | R@50 | R@20 / teacher |", "|---|---:|---:|---:|"]
    for row in table:
        lines.append(f"| {row['fusion']} | {row['R@20']:.3f} | {row['R@50']:.3f} | {row['R@20 / teacher']:.2f} |")
    lines += ["", "- stand-in decoder: no model; each facet list is the papers whose items are most similar to the "
              "query's (facet similarity alone); a trained model's lists differ",
              "- graph-walk: the lists' corroboration weights as the query's facet rows, walked two hops by the graph "
              "teacher (GRAFT's `graph-walk` fusion); + links: beta x the share of the walk's first R papers a paper "
              "cites or is cited by, added to every facet row",
              f"- channels (`CandidateFusion.fuse_items`): the citation channel at W = {CITATION_WEIGHT:g}; the text "
              f"channel: the query's {TEXT_NEIGHBOURS} nearest papers by title + abstract as a run of weight W_t "
              f"(shipped: {TEXT_WEIGHT:g}); in graph-walk they join every facet row at beta x cosine instead",
              f"- teacher: `graft query --text` rows (text coupling M = {TEXT_NEIGHBOURS}, feedback R = {FEEDBACK})"]
    write_tables(args.results, f"ooc_fusion_proxy_{name}", meta, table, lines)
    return 0


if __name__ == "__main__":
    sys.exit(main())
