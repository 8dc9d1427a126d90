"""Queries that already know a few of their references: which citation half should their rows get?

"What else should I cite?" is usually asked with some references in hand. This benchmark poses a
split's out-of-corpus papers (held out before the build, at least 3 references into the corpus) with
k of their references known (a seeded choice per paper; k = 5 only for papers with at least 6) and
scores the graph teacher on the others: gold = the references not given, and the given ones are
never returned by any system. The citation half (beta) of the query's edge rows is:

- `bibliographic`: coupling through the k known references (`external_citation_row`, what
  `graft.external.ExternalScorer` gives a record with references);
- `text`: text coupling with the M = `TEXT_NEIGHBOURS` nearest papers by title + abstract, the
  references ignored (what a record without references gets);
- `none`: zero (facet similarity alone);
- `known papers' rows`: the mean of the known papers' own citation score rows (their coupling and
  co-citation with the corpus, `graph/citation.npz`);
- `known papers' links`: the share of the known papers that each paper cites or is cited by;
- `max(...)`: the element-wise maximum of those named;
- `ExternalScorer first pass`: `ExternalScorer.citation_rows` of the record with its k references
  (since this benchmark: max(bibliographic, text, links));
- `ExternalScorer + feedback R`: that row raised by the citation links of the R papers its first
  rows rank highest, the known references left out of them (`ExternalScorer.with_feedback`);
- `... + citation channel W`: those rows walked with the citation channel at weight W (the papers
  that cite or are cited by the first 3 results join the fusion; `graft.fusion.cited_with`); with
  R = `FEEDBACK` (3) and W = `CITATION_WEIGHT` (3) what `graft query --record` returns;

and `dense` (title + abstract cosine, references ignored) for reference. The papers are split by
qid into halves A and B, so a choice made on one half can be checked on the other.

    python -m experiments.known_references --split SPLITDIR [--known 1,2,5] [--feedback 3] \
        [--citation-weight 3] [--limit N] [--name cs768]

Writes docs/results/known_references_{name}.{md,json}.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import sys
import time
from pathlib import Path

import numpy as np

from experiments.common import add_results_argument, int_list, parser, write_tables

HALVES = ("A", "B")


def half_of(qid: str) -> str:
    """The half ("A" or "B") a query belongs to, from a hash of its qid."""
    return HALVES[hashlib.sha256(qid.encode()).digest()[0] & 1]


def known_references(qid: str, refs: list[str], k: int) -> list[str]:
    """k of a query's references, chosen by a generator seeded with its qid (the same on every run)."""
    rng = np.random.default_rng(int.from_bytes(hashlib.sha256(qid.encode()).digest()[:8], "little"))
    return sorted(rng.choice(sorted(refs), size=k, replace=False).tolist())


