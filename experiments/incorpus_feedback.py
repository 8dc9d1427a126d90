"""In-corpus queries: would the feedback pass of text-only papers help corpus papers too?

Papers outside the corpus get a second pass (`graft.external.ExternalScorer.with_feedback`):
the citation links of the R papers their first rows rank highest raise the citation half of their
rows. This benchmark asks the same of the split's in-corpus queries, which the graph teacher answers
from the stored (symmetrised) graph rows. Rows compared, all walked by the graph teacher:

- `graph rows`: the design's teacher over the stored rows (`Index.query_paper`, the `teacher` system);
- `out-rows recomputed`: the paper's facet rows scored again from its own item vectors and its
  citation score row (`external_facet_row`, out-edges only), the baseline of the next rows;
- `out-rows + links of the first R (graph | out-rows)`: the same with the citation half raised,
  per paper, to the share of the first R papers of the graph rows' (or the recomputed rows') ranking
  that it cites or is cited by (the query paper's own links are never used).

The `teacher-fb` system walks the `out-rows + links of the first R (graph)` rows
(`graft.external.CorpusScorer.feedback_rows`, R = `FEEDBACK`); the last row runs that path
and must equal that row. (`graft query --paper` walks the stored rows with the citation channel
instead, which does better: `experiments/citation_channel.py`.) Tune on dev.

    python -m experiments.incorpus_feedback --split SPLITDIR [--part dev] [--feedback 3,5] [--limit N]

Writes docs/results/incorpus_feedback_{name}.{md,json}.
"""

from __future__ import annotations

import sys
import time

from experiments.common import int_list, open_split_queries, split_parser, split_report, write_tables


def main(argv: list[str] | None = None) -> int:
    ap = split_parser(__doc__, table="incorpus_feedback", part="dev")
    ap.add_argument("--feedback", default="3,5", help="R: first papers whose links are used (comma-separated)")
    args = ap.parse_args(argv)
    feedback = int_list(ap, args.feedback, "--feedback")

    import numpy as np
    import scipy.sparse as sp

    from experiments.distill_ceiling import mean_recalls
    from graft.external import FEEDBACK, CorpusScorer

    opened = open_split_queries(args)
    idx = opened.index
    scorer = CorpusScorer(idx, feedback=0)  # its grouped items and links
    shipped = CorpusScorer(idx, feedback=FEEDBACK, citation_weight=0)  # teacher-fb
    depth = 50
    rows_for = scorer.paper_rows  # the paper's rows scored again from its own items

    def walked(rows: dict[str, sp.csr_matrix], node: int) -> list[int]:
        return [idx.row_of[h.paper_id] for h in idx.query_rows(rows, k=depth, exclude={node}).hits]

    runs: dict[str, dict[str, list[int]]] = {}
    t0 = time.perf_counter()
    stored = idx.teacher()
    empty = sp.csr_matrix((1, idx.n), dtype=np.float32)
    for qid, node in opened.rows.items():
        graph = [idx.row_of[h.paper_id] for h in idx.query_paper(idx.paper_ids[node], k=depth).hits]
        runs.setdefault("graph rows", {})[qid] = graph
        cite = idx.citation_half(node)  # citation score row, or text coupling for a link-less paper
        own = walked(rows_for(node, cite), node)
        runs.setdefault("out-rows recomputed", {})[qid] = own
        for r in feedback:
            for source, first in (("graph", graph), ("out-rows", own)):
                raised = scorer.raised(cite, first[:r], node)
                runs.setdefault(f"out-rows + links of the first {r} ({source})", {})[qid] = walked(
                    rows_for(node, raised), node)
            links = scorer.params.beta * scorer.raised(empty, graph[:r], node)
            uncut = {f: row + links for f, row in stored.node_rows(node).items()}
            runs.setdefault(f"graph rows + beta x links of the first {r}, every facet, no top-K cut", {})[qid] = \
                walked(uncut, node)
        runs.setdefault(f"teacher-fb (CorpusScorer, R = {FEEDBACK})", {})[qid] = [
            idx.row_of[h.paper_id] for h in shipped.query_paper(idx.paper_ids[node], k=depth).hits]
    seconds = round(time.perf_counter() - t0, 1)

    table = [{"rows": label, **mean_recalls(run, opened.gold)} for label, run in runs.items()]
    base = table[0]["R@20"]
    for row in table:
        row["R@20 / graph rows"] = row["R@20"] / base if base else float("nan")
    name, meta, lines = split_report(opened, args, "incorpus_feedback", argv,
                                     "In-corpus queries with a feedback pass through citation links",
                                     f"queries · graph teacher · {seconds} s", seconds=seconds)
    lines += ["| rows of the query | R@20 | R@50 | R@20 / graph rows |", "|---|---:|---:|---:|"]
    for row in table:
        lines.append(f"| {row['rows']} | {row['R@20']:.3f} | {row['R@50']:.3f} | {row['R@20 / graph rows']:.2f} |")
    lines += ["", "- graph rows: `Index.query_paper` (symmetrised stored rows); out-rows: the paper's rows scored "
              "again from its item vectors and citation score row; + links: that citation half raised to the share "
              "of the first R papers (of the graph rows' or the out-rows' ranking) a paper cites or is cited by",
              "- no top-K cut: beta x that share added to every stored facet row, so every paper linked to the first "
              "R enters all four facet lists at one hop (credited with facets it may share no edge with); measured "
              "as a lead, not shipped (the citation channel, `experiments/citation_channel.py`, is what shipped)",
              f"- `teacher-fb` walks the rows of `CorpusScorer.feedback_rows`: the `first {FEEDBACK} (graph)` rows"]
    write_tables(args.results, f"incorpus_feedback_{name}", meta, table, lines)
    return 0


if __name__ == "__main__":
    sys.exit(main())
