"""Trainer cost per pair on the CPU: the plain layout (one padded row per pair) against prompt sharing
(each prompt once for all its targets in a micro-batch), on an index's real distillation pairs.

Each variant trains a fresh copy of the base model with `training.trainer.fit` for `--warmup` +
`--steps` optimizer steps; the time of the steps after the warm-up gives pairs/s and tokens/s
(tokens: the pairs' prompt + target tokens, as the plain layout counts them, so the two rates are
per the same work). The variants run interleaved, `--repeats` rounds of each, under the same torch
thread count, and the table gives medians and the ratio to the plain layout measured in the same
run: a shared, loaded machine slows both alike. Before timing, the loss of the same real batches
is computed both ways (the packed loss must equal the plain one).

A second table counts the tokens an epoch computes under each layout at micro-batches of
`--batch-size` and 256 pairs (what a GPU plan needs); `--epoch-only` counts them alone, for an
index of any size (cs768's): pairs made in memory with the default coverage-aware sampler when the
index has no `train/pairs.parquet` (nothing is written into it).

    python -m experiments.trainer_speed --index INDEX [--base-model smollm2-135m] [--batch-size 16] \\
        [--warmup 1] [--steps 6] [--repeats 3] [--threads 2]
    python -m experiments.trainer_speed --index CS768_INDEX --epoch-only --name cs768
    python -m experiments.trainer_speed --index INDEX --variants old,new --breakdown 8   # + where a step goes

INDEX holds a built index (with `graft train`'s DocIDs and pairs, or they are made in memory).
Writes docs/results/trainer_speed.{md,json} (--epoch-only: trainer_speed_epoch_NAME.{md,json}).
"""

from __future__ import annotations

import copy
import datetime as dt
import statistics
import sys
import time
from pathlib import Path
from typing import Any

from experiments.common import add_results_argument, parser, write_tables

#: The variants timed: name -> (label, TrainConfig fields).
VARIANTS: dict[str, tuple[str, dict[str, Any]]] = {
    "old": ("one row per pair, foreach AdamW (the old trainer)", {"pack_prompts": False, "fused_adamw": False}),
    "new": ("packed prompts, fused AdamW (the new default)", {"pack_prompts": True, "fused_adamw": True}),
    "pack": ("packed prompts, foreach AdamW", {"pack_prompts": True, "fused_adamw": False}),
    "fused": ("one row per pair, fused AdamW", {"pack_prompts": False, "fused_adamw": True}),
    "frozen": ("packed, fused, frozen embeddings", {"freeze_embeddings": True}),
    "shallow8": ("packed, fused, first 8 decoder layers", {"layers": 8}),
    "shallow8f": ("packed, fused, first 8 layers, frozen embeddings", {"layers": 8, "freeze_embeddings": True}),
    "shallow4f": ("packed, fused, first 4 layers, frozen embeddings", {"layers": 4, "freeze_embeddings": True}),
}


def index_pairs(index: Path, tokenizer: Any) -> Any:
    """The index's encoded coverage-aware pairs: `train/pairs.parquet` when it exists, else made in
    memory with the default sampler (nothing is written)."""
    import pyarrow as pa

    from training.data import encode_pairs_table, read_docid_tokens, read_pairs
    from training.pairs import DistillConfig, make_pairs, pairs_path

    if pairs_path(index).is_file() and (index / "docids" / "docids.parquet").is_file():
        return encode_pairs_table(read_pairs(pairs_path(index)), tokenizer,
                                  docid_tokens=read_docid_tokens(index / "docids" / "docids.parquet"))
    from graft.docids import load_or_build_docids
    from graft.index import Index

    config = DistillConfig()
    docids = load_or_build_docids(index, tokenizer, max_tokens=config.max_tokens, write=False)
    frame = make_pairs(Index.open(index), docids, config)
    table = frame.to_arrow() if hasattr(frame, "to_arrow") else pa.table(frame)
    tokens = {(f, int(d)): list(ids) for f, d, ids in zip(docids.docids["facet"], docids.docids["docid_id"],
                                                           docids.docids["token_ids"])}
    return encode_pairs_table(table, tokenizer, docid_tokens=tokens)


