"""The citation channel's R: how many first results its run is made from.

The channel (`graft.fusion.cited_with`) fuses the papers that cite or are cited by the first R
results of the facet fusion, at weight W = `CITATION_WEIGHT`. R = `CITATION_FIRST` was set with the
feedback pass's R on text-only papers; this benchmark checks it where the channel does most, a
corpus paper's query (`graft query --paper`'s teacher: stored rows + the channel), at each R, on a
split's in-corpus papers (gold = their citation neighbours; the paper itself never returned).

    python -m experiments.citation_first --split SPLITDIR [--part dev] [--first 2,3,4,5,8]

Writes docs/results/citation_first_{name}.{md,json}.
"""

from __future__ import annotations

import sys
import time

from experiments.common import int_list, open_split_queries, split_parser, split_report, write_tables


def main(argv: list[str] | None = None) -> int:
    ap = split_parser(__doc__, table="citation_first", part="dev")
    ap.add_argument("--first", default="2,3,4,5,8", help="R: first results the channel is made from (comma-separated)")
    args = ap.parse_args(argv)
    firsts = int_list(ap, args.first, "--first")

    from experiments.distill_ceiling import mean_recalls
    from graft.fusion import CITATION_FIRST, CITATION_WEIGHT
    from graft.teacher import TeacherConfig

    opened = open_split_queries(args)
    idx = opened.index
    table = []
    for r in dict.fromkeys(firsts):
        teacher = idx.teacher(TeacherConfig(citation_weight=CITATION_WEIGHT, citation_first=r))
        t0 = time.perf_counter()
        run = {qid: [node for node, _, _ in teacher.retrieve(teacher.node_rows(row), exclude={row}, k=50)[0]]
               for qid, row in opened.rows.items()}
        table.append({"R": r, **mean_recalls(run, opened.gold), "seconds": round(time.perf_counter() - t0, 1)})
    name, meta, lines = split_report(
        opened, args, "citation_first", argv, "The citation channel's R (first results it is made from)",
        f"papers · graph teacher, stored rows, channel weight W = {CITATION_WEIGHT:g} · shipped R = {CITATION_FIRST}",
        citation_weight=CITATION_WEIGHT, citation_first=CITATION_FIRST)
    lines += ["| R | R@20 | R@50 | seconds |", "|---:|---:|---:|---:|"]
    for row in table:
        mark = " ←" if row["R"] == CITATION_FIRST else ""
        lines.append(f"| {row['R']}{mark} | {row['R@20']:.3f} | {row['R@50']:.3f} | {row['seconds']} |")
    lines += ["", "- the query paper itself is never returned; gold = its citation neighbours (references and citing "
              "papers), so part of what the channel finds is triadic closure"]
    write_tables(args.results, f"citation_first_{name}", meta, table, lines)
    return 0


if __name__ == "__main__":
    sys.exit(main())
