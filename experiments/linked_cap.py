"""How many coupled or co-cited candidates a paper needs: the four facet graphs rebuilt with only each
paper's M strongest citation-linked candidates (`GraphParams.linked_candidates`), against all of them.

Every coupled or co-cited paper is a graph candidate scored exactly; on cs768 a paper has 221 of
them on average (up to 3,228) and on synthetic corpora their number per paper grows with the corpus
(docs/scale.md), which makes the graph stage grow faster than n. A candidate dropped by the cap has
a lower citation score than the M kept, so it enters a paper's top K only on facet similarity,
where the facet prefilter's candidates also find it. Here: the share of the uncapped graphs' edges
each M keeps, the graph teacher's in-corpus recall without and with the citation channel, and the
seconds of each rebuild (the index's stored item vectors and citation signals; other settings the
index's). With `--partners`, the same for the citation signals counted with only each paper's P
most coupled and P most co-cited papers (`graft.citations.CITATION_PARTNERS`), at the build's
linked candidates. Tune on `dev`.

    python -m experiments.linked_cap --split SPLITDIR [--caps 50,100,200,400] [--partners 50,100,200]
        [--part dev] [--name cs768]

Writes docs/results/linked_cap_{name}.{md,json}.
"""

from __future__ import annotations

import sys
import time
from dataclasses import replace
from typing import Any

import numpy as np

from experiments.common import int_list, open_split_queries, split_parser, split_report, write_tables


def main(argv: list[str] | None = None) -> int:
    ap = split_parser(__doc__, table="linked_cap", part="dev")
    ap.add_argument("--caps", default="50,100,200,400", help="comma-separated M (linked candidates a paper)")
    ap.add_argument("--partners", default="", help="comma-separated P (citation partners a paper), at the "
                    "build's M")
    args = ap.parse_args(argv)
    caps = int_list(ap, args.caps, "--caps")
    partners = int_list(ap, args.partners, "--partners") if args.partners else []

    from experiments.edge_mix import both_teachers
    from experiments.index_agreement import edge_agreement
    from graft.citations import citation_links, citation_signals
    from graft.facets import FACETS
    from graphbuild.build import BuildConfig, facet_graphs

    opened = open_split_queries(args)
    idx, queries, gold = opened.index, opened.rows, opened.gold
    config = BuildConfig.from_manifest(idx.manifest)
    base = replace(config.graph_params(), linked_candidates=0)
    vectors = np.asarray(idx.item_embeddings, dtype=np.float32)
    owner, facet_col = idx.item_rows, idx.facets["facet"].to_numpy()
    a = idx.citation_matrix
    signals = citation_signals(a, config.citation_rescale)
    per_paper = np.diff(citation_links(a, signals.score).indptr)

    table: list[dict[str, Any]] = []
    full: dict[str, Any] = {}
    runs = [(cap, 0) for cap in [0, *caps]] + [(config.linked_candidates, p) for p in partners]
    for cap, p in runs:
        t0 = time.perf_counter()
        sig = citation_signals(a, config.citation_rescale, partners=p) if p else signals
        graphs = facet_graphs(owner, facet_col, vectors, a, sig, replace(base, linked_candidates=cap),
                              text=idx.text_coupling, lexical=idx.lexical or None)
        seconds = time.perf_counter() - t0
        full = full or graphs
        agree = [edge_agreement(full[f], graphs[f]) for f in FACETS]
        edges = sum(g["edges_a"] for g in agree)
        table.append({"cap": cap, "partners": p, "pairs": sig.n_coupling_pairs + sig.n_cocitation_pairs,
                      "linked_pairs": int(np.minimum(per_paper, cap or per_paper.max()).sum()),
                      "kept": sum(g["shared_share"] * g["edges_a"] for g in agree) / max(edges, 1),
                      "rows_identical": float(np.mean([g["rows_identical_share"] for g in agree])),
                      **both_teachers(graphs, queries, gold, idx.citation_links), "seconds": round(seconds, 1)})
        print(f"M {cap or 'all'} P {p or 'all'}: kept {table[-1]['kept']:.4f}, R@20 {table[-1]['R@20']:.3f}, "
              f"cite R@20 {table[-1]['cite R@20']:.3f}, {seconds:.0f} s", file=sys.stderr, flush=True)

    name, meta, lines = split_report(
        opened, args, "linked_cap", argv, "Citation-linked candidates a paper",
        "papers · graph teacher (two hops, RRF over facets), without and with the citation channel",
        linked_mean=float(per_paper.mean()), linked_max=int(per_paper.max()))
    lines += [f"Coupled or co-cited papers a paper: mean {per_paper.mean():.1f}, median {np.median(per_paper):.0f}, "
              f"max {per_paper.max():,}.", "",
              "| M | P | coupled + co-cited pairs | linked candidates | uncapped edges kept | rows identical "
              "| teacher R@20 | R@50 | teacher-cite R@20 | R@50 | seconds |",
              "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for row in table:
        lines.append(f"| {row['cap'] or 'all'} | {row['partners'] or 'all'} | {row['pairs']:,} | "
                     f"{row['linked_pairs']:,} | {100 * row['kept']:.2f}% | "
                     f"{100 * row['rows_identical']:.1f}% | {row['R@20']:.3f} | {row['R@50']:.3f} | "
                     f"{row['cite R@20']:.3f} | {row['cite R@50']:.3f} | {row['seconds']} |")
    lines += ["", "- M: a paper's coupled or co-cited candidates kept, the strongest by citation score "
                  "(`--linked-candidates`); the facet prefilter's 100 candidates a paper are always scored",
              "- P: the citation partners counted a paper, its P most coupled and P most co-cited "
              "(`--citation-partners`; a pair kept where either paper keeps it); pairs: coupled plus co-cited "
              "pairs held; linked candidates: as counted without P",
              "- rebuilt from the index's stored item vectors (float16) and its citation signals; the other "
              "settings the index's"]
    write_tables(args.results, f"linked_cap_{name}", meta, table, lines)
    return 0


if __name__ == "__main__":
    sys.exit(main())