def epoch_tokens(data: Any, micro: int, seed: int = 0) -> dict[str, Any]:
    """Tokens one epoch computes at `micro` pairs per micro-batch: plain (length-grouped, left-padded
    rows) and packed (prompt-grouped batches, each prompt once), real and with padding."""
    import numpy as np

    from training.data import length_grouped_batches
    from training.packing import PackedCollator, prompt_grouped_batches

    lengths = data.lengths
    plain = length_grouped_batches(lengths, micro, seed=seed)
    plain_padded = sum(int(lengths[b].max()) * len(b) for b in plain)
    collate = PackedCollator(0)
    real = padded = 0
    for b in prompt_grouped_batches(data.prompt_groups(), micro, seed=seed):
        segs, rows, size, width = collate.layout([data.example(i) for i in b])
        real += sum(size)
        padded += len(rows) * width
    groups = data.prompt_groups()
    return {"pairs": len(data), "prompts": int(len(np.unique(groups))), "micro_batch": micro,
            "plain_tokens": int(lengths.sum()), "plain_padded_tokens": plain_padded,
            "packed_tokens": real, "packed_padded_tokens": padded,
            "packed_share": round(padded / plain_padded, 4)}


def loss_check(model: Any, tokenizer: Any, data: Any, micro: int, batches: int = 2) -> float:
    """Largest relative difference of the packed and the plain loss over a few real prompt-grouped
    micro-batches (no gradient)."""
    import torch

    from training.data import Collator
    from training.packing import PackedCollator, packed_loss, prompt_grouped_batches

    worst = 0.0
    model.eval()
    with torch.no_grad():
        for b in prompt_grouped_batches(data.prompt_groups(), micro, seed=0)[:batches]:
            examples = [data.example(i) for i in b]
            plain = float(model(**Collator(tokenizer.pad_token_id)(examples)).loss)
            packed = float(packed_loss(model, PackedCollator(tokenizer.pad_token_id)(examples)))
            worst = max(worst, abs(packed - plain) / abs(plain))
    model.train()
    return worst


def time_variant(base: Any, tokenizer: Any, data: Any, fields: dict[str, Any], batch: int, warmup: int,
                 steps: int, data_seed: int = 0) -> dict[str, float]:
    """Train a fresh copy of `base` for warmup + steps steps; pairs/s and tokens/s after the warm-up.
    `data_seed` picks the batch order: each round times other batches of the epoch, so the medians
    are not those of one sample of a few batches."""
    from training.trainer import TrainConfig, fit

    marks: list[tuple[float, int]] = []
    config = TrainConfig(max_steps=warmup + steps, batch_size=batch, save_every_steps=0,
                         logging_steps=warmup + steps, data_seed=data_seed, **fields)
    fit(copy.deepcopy(base), tokenizer, data, None, config, quiet=True, save_final=False,
        on_step=lambda step, info: marks.append((time.perf_counter(), int(info["tokens"]))))
    (t0, k0), (t1, k1) = marks[warmup - 1], marks[-1]
    return {"seconds": t1 - t0, "pairs_per_s": steps * batch / (t1 - t0), "tokens_per_s": (k1 - k0) / (t1 - t0),
            "seconds_per_step": (t1 - t0) / steps}


def breakdown(base: Any, tokenizer: Any, data: Any, micro: int, batches: int, seed: int = 0) -> list[dict[str, Any]]:
    """Where a step's time goes: forward, backward, gradient clipping and the fused AdamW update,
    timed apart (medians) on the same `batches` prompt-grouped micro-batches laid out one row per
    pair and packed, after one untimed step of each."""
    import torch

    from training.data import Collator
    from training.packing import PackedCollator, packed_loss, prompt_grouped_batches

    order = prompt_grouped_batches(data.prompt_groups(), micro, seed=seed)[1 : batches + 2]
    pad = tokenizer.pad_token_id
    rows = []
    for layout, collate in (("one row per pair", Collator(pad, None, target_logits_only=True)),
                            ("packed", PackedCollator(pad))):
        model = copy.deepcopy(base).train()
        params = [p for p in model.parameters() if p.requires_grad]
        opt = torch.optim.AdamW(params, lr=1e-5, fused=True)
        times: dict[str, list[float]] = {"forward": [], "backward": [], "clip": [], "adamw": []}
        tokens = []
        for k, b in enumerate(order):
            batch = collate([data.example(i) for i in b])
            marks = [time.perf_counter()]
            if layout == "packed":
                loss = packed_loss(model, batch)
            else:
                loss = model(**{key: v for key, v in batch.items() if key != "tokens"}).loss
            marks.append(time.perf_counter())
            loss.backward()
            marks.append(time.perf_counter())
            torch.nn.utils.clip_grad_norm_(params, 1.0)
            marks.append(time.perf_counter())
            opt.step()
            opt.zero_grad(set_to_none=True)
            marks.append(time.perf_counter())
            if k:  # the first step warms up
                for name, a, z in zip(times, marks, marks[1:]):
                    times[name].append(z - a)
                tokens.append(int(batch["input_ids"].numel()))
        med = {name: statistics.median(v) for name, v in times.items()}
        rows.append({"layout": layout, **{f"{k}_s": round(v, 3) for k, v in med.items()},
                     "step_s": round(sum(med.values()), 3), "tokens_per_step": statistics.median(tokens)})
    return rows


