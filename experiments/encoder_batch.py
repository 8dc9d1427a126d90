"""Sentence-encoder throughput by batch size, on the texts a build embeds.

The build embeds every candidate sentence of every abstract (the heuristic extractor's prototype
signal, and the facet items' own vectors) and every title + abstract (`embeddings/papers.npy`); on
a 2-core CPU that is most of its time. `graft.encoder.Encoder` sorts texts by length before
batching, so padding is small at any batch size, and the batch size only changes how the matrix
products are cut. This benchmark encodes the same texts at each batch size, in alternating rounds
(every size once per round, so drift of the machine's speed hits all alike), and prints texts/s
(median over rounds) and the ratio to the batch size the build used before (64), measured in the
same run. The vectors agree across batch sizes to float32 rounding (the largest difference is
printed).

    python -m experiments.encoder_batch [--corpus PATH] [--papers 400] [--sizes 8,16,32,64,128] [--rounds 3]
        [--backend torch|onnx]

The encoder runs on one backend throughout (`--backend`, default torch, what the CPU's batch size
was chosen on); `experiments.encoder_backend` compares the backends.

Writes docs/results/encoder_batch.{md,json}.
"""

from __future__ import annotations

import argparse
import datetime as dt
import gzip
import json
import os
import platform
import statistics
import sys
import time
from pathlib import Path

from experiments.common import CS768, add_results_argument, int_list, write_tables
from graft.encoder import BACKENDS as CHOICES

#: The backends an encoder benchmark runs on: every choice but "auto", which moves between them.
FIXED_BACKENDS = tuple(b for b in CHOICES if b != "auto")

BASELINE = 64


def read_records(path: Path, skip: int, count: int) -> list[dict]:
    """`count` records of a JSONL(.gz) corpus after the first `skip`."""
    opener = gzip.open if path.suffix == ".gz" else open
    out = []
    with opener(path, "rt", encoding="utf-8") as fh:
        for i, line in enumerate(fh):
            if i >= skip + count:
                break
            if i >= skip and line.strip():
                out.append(json.loads(line))
    return out


def sample_texts(corpus: Path, skip: int, papers: int, abstracts: int) -> dict[str, list[str]]:
    """The two kinds of text a build embeds, from `papers` records after the first `skip`: their
    candidate abstract sentences (as the heuristic extractor cuts them), and the titles + abstracts
    of the first `abstracts` of them."""
    from graft.extract import candidate_sentences
    from graft.text import paper_text

    records = read_records(corpus, skip, papers)
    return {"abstract sentences": [s for r in records for s in candidate_sentences(
                {"title": r.get("title"), "abstract": r.get("abstract")})],
            "titles + abstracts": [paper_text(r.get("title"), r.get("abstract")) for r in records[:abstracts]]}


def sample_parser(doc: str, sizes: str) -> argparse.ArgumentParser:
    """The options of the encoder benchmarks: the corpus sample, batch sizes (default `sizes`),
    rounds and the results folder."""
    ap = argparse.ArgumentParser(description=doc.split("\n")[0])
    ap.add_argument("--corpus", default=str(CS768), help="JSONL(.gz) corpus with title and abstract")
    ap.add_argument("--skip", type=int, default=1000, help="records skipped before the sample")
    ap.add_argument("--papers", type=int, default=400, help="papers whose sentences are encoded")
    ap.add_argument("--abstracts", type=int, default=200, help="of them, papers whose title + abstract is encoded")
    ap.add_argument("--sizes", default=sizes, help="batch sizes (comma-separated)")
    ap.add_argument("--rounds", type=int, default=3, help="alternating rounds")
    add_results_argument(ap)
    return ap


