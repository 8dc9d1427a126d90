"""A static encoder distilled from MiniLM against MiniLM itself: texts/s on the texts a build embeds.

`training/static_encoder.py` distils the packaged MiniLM into one vector per token; this benchmark
encodes the same sample texts (abstract sentences, as facet extraction embeds them, and titles +
abstracts, as the paper vectors) with MiniLM on ONNX Runtime (the build's CPU default) and with the
static encoder, in alternating rounds, and prints texts/s (median over rounds) and their ratio, measured
in the same run. It also says how far the static vectors keep MiniLM's neighbourhoods: the share of
each title + abstract's 10 nearest others (by MiniLM) that are among its 10 nearest by the static
encoder. Retrieval quality is measured separately, by building a split with it (docs/scale.md).

    python -m training.static_encoder --out /tmp/minilm-static --sample CORPUS
    python -m experiments.static_encoder --model /tmp/minilm-static [--papers 400] [--rounds 3] [--name cs768]

Writes docs/results/static_encoder{_name}.{md,json}.
"""

from __future__ import annotations

import statistics
import sys
import time

from experiments.common import write_tables
from experiments.encoder_batch import open_sample, sample_note, sample_parser


def neighbour_overlap(a, b, k: int = 10) -> float:
    """Mean share of each row's k nearest other rows by `a` that are among its k nearest by `b`."""
    import numpy as np

    def top(m):
        sims = m @ m.T
        np.fill_diagonal(sims, -np.inf)
        return np.argsort(-sims, axis=1)[:, :k]

    ta, tb = top(np.asarray(a, np.float32)), top(np.asarray(b, np.float32))
    return float(np.mean([len(set(x) & set(y)) / k for x, y in zip(ta.tolist(), tb.tolist())]))


def main(argv: list[str] | None = None) -> int:
    ap = sample_parser(__doc__, "16")
    ap.add_argument("--model", required=True, help="the static encoder's folder (training/static_encoder.py)")
    ap.add_argument("--name", default="", help="suffix of the table's name")
    args = ap.parse_args(argv)
    from graft.encoder import BATCH_SIZE, Encoder

    opened = open_sample(ap, args, BATCH_SIZE["cpu"])
    if opened is None:
        return 1
    corpus, _, texts = opened
    encoders = {"MiniLM (ONNX Runtime)": Encoder(backend="onnx"), "static": Encoder(args.model)}
    for enc in encoders.values():
        enc.encode(texts["abstract sentences"][:64])  # warm-up
    rates: dict[tuple[str, str], list[float]] = {}
    vectors = {}
    for _ in range(args.rounds):
        for kind, sample in texts.items():
            for name, enc in encoders.items():
                enc._memo.clear()  # noqa: SLF001 - every round encodes every text
                t0 = time.perf_counter()
                vectors[(name, kind)] = enc.encode(sample)
                rates.setdefault((name, kind), []).append(len(sample) / (time.perf_counter() - t0))
    overlap = neighbour_overlap(vectors[("MiniLM (ONNX Runtime)", "titles + abstracts")],
                                vectors[("static", "titles + abstracts")])
    rows = []
    for kind in texts:
        base = statistics.median(rates[("MiniLM (ONNX Runtime)", kind)])
        for name in encoders:
            rate = statistics.median(rates[(name, kind)])
            rows.append({"texts": kind, "encoder": name, "n": len(texts[kind]), "texts_per_s": round(rate, 1),
                         "ratio": round(rate / base, 1)})
    name = f"static_encoder{'_' + args.name if args.name else ''}"
    meta = {"model": args.model, "rounds": args.rounds, "neighbour_overlap_at_10": round(overlap, 3),
            "dim": {n: e.dim for n, e in encoders.items()}}
    lines = [f"# A static encoder distilled from MiniLM against MiniLM{' — ' + args.name if args.name else ''}", "",
             f"Command: `python -m experiments.static_encoder {' '.join(argv if argv is not None else sys.argv[1:])}`",
             "", "| texts | encoder | n | texts/s | × MiniLM |", "|---|---|---:|---:|---:|"]
    lines += [f"| {r['texts']} | {r['encoder']} | {r['n']} | {r['texts_per_s']:,} | {r['ratio']} |" for r in rows]
    lines += ["", f"- median over {args.rounds} alternating rounds, each encoder at its default batch size ({encoders['MiniLM (ONNX Runtime)'].batch_size} and {encoders['static'].batch_size}), 2 cores",
              f"- dimensions: MiniLM {encoders['MiniLM (ONNX Runtime)'].dim}, static {encoders['static'].dim}",
              f"- of each title + abstract's 10 nearest others by MiniLM, {overlap:.1%} are among its 10 nearest "
              "by the static encoder", sample_note(args, corpus)]
    write_tables(args.results, name, meta, rows, lines)
    return 0


if __name__ == "__main__":
    sys.exit(main())
