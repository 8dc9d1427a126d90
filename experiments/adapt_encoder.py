"""Adapt the packaged MiniLM to a split's corpus by contrastive fine-tuning on its citation links,
leak-free, and stage a copy of the split whose indexes use it.

The training links are the split corpus's citation links less every link of an in-corpus query (dev
and test: their links are what those queries are judged by); out-of-corpus queries are not in the
corpus at all. So one adapted encoder serves the dev, test and out-of-corpus suites.

    python -m experiments.adapt_encoder --split SPLITDIR --model /tmp/minilm-adapted \\
        --copy /tmp/split-adapted [--epochs 1] [--max-pairs N] [--max-tokens 128] [--no-hard-negatives]
    graft eval build /tmp/split-adapted --embedding-model /tmp/minilm-adapted
    graft eval run /tmp/split-adapted --suite incorpus --part dev --systems dense,facet,teacher,teacher-cite

The copy holds the split's queries, gold files, corpora and nearest-paper sets (so non_obvious@20
stays comparable), not its indexes. The run's settings and training figures go to
`docs/results/adapt_encoder_{name}.md` (and .json).
"""

from __future__ import annotations

import json
import sys
from datetime import date
from pathlib import Path

import numpy as np

from experiments.common import add_results_argument, copy_split_queries, parser, write_tables


def main(argv: list[str] | None = None) -> None:
    ap = parser(__doc__)
    ap.add_argument("--split", required=True, help="split directory from `graft eval prepare`")
    ap.add_argument("--model", required=True, help="folder the adapted sentence-transformers model is saved to")
    ap.add_argument("--copy", default=None, help="also copy the split here (without indexes) for "
                    "`graft eval build COPY --embedding-model MODEL`")
    ap.add_argument("--epochs", type=float, default=1.0)
    ap.add_argument("--batch-size", type=int, default=32)
    ap.add_argument("--max-tokens", type=int, default=128)
    ap.add_argument("--lr", type=float, default=2e-5)
    ap.add_argument("--max-pairs", type=int, default=None, help="at most this many links (a random sample)")
    ap.add_argument("--no-hard-negatives", action="store_true", help="in-batch negatives only")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--name", default="cs768")
    add_results_argument(ap)
    args = ap.parse_args(argv)

    from eval.splits import read_split
    from graft.text import paper_texts
    from graphbuild.corpus import load_corpus
    from training.encoder_adapt import AdaptConfig, adapt_encoder, link_pairs

    split = Path(args.split)
    meta = read_split(split)
    corpus = load_corpus(split / "corpus.jsonl")
    queries = {json.loads(line)["paper_id"] for line in (split / "incorpus" / "queries.jsonl").open()
               if line.strip()}
    ids = corpus.papers["paper_id"].to_list()
    citations = list(corpus.citations().iter_rows())
    pairs = link_pairs(ids, citations, exclude=queries)
    all_links = len(link_pairs(ids, citations))
    texts = paper_texts(corpus.papers)
    config = AdaptConfig(epochs=args.epochs, batch_size=args.batch_size, max_tokens=args.max_tokens, lr=args.lr,
                         hard_negatives=not args.no_hard_negatives, max_pairs=args.max_pairs)
    vectors = _stored_paper_vectors(split / "index", ids) if config.hard_negatives else None
    print(f"adapt: {len(pairs):,} training links of {all_links:,} ({all_links - len(pairs):,} touch one of "
          f"{len(queries)} in-corpus queries and are left out); {len(ids):,} papers", file=sys.stderr)
    stats = adapt_encoder(texts, pairs, args.model, config, vectors=vectors, threads=args.threads)
    if args.copy:
        copy_split_queries(split, args.copy, corpora=True)

    command = "python -m experiments.adapt_encoder " + " ".join(argv if argv is not None else sys.argv[1:])
    info = {"date": date.today().isoformat(), "corpus_hash": meta["corpus_hash"], "papers": len(ids),
            "links": all_links, "training_links": len(pairs), "excluded_queries": len(queries),
            "model": str(args.model), "command": command, **stats}
    lines = [f"# Corpus-adapted encoder — {args.name}", "", f"Command: `{command}`  ",
             f"Date: {info['date']} · corpus hash `{meta['corpus_hash'][:16]}` · {len(ids):,} papers", "",
             "| links | training links | pairs trained | steps | hard negatives | seconds | pairs/s | loss, first tenth | loss, last tenth |",
             "|---:|---:|---:|---:|---|---:|---:|---:|---:|",
             f"| {all_links:,} | {len(pairs):,} | {stats['pairs_trained']:,} | {stats['steps']:,} | "
             f"{'yes' if config.hard_negatives else 'no'} | {stats['seconds']} | {stats['pairs_per_s']} | "
             f"{stats['loss_first']} | {stats['loss_last']} |", "",
             f"- base: the packaged all-MiniLM-L6-v2; {config.max_tokens} tokens of title + abstract while "
             f"training, batch {config.batch_size}, lr {config.lr}, {config.epochs} epoch(s), symmetric in-batch "
             f"loss at scale {config.scale}" + (f", one hard negative a pair from the anchor's dense neighbours at "
                                                 f"ranks {config.negative_ranks[0]}–{config.negative_ranks[1]} "
                                                 "not linked to it" if config.hard_negatives else ""),
             f"- leak-free: every link touching one of the split's {len(queries)} in-corpus queries is left out; "
             "out-of-corpus queries are not in the corpus"]
    write_tables(args.results, f"adapt_encoder_{args.name}", info, [stats], lines)
    if args.copy:
        print(f"next: graft eval build {args.copy} --embedding-model {args.model}", file=sys.stderr)


def _stored_paper_vectors(index: Path, ids: list[str]) -> np.ndarray | None:
    """The generic title + abstract vectors of the split's index when it was built with the packaged
    encoder and holds exactly these papers in this order (else None: they are encoded)."""
    from graft.errors import GraftError
    from graft.index import Index

    try:
        opened = Index.open(index)
    except GraftError:
        return None
    if opened.build_setting("embedding_model", None) or opened.paper_ids != ids:
        return None  # another model's vectors, or another corpus
    return opened.paper_embeddings


if __name__ == "__main__":
    main()
