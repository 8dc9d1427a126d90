"""Sentence-encoder throughput by backend (PyTorch vs ONNX Runtime), on the texts a build embeds.

`graft.encoder.Encoder` runs the transformer in PyTorch or, for bulk work on the CPU
(`graft build`), in ONNX Runtime (`graft.encoder_onnx`). This benchmark encodes the same texts
with each backend at each batch size, in alternating rounds (every configuration once per round, so
drift of the machine's speed hits all alike), and prints texts/s (median over rounds), the ratio to
PyTorch at the CPU's default batch size (the build's encoder before), measured in the same run, and
the largest difference of the vectors to that baseline's.

    python -m experiments.encoder_backend [--corpus PATH] [--papers 400] [--sizes 16,32,64] [--rounds 3]

Writes docs/results/encoder_backend.{md,json}.
"""

from __future__ import annotations

import datetime as dt
import os
import platform
import statistics
import sys
import time
from pathlib import Path

from experiments.common import write_tables
from experiments.encoder_batch import FIXED_BACKENDS as BACKENDS  # the backends compared
from experiments.encoder_batch import open_sample, sample_note, sample_parser


def cpu_flags() -> str:
    """The widest x86 vector extensions this CPU reports (they decide both backends' kernels)."""
    try:
        flags = set(Path("/proc/cpuinfo").read_text().split("flags", 2)[1].split("\n", 1)[0].split())
    except (OSError, IndexError):
        return "unknown"
    shown = [f for f in ("avx2", "avx512f", "avx512_bf16", "amx_tile") if f in flags]
    return ", ".join(shown) or "no AVX2"


def main(argv: list[str] | None = None) -> int:
    ap = sample_parser(__doc__, "16,32,64")
    args = ap.parse_args(argv)
    from graft.encoder import BATCH_SIZE, Encoder

    baseline = ("torch", BATCH_SIZE["cpu"])
    opened = open_sample(ap, args, baseline[1])
    if opened is None:
        return 1
    corpus, sizes, texts = opened

    import numpy as np

    encoders = {}
    start_s = {}
    for backend in BACKENDS:
        t0 = time.perf_counter()
        encoders[backend] = Encoder(backend=backend)
        start_s[backend] = time.perf_counter() - t0
        encoders[backend].encode(texts["abstract sentences"][:64])  # warm-up
    rates: dict[tuple[str, str, int], list[float]] = {}
    vectors: dict[tuple[str, str, int], np.ndarray] = {}
    for _ in range(args.rounds):
        for size in sizes:
            for backend, encoder in encoders.items():
                encoder.batch_size = size
                for kind, batch in texts.items():
                    encoder._memo.clear()  # every round encodes from scratch
                    t0 = time.perf_counter()
                    vectors[(kind, backend, size)] = encoder.encode(batch)
                    rates.setdefault((kind, backend, size), []).append(len(batch) / (time.perf_counter() - t0))
    table = []
    for kind in texts:
        base = statistics.median(rates[(kind, *baseline)])
        for backend in BACKENDS:
            for size in sizes:
                rate = statistics.median(rates[(kind, backend, size)])
                diff = float(np.abs(vectors[(kind, backend, size)] - vectors[(kind, *baseline)]).max())
                table.append({"texts": kind, "count": len(texts[kind]), "backend": backend, "batch": size,
                              "texts_per_s": round(rate, 1), "ratio_to_baseline": round(rate / base, 3),
                              "max_abs_diff_to_baseline": diff})
    command = "python -m experiments.encoder_backend " + " ".join(argv if argv is not None else sys.argv[1:])
    meta = {"command": command, "date": dt.date.today().isoformat(), "cores": os.cpu_count(),
            "machine": platform.machine(), "cpu_flags": cpu_flags(), "python": platform.python_version(),
            "encoder": encoders["torch"].name, "rounds": args.rounds, "corpus": str(corpus),
            "baseline": {"backend": baseline[0], "batch": baseline[1]},
            "start_s": {k: round(v, 2) for k, v in start_s.items()}}
    lines = ["# Sentence-encoder throughput by backend", "",
             f"Command: `{command.strip()}`  ",
             f"Date: {meta['date']} · {meta['cores']} cores, {meta['machine']} ({meta['cpu_flags']}), "
             f"Python {meta['python']} · encoder {meta['encoder']} on the CPU · {args.rounds} alternating rounds, "
             "medians", "",
             f"| texts | count | backend | batch | texts/s | ratio to torch, batch {baseline[1]} | "
             "max abs difference to it |",
             "|---|---:|---|---:|---:|---:|---:|"]
    for row in table:
        lines.append(f"| {row['texts']} | {row['count']} | {row['backend']} | {row['batch']} | {row['texts_per_s']} | "
                     f"{row['ratio_to_baseline']:.2f} | {row['max_abs_diff_to_baseline']:.1e} |")
    lines += ["", f"- start-up (model load; for onnx, with the export to ONNX Runtime): torch {start_s['torch']:.1f} s, "
              f"onnx {start_s['onnx']:.1f} s",
              "- texts are sorted by length before batching (`Encoder.encode`), with either backend",
              sample_note(args, corpus)]
    write_tables(args.results, "encoder_backend", meta, table, lines)
    return 0


if __name__ == "__main__":
    sys.exit(main())