def open_sample(ap: argparse.ArgumentParser, args: argparse.Namespace,
                baseline: int) -> tuple[Path, list[int], dict[str, list[str]]] | None:
    """The corpus, the batch sizes (with `baseline`'s) and the sample texts of `sample_parser`'s
    options; a usage error for bad counts, None (with a message) when the corpus is absent."""
    sizes = sorted(set(int_list(ap, args.sizes, "--sizes")) | {baseline})
    if args.rounds < 1 or args.papers < 1 or args.abstracts < 1:
        ap.error("--rounds, --papers and --abstracts must be >= 1")
    corpus = Path(args.corpus)
    if not corpus.is_file():
        print(f"corpus {corpus} not found (see ../shared/data/README.md); pass --corpus", file=sys.stderr)
        return None
    return corpus, sizes, sample_texts(corpus, args.skip, args.papers, args.abstracts)


def sample_note(args: argparse.Namespace, corpus: Path) -> str:
    """The tables' line that says which texts were encoded."""
    return (f"- sample: {args.papers} papers after the first {args.skip} of {corpus.name}; titles + abstracts of "
            f"the first {args.abstracts} of them (MiniLM reads at most 256 tokens)")


def main(argv: list[str] | None = None) -> int:
    ap = sample_parser(__doc__, "8,16,32,64,128")
    ap.add_argument("--backend", default="torch", choices=FIXED_BACKENDS,
                    help="what runs the encoder, the same in every round (an auto encoder would move mid-run)")
    args = ap.parse_args(argv)
    opened = open_sample(ap, args, BASELINE)
    if opened is None:
        return 1
    corpus, sizes, texts = opened

    import numpy as np

    from graft.encoder import Encoder

    encoder = Encoder(backend=args.backend)
    encoder.encode(texts["abstract sentences"][:64])  # warm-up
    rates: dict[tuple[str, int], list[float]] = {}
    vectors: dict[tuple[str, int], np.ndarray] = {}
    for _ in range(args.rounds):
        for size in sizes:
            encoder.batch_size = size
            for kind, batch in texts.items():
                encoder._memo.clear()  # every round encodes from scratch
                t0 = time.perf_counter()
                vectors[(kind, size)] = encoder.encode(batch)
                rates.setdefault((kind, size), []).append(len(batch) / (time.perf_counter() - t0))
    table = []
    for kind in texts:
        base = statistics.median(rates[(kind, BASELINE)])
        for size in sizes:
            rate = statistics.median(rates[(kind, size)])
            diff = float(np.abs(vectors[(kind, size)] - vectors[(kind, BASELINE)]).max())
            table.append({"texts": kind, "count": len(texts[kind]), "batch": size, "texts_per_s": round(rate, 1),
                          "ratio_to_64": round(rate / base, 3), "max_abs_diff_to_64": diff})
    command = "python -m experiments.encoder_batch " + " ".join(argv if argv is not None else sys.argv[1:])
    meta = {"command": command, "date": dt.date.today().isoformat(), "cores": os.cpu_count(),
            "machine": platform.machine(), "python": platform.python_version(), "encoder": encoder.name,
            "backend": encoder.backend, "rounds": args.rounds, "corpus": str(corpus)}
    lines = ["# Sentence-encoder throughput by batch size", "",
             f"Command: `{command}`  ",
             f"Date: {meta['date']} · {meta['cores']} cores, {meta['machine']}, Python {meta['python']} · "
             f"encoder {encoder.name} on the CPU ({encoder.backend}) · {args.rounds} alternating rounds, medians", "",
             "| texts | count | batch | texts/s | ratio to batch 64 | max abs difference to batch 64 |",
             "|---|---:|---:|---:|---:|---:|"]
    for row in table:
        lines.append(f"| {row['texts']} | {row['count']} | {row['batch']} | {row['texts_per_s']} | "
                     f"{row['ratio_to_64']:.2f} | {row['max_abs_diff_to_64']:.1e} |")
    lines += ["", "- texts are sorted by length before batching (`Encoder.encode`), at every batch size",
              sample_note(args, corpus)]
    write_tables(args.results, "encoder_batch", meta, table, lines)
    return 0


if __name__ == "__main__":
    sys.exit(main())