EPOCH_HEADER = ["| index | pairs | prompts | micro-batch | plain tokens | plain with padding | packed tokens | "
                "packed with padding | packed / plain (padded) |", "|---|---:|---:|---:|---:|---:|---:|---:|---:|"]


def epoch_lines(epochs: list[dict[str, Any]]) -> list[str]:
    return EPOCH_HEADER + [
        f"| `{e['index']}` | {e['pairs']:,} | {e['prompts']:,} | {e['micro_batch']} | {e['plain_tokens']:,} | "
        f"{e['plain_padded_tokens']:,} | {e['packed_tokens']:,} | {e['packed_padded_tokens']:,} | "
        f"{e['packed_share']:.3f} |" for e in epochs]


def write_speed_table(args: Any, command: str, data: Any, threads: int, worst: float,
                      epochs: list[dict[str, Any]], chosen: list[str], runs: dict[str, list[dict[str, float]]],
                      phases: list[dict[str, Any]] | None = None) -> None:
    """trainer_speed.{md,json}: medians of the runs so far and their ratio to the first variant's."""
    import torch

    done = [v for v in chosen if runs[v]]
    baseline = statistics.median(x["pairs_per_s"] for x in runs[chosen[0]])
    rows = []
    for v in done:
        label, fields = VARIANTS[v]
        med = {k: statistics.median(x[k] for x in runs[v]) for k in ("pairs_per_s", "tokens_per_s", "seconds_per_step")}
        rows.append({"variant": v, "trainer": label, **fields, **{k: round(x, 3) for k, x in med.items()},
                     "speedup": round(med["pairs_per_s"] / baseline, 2),
                     "runs_pairs_per_s": [round(x["pairs_per_s"], 3) for x in runs[v]]})
    rounds = max(len(runs[v]) for v in done)
    meta = {"command": command, "date": str(dt.date.today()), "index": str(args.index), "pairs": len(data),
            "base_model": args.base_model, "batch_size": args.batch_size, "warmup": args.warmup, "steps": args.steps,
            "rounds": rounds, "torch_threads": threads, "torch": torch.__version__, "loss_max_rel_diff": worst,
            "epoch_tokens": epochs, "breakdown": phases}
    lines = [f"# Trainer speed on the CPU: {args.base_model}", "",
             f"Command: `{command}`  ", f"Date: {meta['date']} · {len(data):,} pairs of `{args.index}` · batch "
             f"{args.batch_size} · {threads} torch threads · {rounds} interleaved round(s) of {args.steps} timed "
             f"steps (after {args.warmup}) per trainer (round r on its trainer's batch order for data seed r, so "
             "rounds time different batches) · medians", "",
             "| trainer | pairs/s | tokens/s | s/step | × old | pairs/s per round |",
             "|---|---:|---:|---:|---:|---|"]
    lines += [f"| {r['trainer']} | {r['pairs_per_s']:.3f} | {r['tokens_per_s']:,.1f} | {r['seconds_per_step']:.1f} | "
              f"{r['speedup']:.2f} | {', '.join(f'{v:.3f}' for v in r['runs_pairs_per_s'])} |" for r in rows]
    lines += ["", "tokens/s counts each pair's prompt and target tokens (the work one row per pair does), so every "
              "row measures the same pairs. Packed loss vs plain loss of the base model on 2 real micro-batches: "
              f"largest relative difference {worst:.1e}.", "", "## Tokens per epoch", "", *epoch_lines(epochs)]
    if phases:
        lines += ["", "## Where a step's time goes", "",
                  f"The same {args.breakdown} prompt-grouped micro-batches of {args.batch_size} pairs (after one "
                  "untimed step) in each layout, fused AdamW, each phase timed apart; medians in seconds.", "",
                  "| layout | tokens / step (with padding) | forward | backward | clip | AdamW | step |",
                  "|---|---:|---:|---:|---:|---:|---:|"]
        lines += [f"| {r['layout']} | {r['tokens_per_step']:.0f} | {r['forward_s']:.2f} | {r['backward_s']:.2f} | "
                  f"{r['clip_s']:.2f} | {r['adamw_s']:.2f} | {r['step_s']:.2f} |" for r in phases]
    write_tables(args.results, "trainer_speed", meta, rows, lines)


