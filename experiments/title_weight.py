"""How much of its paper's title a facet item's embedding should carry: the graph teacher's
in-corpus recall for several title weights w, item vector = unit(e(item) + w · e(title)).

The index's facet items alone (as its build kept them; read again in their paper's text where its build
read them so, item context "late") and its titles are embedded once; for each w the
four facet graphs are rebuilt from the mixed vectors with the index's own build settings (full
graphs, and facet-only graphs with beta = 0, where the items' vectors are the only signal) and the
teacher is scored on a split's in-corpus queries. Tune on the `dev` queries; the `test` queries
are for the final tables (`graft eval run`).

    python -m experiments.title_weight --split SPLITDIR [--index SPLITDIR/index] \\
        [--weights 0,0.5,0.7,1.0] [--part dev] [--limit N] [--name cs768]

Writes docs/results/title_weight_{name}.{md,json}.
"""

from __future__ import annotations

import datetime as dt
import sys
import time
from dataclasses import replace
from typing import Any

import numpy as np

from experiments.common import open_split_queries, split_parser, write_tables


def teacher_recalls(graphs: dict[str, Any], queries: dict[str, int], gold: dict[str, set[int]],
                    config: Any = None, links: Any = None) -> dict[str, float]:
    """Mean Recall@k (`eval.metrics.KS`) of the graph teacher over `graphs` for query rows (`config`:
    a `TeacherConfig`, default the design's; `links`: the citation links its channel needs)."""
    from eval.metrics import KS
    from experiments.distill_ceiling import mean_recalls
    from graft.teacher import GraphTeacher

    teacher = GraphTeacher(graphs, config, links)
    ranked = {}
    for qid, q in queries.items():
        fused, _ = teacher.retrieve(teacher.node_rows(q), exclude={q}, k=max(KS))
        ranked[qid] = [c for c, *_ in fused]
    return mean_recalls(ranked, gold)


def main(argv: list[str] | None = None) -> int:
    ap = split_parser(__doc__, table="title_weight", part="dev")
    ap.add_argument("--weights", default="0,0.5,0.7,1.0", help="comma-separated title weights w")
    args = ap.parse_args(argv)

    from eval.runner import corpus_name
    from graft.citations import citation_signals
    from graft.encoder import ContextReader, Encoder, context_keys, read_or_alone, title_vectors, with_title
    from graft.errors import IndexFormatError
    from graphbuild.build import BuildConfig, facet_graphs

    weights = [float(w) for w in args.weights.split(",") if w.strip()]
    if not weights or min(weights) < 0:
        ap.error(f"--weights needs title weights >= 0, got {args.weights!r}")
    opened = open_split_queries(args)
    split, index_dir, idx, queries, gold = opened.split, opened.index_dir, opened.index, opened.rows, opened.gold
    config = BuildConfig.from_manifest(idx.manifest)

    t0 = time.perf_counter()
    encoder = Encoder(config.embedding_model, batch_size=config.embedding_batch_size)
    owner = idx.item_rows
    try:  # the build's own vectors of the items alone, where it kept them
        items = np.asarray(idx.item_text_embeddings, dtype=np.float32)
    except IndexFormatError:
        items = encoder.encode(idx.facets["text"].to_list())
    if config.item_context == "late":  # the items read in their paper's text, as the build read them
        items = read_or_alone(ContextReader(encoder).encode(context_keys(idx.papers, idx.facets)), items)
    titles = title_vectors(encoder, idx.papers["title"].to_list())  # one row per paper, zeros: no title
    title_of_item = titles[owner]
    encode_s = round(time.perf_counter() - t0, 1)
    print(f"embedded {len(items):,} items and {len(titles):,} titles in {encode_s} s", file=sys.stderr, flush=True)

    a = idx.citation_matrix
    signals = citation_signals(a, config.citation_rescale)
    facet_col = idx.facets["facet"].to_numpy()
    settings = {
        "full graphs (teacher)": config.graph_params(),
        "facet-only graphs (beta = 0)": replace(config.graph_params(), alpha=1.0, beta=0.0),
    }
    table: list[dict[str, Any]] = []
    for w in weights:
        vectors = with_title(items, title_of_item, w)
        for label, params in settings.items():
            t0 = time.perf_counter()
            graphs = facet_graphs(owner, facet_col, vectors, a, signals, params, text=idx.text_coupling,
                                  lexical=idx.lexical or None)
            table.append({"title_weight": w, "graphs": label, **teacher_recalls(graphs, queries, gold),
                          "seconds": round(time.perf_counter() - t0, 1)})
            print(f"w = {w}, {label}: R@20 {table[-1]['R@20']:.3f}", file=sys.stderr, flush=True)

    name = args.name or corpus_name(split)
    command = "python -m experiments.title_weight " + " ".join(argv if argv is not None else sys.argv[1:])
    meta = {"command": command, "date": dt.date.today().isoformat(), "corpus_hash": split.get("corpus_hash"),
            "index": str(index_dir), "queries": len(queries), "part": args.part, "encoder": encoder.name,
            "encode_seconds": encode_s, "index_title_weight": config.title_weight}
    lines = [f"# Title weight of the facet item embeddings — {name}", "",
             f"Command: `{command}`  ",
             f"Date: {meta['date']} · corpus hash `{str(meta['corpus_hash'])[:16]}` · {len(queries)} in-corpus "
             f"{args.part} queries · encoder {encoder.name} · graph teacher (two hops, RRF over facets)", "",
             "| title weight w | graphs | R@20 | R@50 | seconds |", "|---:|---|---:|---:|---:|"]
    for row in table:
        lines.append(f"| {row['title_weight']:g} | {row['graphs']} | {row['R@20']:.3f} | {row['R@50']:.3f} | "
                     f"{row['seconds']} |")
    lines += ["", "- item vector = unit(e(item) + w · e(title)); w = 0 embeds each item alone",
              "- each row rebuilds the four facet graphs from those vectors with the index's build settings "
              "(top-K, candidates, citation rescaling); facet-only graphs drop the citation term"]
    write_tables(args.results, f"title_weight_{name}", meta, table, lines)
    return 0


if __name__ == "__main__":
    sys.exit(main())
