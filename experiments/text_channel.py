"""The text channel in corpus: does a corpus paper's query gain from its nearest papers by text?

Out of corpus the text channel (`graft.fusion.TEXT`: the query's nearest papers by title +
abstract as a run of weight W_t) stands in for the citation links a new paper lacks, and lifts the
generative retriever's fusion to the teacher's level (`experiments/ooc_fusion_proxy.py`). A
corpus paper's rows already hold its real citation coupling, and its title + abstract vector is
stored (`embeddings/papers.npy`), so the channel would cost no encoder there. This benchmark asks
whether to use it: `graft query --paper`'s teacher (the stored rows with the citation channel at W =
`CITATION_WEIGHT`) with the text channel fused beside the four facet lists, at each W_t, before the
citation channel is made from the first results (as `CandidateFusion` orders the channels).

    python -m experiments.text_channel --split SPLITDIR [--part dev] [--weights 0.5,1,2] [--neighbours 10,20]

Writes docs/results/text_channel_{name}.{md,json}.
"""

from __future__ import annotations

import sys
import time

from experiments.citation_channel import weight_list
from experiments.common import int_list, open_split_queries, split_parser, split_report, write_tables


def main(argv: list[str] | None = None) -> int:
    ap = split_parser(__doc__, table="text_channel", part="dev")
    ap.add_argument("--weights", default="0.5,1,2", help="W_t of the text channel (comma-separated; 0 is added)")
    ap.add_argument("--neighbours", default="10,20", help="M: nearest papers in the channel's run (comma-separated)")
    args = ap.parse_args(argv)
    weights = weight_list(ap, args.weights)
    neighbours = int_list(ap, args.neighbours, "--neighbours")

    import numpy as np

    from experiments.distill_ceiling import mean_recalls
    from graft.external import text_coupling_row
    from graft.facets import FACETS
    from graft.fusion import CITATION, CITATION_WEIGHT, TEXT, rrf, text_run
    from graft.teacher import TeacherConfig

    opened = open_split_queries(args, paper_embeddings=True)
    idx = opened.index
    teacher = idx.teacher(TeacherConfig(citation_weight=CITATION_WEIGHT))
    papers = np.asarray(idx.paper_embeddings, dtype=np.float32)
    depth = 50
    runs: dict[tuple[int, float], dict[str, list[int]]] = {}
    t0 = time.perf_counter()
    for qid, node in opened.rows.items():
        exclude = {node}
        rows = teacher.node_rows(node)
        facet_runs = {f: [c.node for c in teacher.facet_list(f, rows[f], exclude)] for f in FACETS}
        for m in neighbours:
            coupling = text_coupling_row(papers, papers[node], m, exclude=node)
            near = [r for r, _ in text_run(dict(zip(coupling.indices.tolist(), coupling.data.tolist())), exclude)]
            for w_t in weights:
                if w_t == 0 and m != neighbours[0]:
                    continue  # no channel: the same at every M
                fused_runs = {**facet_runs, **({TEXT: near} if w_t > 0 else {})}
                order = [int(x.doc) for x in rrf(fused_runs, weights={TEXT: w_t})]
                fused_runs[CITATION] = [c.node for c in teacher.citation_list(order, exclude)]
                fused = rrf(fused_runs, weights={TEXT: w_t, CITATION: CITATION_WEIGHT})
                runs.setdefault((m, w_t), {})[qid] = [int(x.doc) for x in fused[:depth]]
    seconds = round(time.perf_counter() - t0, 1)

    table = [{"M": m, "W_t": w_t, **mean_recalls(run, opened.gold)} for (m, w_t), run in runs.items()]
    base = next(r["R@20"] for r in table if r["W_t"] == 0.0)
    for row in table:
        row["R@20 / W_t = 0"] = row["R@20"] / base if base else float("nan")
    name, meta, lines = split_report(
        opened, args, "text_channel", argv, "The text channel in corpus",
        f"papers · graph teacher, stored rows, citation channel W = {CITATION_WEIGHT:g} · {seconds} s",
        citation_weight=CITATION_WEIGHT, seconds=seconds)
    lines += ["| text channel | M | W_t | R@20 | R@50 | R@20 / W_t = 0 |", "|---|---:|---:|---:|---:|---:|"]
    for row in table:
        label = "none (`graft query --paper`)" if row["W_t"] == 0 else "the M nearest by title + abstract"
        m = "–" if row["W_t"] == 0 else str(row["M"])
        lines.append(f"| {label} | {m} | {row['W_t']:g} | {row['R@20']:.3f} | {row['R@50']:.3f} | "
                     f"{row['R@20 / W_t = 0']:.2f} |")
    lines += ["", "- the text channel's run: the query's M nearest corpus papers by the cosine of the stored title + "
              "abstract embeddings, fused beside the facet lists with weight W_t (each facet list weighs 1) before the "
              "citation channel is made from the first 3 results",
              "- the query paper itself is never returned; gold = its citation neighbours"]
    write_tables(args.results, f"text_channel_{name}", meta, table, lines)
    return 0


if __name__ == "__main__":
    sys.exit(main())
