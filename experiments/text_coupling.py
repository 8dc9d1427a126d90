"""Text-only queries: what a stand-in for the missing citation half of their edge rows is worth.

A paper outside the corpus (`graft query --text/--record` without references, the out-of-corpus
suite) has no citation links, so its facet edge rows carry only alpha * s_f(q, j) and their beta
half is zero. This benchmark poses a split's in-corpus papers as text-only queries (their own facet
item vectors, no references, the paper itself never returned; gold = its citation neighbours) and
scores the graph teacher with the beta half filled in these ways:

- `text only`: zero, as `graft.external.ExternalScorer` scores a new paper with text coupling off;
- `pseudo-references R`: bibliographic coupling (`external_citation_row`) with the teacher's own
  first R papers taken as the query's references (pseudo-relevance feedback);
- `text coupling M`: the cosine of title + abstract embeddings (the index's `embeddings/papers.npy`,
  as the dense baseline) with the query's M nearest papers, clipped to [0, 1]
  (`graft.external.text_coupling_row`, what `ExternalScorer` now gives a paper without
  references, with M = `TEXT_NEIGHBOURS`);
- `text coupling M, then links of its first R` (M the first of `--neighbours`, R each of
  `--feedback`): a second pass, where the citation links of the R papers the text-coupled rows rank
  highest (the share of them a paper cites or is cited by) raise that half (`ExternalScorer`'s second
  pass, with M = `TEXT_NEIGHBOURS` and R = `FEEDBACK`);

and `dense` (that cosine alone) for reference. The query papers sit in the graph, so their own
citations shaped their neighbours' edges: compare rows with each other, not with the
out-of-corpus tables. Tune on `dev`.

    python -m experiments.text_coupling --split SPLITDIR [--part dev] [--limit N] \\
        [--feedback 10,20] [--neighbours 20,100] [--name cs768]

Writes docs/results/text_coupling_{name}.{md,json}.
"""

from __future__ import annotations

import datetime as dt
import sys
import time
from typing import Any

import numpy as np

from experiments.common import int_list, open_split_queries, split_parser, write_tables


