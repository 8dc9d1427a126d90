"""The training recipe on a slice of an index's pairs, on the CPU: learning rate x batch size, and
decoder depth, each by how much of its pairs a model reproduces after a fixed number of epochs.

The slice: every coverage-aware pair whose source is one of `--papers` papers drawn with `--seed`
(so each source item keeps all its taught targets, as in the whole corpus). Every variant trains a
fresh copy of the base model on the slice for `--epochs` epochs (linear warm-up and decay, as
`graft train`), then decodes every distinct source item of the slice with `--beams` beams
(`graft.check.memorisation`): the share of taught targets among the beams is the figure to compare.
Train seconds are measured in the same run on the same machine; "pairs/s" is the slice's
pair-passes per train second.

    python -m experiments.train_recipe --index INDEX --papers 20 --epochs 3 --lrs 3e-4,1e-3,3e-3 \\
        --batches 16,32 --layers 8 [--depths 4,30 --depth-lr 1e-3] [--threads 2] --name NAME

INDEX is a built index; its DocIDs and pairs for the base model are made first when absent (as
`graft train` makes them). Writes docs/results/train_recipe_{name}.{md,json}.
"""

from __future__ import annotations

import datetime as dt
import sys
import time
from pathlib import Path
from typing import Any

from experiments.common import add_results_argument, float_list, int_list, parser, write_tables


def slice_table(index: Path, tokenizer: Any, papers: int, seed: int) -> Any:
    """The pairs (pyarrow) of `papers` seeded source papers of the index, made first when absent."""
    import numpy as np
    import pyarrow as pa
    import pyarrow.compute as pc

    from training.data import PAIR_COLUMNS, read_pairs
    from training.pairs import build_pairs, pairs_path

    if not pairs_path(index).is_file():
        build_pairs(index, tokenizer)
    table = read_pairs(pairs_path(index), (*PAIR_COLUMNS, "source_paper"))
    sources = sorted(set(table.column("source_paper").to_pylist()))
    pick = np.random.default_rng(seed).choice(len(sources), size=min(papers, len(sources)), replace=False)
    return table.filter(pc.is_in(table.column("source_paper"), value_set=pa.array([sources[i] for i in sorted(pick)])))


def run_variant(base: Any, tokenizer: Any, tries: Any, table: Any, data: Any, *, lr: float, batch: int,
                layers: int | None, epochs: float, beams: int, freeze: bool) -> dict[str, Any]:
    """Train a copy of `base` on the slice and measure what it reproduces."""
    import copy

    from graft.check import memorisation
    from training.trainer import TrainConfig, fit

    config = TrainConfig(epochs=epochs, batch_size=batch, lr=lr, layers=layers, freeze_embeddings=freeze,
                         save_every_steps=0, logging_steps=5)
    t0 = time.perf_counter()
    result = fit(copy.deepcopy(base), tokenizer, data, None, config, quiet=True, save_final=False)
    train_s = time.perf_counter() - t0
    m = memorisation(result.model.eval(), tokenizer, tries, table, beams=beams)
    return {"layers": layers or base.config.num_hidden_layers, "lr": lr, "batch": batch, "freeze_embeddings": freeze,
            "epochs": epochs, "steps": result.steps, "final_loss": round(result.final_loss, 4),
            "train_s": round(train_s, 1), "pairs_per_s": round(len(data) * epochs / train_s, 2), **m.to_dict()}


def main(argv: list[str] | None = None) -> int:
    ap = parser(__doc__)
    ap.add_argument("--index", type=Path, required=True)
    ap.add_argument("--base-model", default="smollm2-135m")
    ap.add_argument("--papers", type=int, default=20, help="source papers in the slice")
    ap.add_argument("--epochs", type=float, default=3.0)
    ap.add_argument("--lrs", default="3e-4,1e-3,3e-3", help="learning rates of the grid")
    ap.add_argument("--batches", default="16,32", help="batch sizes of the grid")
    ap.add_argument("--layers", type=int, default=None, help="decoder layers of the grid (default: all)")
    ap.add_argument("--freeze-embeddings", action="store_true", help="grid and depths: frozen token embeddings")
    ap.add_argument("--depths", default="", help="further decoder depths, trained at --depth-lr, --depth-batch")
    ap.add_argument("--depth-lr", type=float, default=1e-3)
    ap.add_argument("--depth-batch", type=int, default=16)
    ap.add_argument("--beams", type=int, default=10)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--name", required=True)
    add_results_argument(ap)
    args = ap.parse_args(argv)
    import torch

    from graft.docids import load_tries
    from training.base_models import load_tokenizer, resolve_base_model
    from training.data import encode_pairs_table, read_docid_tokens

    torch.set_num_threads(args.threads)
    tokenizer = load_tokenizer(args.base_model)
    table = slice_table(args.index, tokenizer, args.papers, args.seed)
    data = encode_pairs_table(table, tokenizer, docid_tokens=read_docid_tokens(args.index / "docids" / "docids.parquet"))
    tries = load_tries(args.index)
    base, _ = resolve_base_model(args.base_model)
    plan = [(lr, b, args.layers) for lr in float_list(ap, args.lrs, "--lrs") for b in int_list(ap, args.batches, "--batches")]
    plan += [(args.depth_lr, args.depth_batch, d) for d in int_list(ap, args.depths, "--depths", required=False)]
    rows = []
    for lr, batch, layers in plan:
        row = run_variant(base, tokenizer, tries, table, data, lr=lr, batch=batch, layers=layers, epochs=args.epochs,
                          beams=args.beams, freeze=args.freeze_embeddings)
        rows.append(row)
        print({k: row[k] for k in ("layers", "lr", "batch", "final_loss", "target_in_beams", "top_beam_taught",
                                   "distinct_top_beams", "train_s")}, flush=True)
    command = "python -m experiments.train_recipe " + " ".join(argv if argv is not None else sys.argv[1:])
    meta = {"command": command, "date": str(dt.date.today()), "index": str(args.index), "base_model": args.base_model,
            "pairs": len(data), "papers": args.papers, "prompts": rows[0]["prompts"], "epochs": args.epochs,
            "beams": args.beams, "threads": torch.get_num_threads(), "freeze_embeddings": args.freeze_embeddings}
    lines = [f"# Training recipe on a slice: {args.base_model}", "",
             f"Command: `{command}`  ", f"Date: {meta['date']} · CPU, {meta['threads']} torch threads · slice: "
             f"{len(data):,} pairs of {args.papers} source papers ({meta['prompts']} source items) · {args.epochs:g} "
             f"epochs each · {args.beams} beams", "",
             f"| layers | lr | batch | steps | final loss | taught targets in {args.beams} beams | top beam taught | "
             "distinct top beams / prompt | train s | pairs/s |",
             "|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
    lines += [f"| {r['layers']} | {r['lr']:g} | {r['batch']} | {r['steps']} | {r['final_loss']:.3f} | "
              f"{r['target_in_beams']:.3f} | {r['top_beam_taught']:.3f} | {r['distinct_top_beams']:.2f} | "
              f"{r['train_s']:.0f} | {r['pairs_per_s']:.1f} |" for r in rows]
    write_tables(args.results, f"train_recipe_{args.name}", meta, rows, lines)
    return 0


if __name__ == "__main__":
    sys.exit(main())