def main(argv: list[str] | None = None) -> int:
    p = parser(__doc__)
    p.add_argument("--index", type=Path, required=True, help="index with DocIDs and pairs for the base model")
    p.add_argument("--epoch-only", action="store_true",
                   help="only count INDEX's tokens per epoch (read only; pairs made in memory when it has none) "
                        "into trainer_speed_epoch_{name}.{md,json}")
    p.add_argument("--name", default="cs768", help="--epoch-only: the table's name")
    p.add_argument("--base-model", default="smollm2-135m")
    p.add_argument("--batch-size", type=int, default=16, help="pairs per optimizer step (one micro-batch)")
    p.add_argument("--warmup", type=int, default=1, help="steps per run left out of the timing (>= 1)")
    p.add_argument("--steps", type=int, default=6, help="timed steps per run")
    p.add_argument("--repeats", type=int, default=3, help="interleaved rounds of every variant")
    p.add_argument("--threads", type=int, default=2, help="torch CPU threads, the same for every variant")
    p.add_argument("--breakdown", type=int, default=0, metavar="N",
                   help="also time forward, backward, clipping and AdamW apart on N micro-batches, both layouts")
    p.add_argument("--variants", default="old,new,pack,fused",
                   help="comma-separated, the first is the baseline: old (one row per pair, foreach AdamW), new "
                        "(packed prompts, fused AdamW), pack (packing alone), fused (fused AdamW alone)")
    add_results_argument(p)
    args = p.parse_args(argv)
    if args.warmup < 1 or args.steps < 1 or args.repeats < 1:
        p.error("--warmup, --steps and --repeats must be >= 1")
    chosen = [v.strip() for v in args.variants.split(",") if v.strip()]
    if not chosen or any(v not in VARIANTS for v in chosen):
        p.error(f"--variants takes names among {', '.join(VARIANTS)}, got {args.variants!r}")
    import torch

    from training.base_models import load_tokenizer, resolve_base_model

    torch.set_num_threads(args.threads)
    command = "python -m experiments.trainer_speed " + " ".join(argv if argv is not None else sys.argv[1:])
    tokenizer = load_tokenizer(args.base_model)
    data = index_pairs(args.index, tokenizer)
    epochs = [{"index": str(args.index), **epoch_tokens(data, m)} for m in (args.batch_size, 256)]
    if args.epoch_only:
        meta = {"command": command, "date": str(dt.date.today()), "index": str(args.index),
                "tokenizer": args.base_model}
        lines = [f"# Tokens per epoch, one row per pair vs packed prompts — {args.name}", "",
                 f"Command: `{command}`  ", f"Date: {meta['date']} · coverage-aware pairs (default sampler) · "
                 f"{args.base_model} tokenizer", "", *epoch_lines(epochs), "",
                 "Plain: length-grouped micro-batches, each pair a left-padded row. Packed: prompt-grouped "
                 "micro-batches, each prompt once per micro-batch, its targets after it (no EOS input); rows of "
                 "at most 512 tokens."]
        write_tables(args.results, f"trainer_speed_epoch_{args.name}", meta, epochs, lines)
        return 0
    base, _ = resolve_base_model(args.base_model, seed=0)
    worst = loss_check(base, tokenizer, data, args.batch_size)
    phases = breakdown(base, tokenizer, data, args.batch_size, args.breakdown) if args.breakdown else None
    runs: dict[str, list[dict[str, float]]] = {v: [] for v in chosen}
    for r in range(args.repeats):
        for v in chosen:
            label, fields = VARIANTS[v]
            runs[v].append(time_variant(base, tokenizer, data, fields, args.batch_size, args.warmup, args.steps,
                                        data_seed=r))
            print(f"round {r + 1}: {label}: {runs[v][-1]['pairs_per_s']:.3f} pairs/s", flush=True)
            # the table so far after every run: a run stopped early still leaves its finished rounds
            write_speed_table(args, command, data, torch.get_num_threads(), worst, epochs, chosen, runs, phases)
    return 0


if __name__ == "__main__":
    sys.exit(main())
