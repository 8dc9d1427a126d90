"""Out-of-corpus facet extraction by encoder backend: what `graft eval` spends before the ooc suite.

Every out-of-corpus query (a held-out paper's title and abstract) is taken apart into facet items
by the heuristic extractor and scored against the index (`EvalContext.prepare_ooc`, the rows kept in
`SPLITDIR/ooc/facets.jsonl` once made): several encoder calls over all queries at once. This
benchmark makes those entries for the same queries with an encoder on each backend, in
alternating rounds (drift of the machine's speed hits both alike), nothing read from or written to
the split's cache, and prints seconds (median over rounds), the ratio to torch measured in the same
run, and how far the entries are from torch's: the share of queries with the same facet items and
the largest difference of an edge weight.

- `torch`: the encoder on PyTorch throughout (`Encoder(backend="torch")`);
- `auto`: the default encoder without a store, which moves to ONNX Runtime with its first call of
  `graft.encoder.AUTO_ONNX_TEXTS` new texts (the export's ~1.5 s is in its time);
- `stored`: the model's stored export (`graft.encoder_store`: tokenizers, ONNX Runtime and
  NumPy pooling, no sentence-transformers), what `graft eval` runs once there is one; it is
  written before the first round where the user cache lacks it.

    python -m experiments.ooc_encoder --split SPLITDIR [--limit N] [--rounds 2]

Writes docs/results/ooc_encoder_{name}.{md,json}.
"""

from __future__ import annotations

import argparse
import os
import platform
import statistics
import sys
import time
from pathlib import Path

from experiments.common import add_results_argument, write_tables

#: The encoders compared; the first is the baseline.
BACKENDS = ("torch", "auto", "stored")


