"""Can a base model learn to decode an index's DocIDs from its prompts? A pipeline check of the
conditioning (prompt format, left padding, labels, trie-constrained decoding) with a real base
model, on the CPU in minutes; not a measure of retrieval.

A seeded sample of the index's training pairs, one per distinct source item, is fine-tuned with
the trainer (`training.trainer.fit`) for a fixed number of steps, then each source item is decoded
under its facet's trie: the share of pairs whose target DocID is the top beam and among the beams,
and how many distinct DocIDs the top beams are (a model that ignores its prompt decodes the same
few for every source). The GPU evaluation run reports the same figures after its training
(`gpu_eval.py`'s memorisation check), over pairs that each share their source with ~10 others.

    python -m experiments.learn_pairs --index INDEX [--base-model smollm2-135m] [--pairs 32] \\
        [--steps 40] [--batch-size 8] [--lr 2e-4] [--beams 5] [--name cs768]

INDEX holds DocIDs and training pairs made with the base model's tokenizer (`graft train INDEX`
writes them first; `gpu_eval.py prepare` leaves such an index in its --work folder). Writes
docs/results/learn_pairs_{name}.{md,json}.
"""

from __future__ import annotations

import datetime as dt
import sys
import time
from pathlib import Path
from typing import Any

from experiments.common import add_results_argument, parser, write_tables


def learn(index: Path, base_model: str, pairs: int, steps: int, batch_size: int, lr: float, beams: int,
          seed: int = 0) -> dict[str, Any]:
    """Fine-tune `base_model` on `pairs` sampled pairs of `index` for `steps` steps and decode them."""
    from graft.check import prompt_check, sample_pairs
    from graft.docids import load_docids, load_tries
    from graft.errors import GraftError
    from training.base_models import load_tokenizer, resolve_base_model
    from training.data import encode_pairs_table, read_docid_tokens, read_pairs
    from training.pairs import pairs_path
    from training.trainer import TrainConfig, fit

    tokenizer = load_tokenizer(base_model)
    load_docids(index, tokenizer)  # DocIDs of another tokenizer are refused, naming the fix
    if not pairs_path(index).is_file():
        raise GraftError(f"no training pairs in '{index}'; `graft train {index} --base-model {base_model}` makes them")
    table = sample_pairs(read_pairs(pairs_path(index)), pairs, seed)
    data = encode_pairs_table(table, tokenizer, docid_tokens=read_docid_tokens(index / "docids" / "docids.parquet"))
    model, _ = resolve_base_model(base_model, seed=seed)
    t0 = time.perf_counter()
    result = fit(model, tokenizer, data, None, TrainConfig(max_steps=steps, batch_size=batch_size, lr=lr,
                                                           warmup_ratio=0.0, logging_steps=max(1, steps // 8)),
                 quiet=True, save_final=False)
    train_s = time.perf_counter() - t0
    check = prompt_check(result.model, tokenizer, load_tries(index), table, pairs=table.num_rows, beams=beams,
                         seed=seed)
    return {"pairs": check.pairs, "epochs": steps * batch_size / check.pairs,
            "losses": [[s, round(v, 4)] for s, v in result.losses], "target_is_top_beam": check.target_is_top_beam,
            "target_in_beams": check.target_in_beams, "distinct_top_beams": check.distinct_top_beams,
            "train_s": round(train_s, 1), "decode_s": round(check.seconds, 1)}


def main(argv: list[str] | None = None) -> int:
    p = parser(__doc__)
    p.add_argument("--index", type=Path, required=True, help="index with DocIDs and pairs for the base model")
    p.add_argument("--base-model", default="smollm2-135m")
    p.add_argument("--pairs", type=int, default=32, help="pairs sampled, one per distinct source item")
    p.add_argument("--steps", type=int, default=40)
    p.add_argument("--batch-size", type=int, default=8)
    p.add_argument("--lr", type=float, default=2e-4)
    p.add_argument("--beams", type=int, default=5)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--threads", type=int, default=None, help="torch CPU threads (default: torch's)")
    add_results_argument(p)
    p.add_argument("--name", default="cs768")
    args = p.parse_args(argv)
    import torch

    if args.threads:
        torch.set_num_threads(args.threads)
    r = learn(args.index, args.base_model, args.pairs, args.steps, args.batch_size, args.lr, args.beams, args.seed)
    command = "python -m experiments.learn_pairs " + " ".join(argv if argv is not None else sys.argv[1:])
    meta = {"command": command, "date": str(dt.date.today()), "index": str(args.index), "base_model": args.base_model,
            "steps": args.steps, "batch_size": args.batch_size, "lr": args.lr, "beams": args.beams, "seed": args.seed,
            "device": "cpu", "torch_threads": torch.get_num_threads()}
    lines = [f"# Learning an index's pairs: {args.base_model}", "",
             f"Command: `{command}` ({meta['date']}, CPU, {meta['torch_threads']} threads)", "",
             "| pairs | steps | batch | lr | epochs | loss (step: value) | target = top beam | target among "
             f"{args.beams} beams | distinct top beams | train s |",
             "|---:|---:|---:|---:|---:|---|---:|---:|---:|---:|",
             f"| {r['pairs']} | {args.steps} | {args.batch_size} | {args.lr:g} | {r['epochs']:.1f} | "
             + ", ".join(f"{s}: {v:.3f}" for s, v in r["losses"])
             + f" | {r['target_is_top_beam']:.1%} | {r['target_in_beams']:.1%} | {r['distinct_top_beams']} of "
             f"{r['pairs']} | {r['train_s']:.0f} |", "",
             "One pair per distinct source item, so each target is the only right answer for its prompt; "
             "decoding is trie-constrained beam search over the facet's DocIDs (the whole index's)."]
    write_tables(args.results, f"learn_pairs_{args.name}", meta, [r], lines)
    return 0


if __name__ == "__main__":
    sys.exit(main())