def main(argv: list[str] | None = None) -> int:
    ap = parser(__doc__)
    ap.add_argument("--split", required=True, help="split directory (graft eval prepare + graft build)")
    ap.add_argument("--index", default=None, help="index directory (default SPLITDIR/index)")
    ap.add_argument("--known", default="1,2,5", help="numbers of known references k (comma-separated)")
    ap.add_argument("--feedback", default="3", help="R of the feedback pass rows (comma-separated; 0 = none)")
    ap.add_argument("--citation-weight", default="3",
                    help="W of the citation channel over the feedback rows (comma-separated integers >= 1)")
    ap.add_argument("--limit", type=int, default=None, help="only the first N queries by qid")
    ap.add_argument("--name", default=None, help="table name: known_references_{name}.md (default: the corpus)")
    add_results_argument(ap)
    args = ap.parse_args(argv)
    knowns = int_list(ap, args.known, "--known")
    feedback = [r for r in int_list(ap, args.feedback, "--feedback") if r > 0]
    channel = int_list(ap, args.citation_weight, "--citation-weight", required=False)

    import scipy.sparse as sp

    from eval.runner import corpus_name
    from eval.splits import read_queries, read_split
    from eval.trec import read_qrels
    from experiments.distill_ceiling import mean_recalls
    from graft.citations import external_citation_row
    from graft.external import ExternalScorer
    from graft.index import Index
    from graft.teacher import TeacherConfig
    from graft.text import paper_text

    split_dir = Path(args.split)
    split = read_split(split_dir)
    index_dir = Path(args.index) if args.index else split_dir / "index"
    idx = Index.open(index_dir)
    qrels = read_qrels(split_dir / "ooc" / "qrels.txt")
    queries = sorted((q for q in read_queries(split_dir, "ooc") if qrels.get(q["qid"])), key=lambda q: q["qid"])
    queries = queries[: args.limit] if args.limit else queries
    refs = {q["qid"]: sorted(p for p in qrels[q["qid"]] if p in idx.row_of) for q in queries}
    scorer = ExternalScorer(idx)
    if scorer.paper_vectors is None:
        print(f"{index_dir} has no embeddings/papers.npy: rebuild it with `graft build`", file=sys.stderr)
        return 1

    t0 = time.perf_counter()
    records = [{"id": q["qid"], "title": q.get("title"), "abstract": q.get("abstract")} for q in queries]
    facets = scorer.facets_of.many(records)
    vectors = scorer.embed_items(records, facets)
    text_rows = scorer.citation_rows(records)  # no references given: text coupling
    dense_q = np.asarray(scorer.encoder.encode([paper_text(r["title"], r["abstract"]) for r in records]),
                         dtype=np.float32)
    prepare_s = round(time.perf_counter() - t0, 1)
    print(f"{len(records)} queries: facets, item vectors and text rows in {prepare_s} s", file=sys.stderr, flush=True)

    n, depth = idx.n, 50
    cite_score = idx.citation_score.tocsr()
    empty = sp.csr_matrix((1, n), dtype=np.float32)
    table, seconds = [], {}
    for k in knowns:
        asked = [i for i, q in enumerate(queries) if len(refs[q["qid"]]) > k]
        runs: dict[str, dict[str, list[int]]] = {}
        gold: dict[str, set[int]] = {}
        for i in asked:
            qid = queries[i]["qid"]
            given = known_references(qid, refs[qid], k)
            given_rows = np.array([idx.row_of[p] for p in given], dtype=np.int64)
            gold[qid] = {idx.row_of[p] for p in refs[qid]} - set(given_rows.tolist())
            skip = set(given_rows.tolist())
            bib = external_citation_row(idx.citation_matrix, given_rows, scorer.coupling_row_log)
            seeds = sp.csr_matrix(cite_score[given_rows].mean(axis=0))  # the known papers' own citation rows
            links = scorer.link_share(given_rows)  # share of the known papers each cites or is cited by
            text = text_rows[i]
            record = {**records[i], "references": given}
            scored = scorer.citation_rows([record])[0]
            first_rows = scorer.rows_from(scored, vectors[i])
            fed = [(f"ExternalScorer + feedback {r}", scorer.with_feedback(record, first_rows, scored, r))
                   for r in feedback]
            variants = (("bibliographic", bib), ("text", text), ("none", empty),
                        ("known papers' rows", seeds), ("known papers' links", links),
                        ("max(bibliographic, text)", bib.maximum(text)),
                        ("max(text, links)", text.maximum(links)),
                        ("max(bibliographic, text, links)", bib.maximum(text).maximum(links)),
                        ("max(bibliographic, text, links, rows)", bib.maximum(text).maximum(links).maximum(seeds)),
                        ("ExternalScorer first pass", scored), *fed)
            for label, cite in variants:
                cite = sp.csr_matrix(cite, dtype=np.float32)
                t = time.perf_counter()
                rows = scorer.rows_from(cite, vectors[i])
                hits = idx.query_rows(rows, k=depth, exclude=skip).hits
                runs.setdefault(label, {})[qid] = [idx.row_of[h.paper_id] for h in hits]
                seconds[label] = seconds.get(label, 0.0) + time.perf_counter() - t
                if not label.startswith("ExternalScorer + feedback"):
                    continue
                for w in channel:
                    t = time.perf_counter()
                    hits = idx.query_rows(rows, k=depth, exclude=skip, config=TeacherConfig(citation_weight=w)).hits
                    name_w = f"{label} + citation channel {w}"
                    runs.setdefault(name_w, {})[qid] = [idx.row_of[h.paper_id] for h in hits]
                    seconds[name_w] = seconds.get(name_w, 0.0) + time.perf_counter() - t
            sims = scorer.paper_vectors @ dense_q[i]
            sims[given_rows] = -np.inf
            runs.setdefault("dense", {})[qid] = np.argsort(-sims, kind="stable")[:depth].tolist()
        for label, run in runs.items():
            row = {"known": k, "rows": label, "queries": len(gold), **mean_recalls(run, gold)}
            for half in HALVES:
                part = {q: g for q, g in gold.items() if half_of(q) == half}
                row[f"R@20 {half}"] = mean_recalls(run, part)["R@20"] if part else float("nan")
            table.append(row)

    name = args.name or corpus_name(split)
    command = "python -m experiments.known_references " + " ".join(argv if argv is not None else sys.argv[1:])
    meta = {"command": command, "date": dt.date.today().isoformat(), "corpus_hash": split.get("corpus_hash"),
            "index": str(index_dir), "queries": len(queries), "encoder": scorer.encoder.name,
            "text_neighbours": scorer.text_neighbours, "alpha": scorer.params.alpha, "beta": scorer.params.beta,
            "top_k": scorer.params.top_k, "prepare_seconds": prepare_s,
            "seconds": {k: round(v, 1) for k, v in seconds.items()}}
    halves = {h: sum(half_of(q["qid"]) == h for q in queries) for h in HALVES}
    lines = [f"# Out-of-corpus queries with k known references — {name}", "",
             f"Command: `{command}`  ",
             f"Date: {meta['date']} · corpus hash `{str(meta['corpus_hash'])[:16]}` · {len(queries)} out-of-corpus "
             f"papers (halves A {halves['A']}, B {halves['B']}) · encoder {scorer.encoder.name} · alpha "
             f"{scorer.params.alpha} · beta {scorer.params.beta} · top-K {scorer.params.top_k} · text coupling "
             f"M = {scorer.text_neighbours}", "",
             "| k known | citation half of the rows (graph teacher) | queries | R@20 | R@50 | R@20 A | R@20 B |",
             "|---:|---|---:|---:|---:|---:|---:|"]
    for r in table:
        lines.append(f"| {r['known']} | {r['rows']} | {r['queries']} | {r['R@20']:.3f} | {r['R@50']:.3f} | "
                     f"{r['R@20 A']:.3f} | {r['R@20 B']:.3f} |")
    lines += ["", "- gold: the query's references into the corpus other than the k given; the given ones are "
              "excluded from every ranking; k references are asked only of papers with more than k",
              "- bibliographic: coupling through the known references; text: coupling with the "
              f"{scorer.text_neighbours} nearest papers by title + abstract, references ignored; none: facet "
              "similarity alone; known papers' rows: mean of their citation score rows (coupling, co-citation); "
              "links: share of the known papers a paper cites or is cited by; max: the largest of those named, "
              "per paper; ExternalScorer first pass: its citation row for the record with the k references (max of "
              "bibliographic, text, links); + feedback R: that row raised by the citation links of the R papers its "
              "first rows rank highest (the known references left out); + citation channel W: those rows walked with the "
              "channel of weight W (papers linked to the first 3 results); R = 3 and W = 3 is what `graft query "
              "--record` returns; dense: title + abstract cosine alone"]
    write_tables(args.results, f"known_references_{name}", meta, table, lines)
    return 0


if __name__ == "__main__":
    sys.exit(main())