def _weight_gap(a: dict, b: dict) -> float:
    """Largest |difference| of two entries' facet row weights over the union of their columns."""
    gap = 0.0
    for facet in a:
        diff = (a[facet] - b[facet]).tocsr()
        if diff.nnz:
            gap = max(gap, float(abs(diff).max()))
    return gap


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--split", required=True, help="split directory (graft eval prepare + graft build)")
    ap.add_argument("--index", default=None, help="index directory (default SPLITDIR/index)")
    ap.add_argument("--limit", type=int, default=None, help="only the first N out-of-corpus queries by qid")
    ap.add_argument("--rounds", type=int, default=2, help="timed rounds, each backend once per round")
    ap.add_argument("--name", default=None, help="table name: ooc_encoder_{name}.md (default: the corpus)")
    add_results_argument(ap)
    args = ap.parse_args(argv)
    if args.rounds < 1:
        ap.error(f"--rounds must be >= 1, got {args.rounds}")

    import datetime as dt

    import torch

    from eval.runner import corpus_name, load_queries
    from eval.splits import read_split
    from eval.systems import EvalContext
    from experiments.encoder_backend import cpu_flags
    from graft import encoder_store
    from graft.encoder import AUTO_ONNX_TEXTS, Encoder
    from graft.index import Index
    from graphbuild.build import BuildConfig

    split_dir = Path(args.split)
    split = read_split(split_dir)
    index_dir = Path(args.index) if args.index else split_dir / "index"
    index = Index.open(index_dir)
    queries = load_queries(split_dir, "ooc", "test", args.limit)
    if not queries:
        raise SystemExit(f"{split_dir} has no out-of-corpus queries")
    config = BuildConfig.from_manifest(index.manifest)
    store = encoder_store.default_store()

    def make(backend: str) -> Encoder:
        kind = {"stored": {"store": store}}.get(backend, {"backend": backend})
        return Encoder(config.embedding_model, batch_size=config.embedding_batch_size, **kind)

    if make("stored").model is not None:  # no stored export yet: write one, outside the timed rounds
        if Encoder(config.embedding_model, backend="onnx", store=store).stored is None:
            raise SystemExit(f"cannot store the encoder's export in {store} (a read-only cache, or a model "
                             "graft.encoder_store does not reproduce)")

    seconds: dict[str, list[float]] = {b: [] for b in BACKENDS}
    used: dict[str, str] = {}
    entries: dict[str, dict] = {}
    for r in range(args.rounds):
        for backend in BACKENDS:
            encoder = make(backend)
            ctx = EvalContext(index, encoder=encoder)  # no split_dir: nothing cached is read or written
            start = time.perf_counter()
            ctx.prepare_ooc(queries)
            seconds[backend].append(time.perf_counter() - start)
            used[backend] = "onnx file" if encoder.model is None else encoder.backend
            if backend not in entries:  # the first round's entries are compared
                entries[backend] = {q.qid: ctx.ooc_rows(q) for q in queries}  # (rows, facets)
            print(f"round {r + 1} {backend} (ran on {encoder.backend}): {seconds[backend][-1]:.1f} s", flush=True)

    base = statistics.median(seconds[BACKENDS[0]])
    ref = entries[BACKENDS[0]]
    rows = []
    for backend in BACKENDS:
        got = entries[backend]
        med = statistics.median(seconds[backend])
        rows.append({
            "encoder": backend, "ran_on": used[backend], "seconds": round(med, 2),
            "seconds_all": [round(s, 2) for s in seconds[backend]],
            "queries_per_s": round(len(queries) / med, 2), "ratio_to_torch": round(med / base, 3),
            "same_facet_items": round(sum(got[q][1] == ref[q][1] for q in ref) / len(ref), 4),
            "max_weight_diff": max(_weight_gap(got[q][0], ref[q][0]) for q in ref),
        })

    name = args.name or corpus_name(split)
    command = "python -m experiments.ooc_encoder " + " ".join(argv if argv is not None else sys.argv[1:])
    meta = {"command": command, "date": dt.date.today().isoformat(), "corpus_hash": split.get("corpus_hash"),
            "index": str(index_dir), "queries": len(queries), "rounds": args.rounds, "cpu": platform.processor()
            or platform.machine(), "cpu_flags": cpu_flags(), "torch_threads": torch.get_num_threads(),
            "auto_onnx_texts": AUTO_ONNX_TEXTS}
    lines = [f"# Out-of-corpus facet extraction by encoder backend — {name}", "", f"Command: `{command}`  ",
             f"Date: {meta['date']} · corpus hash `{str(meta['corpus_hash'])[:16]}` · {len(queries)} out-of-corpus "
             f"queries · {os.cpu_count()} cores ({meta['cpu_flags']}), torch threads {meta['torch_threads']} · "
             f"median of {args.rounds} alternated round(s)", "",
             "| encoder | ran on | seconds | queries/s | ratio to torch | same facet items | max weight diff |",
             "|---|---|---:|---:|---:|---:|---:|"]
    lines += [f"| {r['encoder']} | {r['ran_on']} | {r['seconds']:.1f} | {r['queries_per_s']:.1f} | "
              f"{r['ratio_to_torch']:.2f} | {r['same_facet_items']:.1%} | {r['max_weight_diff']:.1e} |" for r in rows]
    lines += ["", "- seconds: `EvalContext.prepare_ooc` over all the queries (facet extraction, facet rows, "
              "facet-only rows, text coupling), the encoder already loaded; auto's export is included",
              f"- auto: torch until a call of {AUTO_ONNX_TEXTS} new texts, then ONNX Runtime",
              "- stored: the model's stored export (`~/.cache/graft/encoders`), run by tokenizers + ONNX Runtime + "
              "NumPy pooling; 'onnx file' = no sentence-transformers model loaded",
              "- same facet items: share of queries whose extracted items equal torch's; max weight diff: "
              "largest |difference| of an edge weight of their facet rows"]
    write_tables(args.results, f"ooc_encoder_{name}", meta, rows, lines)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
