"""The citation channel (`graft.fusion.cited_with`): what it adds to each query path, by its weight W.

The channel fuses a fifth run with the four facet lists: the papers that cite or are cited by the
first R = `CITATION_FIRST` results of the facet fusion, ranked by the share of them they are linked
to. W is its weight in the fusion (each facet list weighs 1). Rows, on a split's in-corpus papers:

- `in corpus, teacher, stored rows`: `graft query --paper`'s teacher (W = 0 is the `teacher`
  system, the design's graph teacher);
- `in corpus, teacher, feedback rows`: the same over the rows with the feedback pass
  (`CorpusScorer.feedback_rows`; W = 0 is `teacher-fb`);
- `text-only, teacher`: the papers posed as text-only queries, the graph teacher over
  `graft query --text`'s rows (text coupling M = `TEXT_NEIGHBOURS`, feedback R = `FEEDBACK`; the
  paper's own item vectors stand in for items extracted from its text);
- `text-only, stand-in decoder, FUSION`: the generative retriever's out-of-corpus fusion
  (`graft.candidates.CandidateFusion.fuse_items`, the code the trained model's lists go through),
  fed each facet's L most facet-similar papers instead of a model's decoded list (as
  `experiments/ooc_fusion_proxy.py`).

The query paper itself is never returned. The in-corpus gold is the query's citation neighbours, so
part of what the channel finds is triadic closure (papers linked to papers linked to the query).
Tune on `dev`; `CITATION_WEIGHT` was chosen here.

    python -m experiments.citation_channel --split SPLITDIR [--part dev] [--weights 0,1,2,3,4,6] [--limit N]

Writes docs/results/citation_channel_{name}.{md,json}.
"""

from __future__ import annotations

import argparse
import sys
import time
from typing import Any

from experiments.common import open_split_queries, split_parser, split_report, write_tables


def weight_list(ap: argparse.ArgumentParser, text: str) -> list[float]:
    """--weights: comma-separated numbers >= 0, 0 first (the baseline of every setting)."""
    try:
        values = [float(v) for v in text.split(",") if v.strip()]
    except ValueError:
        values = [-1.0]
    if not values or any(v < 0 for v in values):
        ap.error(f"--weights takes comma-separated numbers >= 0, got {text!r}")
    return [0.0] + [v for v in dict.fromkeys(values) if v != 0.0]


def text_only_rows(scorer: Any, paper_vectors: Any, node: int) -> dict[str, Any]:
    """A corpus paper posed as a text-only query: `graft query --text`'s rows (text coupling with
    its `TEXT_NEIGHBOURS` nearest papers by title + abstract, then the feedback pass with the first
    `FEEDBACK` papers), from the paper's own item vectors; the paper itself left out.

    Args:
        scorer: a `graft.external.CorpusScorer` of the index.
        paper_vectors: (n, d) title + abstract embeddings of the corpus (`Index.paper_embeddings`).
        node: the paper's corpus row.
    """
    from graft.external import FEEDBACK, TEXT_NEIGHBOURS, text_coupling_row

    cite = text_coupling_row(paper_vectors, paper_vectors[node], TEXT_NEIGHBOURS, exclude=node)
    first = scorer.index.query_rows(scorer.paper_rows(node, cite), k=FEEDBACK, exclude={node}).hits
    return scorer.paper_rows(node, scorer.raised(cite, [scorer.index.row_of[h.paper_id] for h in first], node))


def stand_in_rows(scorer: Any, node: int, length: int) -> dict[str, Any]:
    """The stand-in decoder of the out-of-corpus fusion benchmarks: per facet, a 1 x n row of the
    `length` papers whose items are most similar to the paper's (facet similarity alone, alpha = 1,
    beta = 0), the paper itself left out."""
    from dataclasses import replace

    import scipy.sparse as sp

    similar = replace(scorer.params, alpha=1.0, beta=0.0, top_k=length)
    return scorer.paper_rows(node, sp.csr_matrix((1, scorer.index.n), dtype="float32"), similar)