def main(argv: list[str] | None = None) -> int:
    ap = split_parser(__doc__, table="text_coupling", part="dev")
    ap.add_argument("--feedback", default="10,20", help="pseudo-reference counts R (comma-separated)")
    ap.add_argument("--neighbours", default="20,100", help="text-coupling neighbour counts M (comma-separated)")
    args = ap.parse_args(argv)
    feedback = int_list(ap, args.feedback, "--feedback", required=False)
    neighbours = int_list(ap, args.neighbours, "--neighbours", required=False)

    import scipy.sparse as sp

    from eval.metrics import KS
    from eval.runner import corpus_name
    from experiments.distill_ceiling import mean_recalls
    from graft.citations import external_citation_row
    from graft.external import ExternalScorer, text_coupling_row
    from graft.text import paper_texts

    opened = open_split_queries(args)
    split, idx, queries, gold = opened.split, opened.index, opened.rows, opened.gold
    scorer = ExternalScorer(idx)
    n, k_out = idx.n, max(KS)
    rows_for = scorer.paper_rows  # the node's text-only rows (its own item vectors, itself dropped)

    def ranked(rows: dict[str, Any], node: int) -> list[int]:
        return [idx.row_of[h.paper_id] for h in idx.query_rows(rows, k=k_out, exclude={node}).hits]

    t0 = time.perf_counter()
    dense = scorer.paper_vectors
    if dense is None:  # an index built before embeddings/papers.npy
        dense = np.asarray(scorer.encoder.encode(paper_texts(idx.papers)), dtype=np.float32)
        print(f"embedded {n:,} titles + abstracts in {time.perf_counter() - t0:.1f} s", file=sys.stderr, flush=True)
    encode_s = round(time.perf_counter() - t0, 1)

    empty = sp.csr_matrix((1, n), dtype=np.float32)
    runs: dict[str, dict[str, list[int]]] = {}
    seconds: dict[str, float] = {}

    def record(label: str, qid: str, ranking: list[int], started: float) -> list[int]:
        runs.setdefault(label, {})[qid] = ranking
        seconds[label] = seconds.get(label, 0.0) + time.perf_counter() - started
        return ranking

    for qid, node in queries.items():
        t = time.perf_counter()
        sims = dense @ dense[node]  # the dense row
        sims[node] = -np.inf
        order = np.argsort(-sims, kind="stable")
        record("dense (title + abstract)", qid, order[:k_out].tolist(), t)
        t = time.perf_counter()
        first = record("text only", qid, ranked(rows_for(node, empty), node), t)
        for r in feedback:
            t = time.perf_counter()
            cite = external_citation_row(idx.citation_matrix, np.asarray(first[:r], dtype=np.int64),
                                         scorer.coupling_row_log)
            record(f"pseudo-references R = {r}", qid, ranked(rows_for(node, cite), node), t)
        for m in neighbours:
            t = time.perf_counter()
            cite = text_coupling_row(dense, dense[node], m, exclude=node)
            coupled = record(f"text coupling M = {m}", qid, ranked(rows_for(node, cite), node), t)
            for r in (feedback if m == neighbours[0] else []):
                t = time.perf_counter()
                record(f"text coupling M = {m}, then links of its first R = {r}", qid,
                       ranked(rows_for(node, scorer.raised(cite, coupled[:r], node)), node), t)

    table = [{"rows": label, **mean_recalls(run, gold), "seconds": round(seconds[label], 1)}
             for label, run in runs.items()]
    base = next(r["R@20"] for r in table if r["rows"] == "text only")
    for r in table:
        r["R@20 / text only"] = r["R@20"] / base if base else float("nan")
    name = args.name or corpus_name(split)
    command = "python -m experiments.text_coupling " + " ".join(argv if argv is not None else sys.argv[1:])
    meta = {"command": command, "date": dt.date.today().isoformat(), "corpus_hash": split.get("corpus_hash"),
            "index": str(opened.index_dir), "queries": len(queries), "part": args.part,
            "encoder": scorer.encoder.name, "encode_seconds": encode_s, "alpha": scorer.params.alpha,
            "beta": scorer.params.beta, "top_k": scorer.params.top_k}
    lines = [f"# Text-only queries: the citation half of their edge rows — {name}", "",
             f"Command: `{command}`  ",
             f"Date: {meta['date']} · corpus hash `{str(meta['corpus_hash'])[:16]}` · {len(queries)} in-corpus "
             f"{args.part} papers posed as text-only queries · encoder {scorer.encoder.name} · "
             f"alpha {scorer.params.alpha} · beta {scorer.params.beta} · top-K {scorer.params.top_k}", "",
             "| rows of the query (graph teacher) | R@20 | R@50 | R@20 / text only | seconds |",
             "|---|---:|---:|---:|---:|"]
    for r in table:
        lines.append(f"| {r['rows']} | {r['R@20']:.3f} | {r['R@50']:.3f} | {r['R@20 / text only']:.2f} | "
                     f"{r['seconds']} |")
    lines += ["", "- text only: beta half zero (a paper outside the corpus with text coupling off, "
              "`--text-neighbours 0`); pseudo-references: "
              "beta half = bibliographic coupling with the teacher's first R papers; text coupling: beta half "
              "= clipped title + abstract cosine with the M nearest papers (M = 10: how `graft query --text` and the "
              "out-of-corpus suite score a paper without references, before their second pass); then links of its "
              "first R: beta half = the larger of that and the share of the R papers the text-coupled rows rank "
              "highest that a paper cites or is cited by (R = 3: `graft.external.FEEDBACK`, the second pass); "
              "dense: that cosine alone",
              "- the query papers are in the graph (their citations shaped their neighbours' edges): compare "
              "the rows with each other, not with the out-of-corpus tables"]
    write_tables(args.results, f"text_coupling_{name}", meta, table, lines)
    return 0


if __name__ == "__main__":
    sys.exit(main())