def main(argv: list[str] | None = None) -> int:
    ap = split_parser(__doc__, table="citation_channel", part="dev")
    ap.add_argument("--weights", default="0,1,2,3,4,6", help="W of the channel (comma-separated; 0 is always run)")
    ap.add_argument("--list-length", type=int, default=30, help="L: papers per facet list of the stand-in decoder")
    args = ap.parse_args(argv)
    weights = weight_list(ap, args.weights)
    if args.list_length < 1:
        ap.error(f"--list-length must be >= 1, got {args.list_length}")

    import numpy as np
    import scipy.sparse as sp

    from experiments.distill_ceiling import mean_recalls
    from graft.candidates import CandidateFusion
    from graft.external import FEEDBACK, CorpusScorer
    from graft.fusion import CITATION_FIRST, CITATION_WEIGHT
    from graft.teacher import TeacherConfig

    opened = open_split_queries(args, paper_embeddings=True)
    idx = opened.index
    if not idx.citation_links.nnz:
        print(f"{opened.index_dir} has no citation links: the channel has nothing to add", file=sys.stderr)
        return 1
    scorer = CorpusScorer(idx, feedback=FEEDBACK)
    fuser = CandidateFusion(idx)
    depth = 50
    dense = np.asarray(idx.paper_embeddings, dtype=np.float32)
    configs = {w: TeacherConfig(citation_weight=w) for w in weights}
    few = [w for w in weights if w in (0.0, CITATION_WEIGHT)]  # the settings measured at W = 0 and W shipped

    def walked(rows: dict[str, sp.csr_matrix], node: int, w: float) -> list[int]:
        hits = idx.query_rows(rows, k=depth, exclude={node}, config=configs[w]).hits
        return [idx.row_of[h.paper_id] for h in hits]

    runs: dict[tuple[str, float], dict[str, list[int]]] = {}
    t0 = time.perf_counter()
    for qid, node in opened.rows.items():
        pid = idx.paper_ids[node]
        stored = idx.teacher().node_rows(node)
        feedback = scorer.feedback_rows(node)
        text = text_only_rows(scorer, dense, node)
        decoded = {f: {idx.paper_ids[c]: float(w) for c, w in zip(row.indices, row.data)}
                   for f, row in stand_in_rows(scorer, node, args.list_length).items()}
        for w in weights:
            runs.setdefault(("in corpus, teacher, stored rows", w), {})[qid] = walked(stored, node, w)
            runs.setdefault(("text-only, teacher", w), {})[qid] = walked(text, node, w)
            runs.setdefault(("text-only, stand-in decoder, graph-rrf", w), {})[qid] = [
                idx.row_of[h.paper_id] for h in fuser.fuse_items(
                    qid, decoded, k=depth, fusion="graph-rrf", citation_weight=w, exclude={pid}).hits]
        for w in few:
            runs.setdefault(("in corpus, teacher, feedback rows", w), {})[qid] = walked(feedback, node, w)
            for fusion in ("rrf", "graph-walk"):
                runs.setdefault((f"text-only, stand-in decoder, {fusion}", w), {})[qid] = [
                    idx.row_of[h.paper_id] for h in fuser.fuse_items(
                        qid, decoded, k=depth, fusion=fusion, citation_weight=w, exclude={pid}).hits]
    seconds = round(time.perf_counter() - t0, 1)

    table = []
    for (setting, w), run in runs.items():
        table.append({"setting": setting, "W": w, **mean_recalls(run, opened.gold)})
    base = {row["setting"]: row["R@20"] for row in table if row["W"] == 0.0}
    for row in table:
        b = base[row["setting"]]
        row["R@20 / W = 0"] = row["R@20"] / b if b else float("nan")
    table.sort(key=lambda r: (list(base).index(r["setting"]), r["W"]))
    name, meta, lines = split_report(
        opened, args, "citation_channel", argv, "The citation channel, by its weight W",
        f"papers · channel from the first {CITATION_FIRST} results · shipped W = {CITATION_WEIGHT:g} · {seconds} s",
        citation_first=CITATION_FIRST, citation_weight=CITATION_WEIGHT, list_length=args.list_length, seconds=seconds)
    lines += ["| query path | W | R@20 | R@50 | R@20 / W = 0 |", "|---|---:|---:|---:|---:|"]
    for row in table:
        mark = " ←" if row["W"] == CITATION_WEIGHT else ""
        lines.append(f"| {row['setting']} | {row['W']:g}{mark} | {row['R@20']:.3f} | {row['R@50']:.3f} | "
                     f"{row['R@20 / W = 0']:.2f} |")
    lines += ["", "- W = 0: no channel (in corpus, stored rows: the `teacher` system; feedback rows: `teacher-fb`)",
              "- text-only: the in-corpus papers posed as title + abstract; their own item vectors stand in for "
              "items extracted from the text; the paper itself is never returned",
              f"- stand-in decoder: each facet's {args.list_length} most facet-similar papers instead of a "
              "trained model's decoded list, fused by `CandidateFusion.fuse_items` (mutual corroboration)",
              "- the gold is the query's citation neighbours: part of what the channel adds is triadic closure"]
    write_tables(args.results, f"citation_channel_{name}", meta, table, lines)
    return 0


if __name__ == "__main__":
    sys.exit(main())
