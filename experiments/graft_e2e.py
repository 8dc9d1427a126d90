"""GRAFT end to end on a corpus the CPU trains: the generative retriever trained on every
coverage-aware pair of a split's in-corpus test index, its memorisation curve per epoch, then the
leak-free evaluation (in corpus, out of corpus, attribution) beside the teacher in the same run.

    python -m experiments.graft_e2e --corpus CORPUS --split SPLITDIR --work WORK --lr 1e-3 --batch-size 16 \\
        --epochs 4 --name NAME [--results docs/results]

With --corpus and no split yet, stage 0 makes it: the corpus's densest k-core of >= `--min-papers`
papers (experiments/subcorpus.py), `graft eval prepare` (100 out-of-corpus hold-outs, 120 in-corpus
queries, no survey hold-outs) and `graft eval build`. Without --corpus, SPLITDIR must exist. One model, trained on `SPLITDIR/incorpus/test/index` (the test part's
leak-free index: its queries' links are not in it), answers both suites, as the GPU plan's does.

Stages, each resumable (rerun the same command after a kill):
0. **split** (`--corpus`, once): sub-corpus, split and its indexes, as above.
1. **train** (`training.pipeline.train_index`, checkpoints every `--save-every-steps`): after every
   `--measure-every` epochs (default 1) and at the end, the curve: the memorisation of held training pairs (every pair of `--held-papers`
   seeded source papers, `graft.check.memorisation`: taught targets among `--held-beams` beams,
   prompts whose top beam is taught, distinct top beams) and `graft` (graph-RRF) Recall@20 on the
   first `--curve-queries` in-corpus test and out-of-corpus queries, beside the memorisation ceiling
   of the same pairs on the same in-corpus queries (`experiments.distill_ceiling`). Each point's row
   is appended to WORK/curve.jsonl as it is measured; epochs already there are not measured again.
2. **naive** (`--naive`): the same model trained on naive pairs for the same number of steps, in a
   copy of the index under WORK (the `graft-naive` row).
3. **eval**: `graft eval run` of `--systems` with the suites incorpus (test part), ooc and
   attribution, tables in --results under NAME.

WORK/e2e_{NAME}.md (and --results/e2e_{NAME}.md when done) holds the curve, the settings and the
headline ratios; progress lines go to stderr (redirect them to a log: `> WORK/log 2>&1 &`).
"""

from __future__ import annotations

import datetime as dt
import json
import os
import shutil
import sys
import time
from pathlib import Path
from typing import Any

from experiments.common import add_results_argument, copy_split_queries, parser

SYSTEMS = "bm25,dense,teacher,teacher-cite,graft,graft-rrf,graft-walk,graft-cite"


def log(message: str) -> None:
    print(f"[{dt.datetime.now():%H:%M:%S}] {message}", file=sys.stderr, flush=True)


def link_index(source: Path, target: Path, *, skip: tuple[str, ...]) -> None:
    """`target` as a copy of the index `source` but `skip`, its files hard links (an index never
    follows symlinks out of its folder; its files are replaced, never written in place)."""
    if target.is_dir():
        return
    shutil.copytree(source, target, copy_function=os.link,
                    ignore=lambda d, names: [n for n in names if Path(d) == source and (n in skip or n.startswith(
                        ".graft-lock"))])


def make_split(corpus: Path, split: Path, work: Path, min_papers: int) -> None:
    """Stage 0: the k-core sub-corpus of `corpus`, its split and the split's indexes."""
    import subprocess

    from experiments.subcorpus import main as subcorpus

    sub = work / "corpus.jsonl"
    subcorpus([str(corpus), "--min-papers", str(min_papers), "--out", str(sub)])
    graft = [sys.executable, "-m", "cli.app"]
    subprocess.run([*graft, "eval", "prepare", str(sub), "--out", str(split), "--ooc", "100", "--survey", "0",
                    "--survey-dev", "0", "--incorpus", "120"], check=True)
    subprocess.run([*graft, "eval", "build", str(split)], check=True)


class Curve:
    """The per-epoch measurements, run from the trainer's step callback at each epoch's last step."""

    def __init__(self, args: Any, index: Path, work: Path, tokenizer: Any, held: Any, ceiling: dict[str, float],
                 on_row: Any):
        from graft.docids import load_tries

        self.args, self.work, self.tokenizer, self.held = args, work, tokenizer, held
        self.tries = load_tries(index)
        self.ceiling = ceiling
        self.on_row = on_row  # called after each epoch's row is written (the report is rewritten)
        self.path = work / "curve.jsonl"
        self.rows = [json.loads(x) for x in self.path.read_text().splitlines()] if self.path.is_file() else []
        self.snap = work / "snapshot" / "index"
        link_index(index, self.snap, skip=("model", "cache"))
        self.split = copy_split_queries(args.split, work / "curve-split")

    def __call__(self, step: int, info: dict[str, Any]) -> None:
        points = curve_points(self.args.epochs, self.args.measure_every)
        ends = {round(p * info["total"] / self.args.epochs): p for p in points}
        if step not in ends or any(r["epoch"] == ends[step] for r in self.rows):
            return
        self.measure(ends[step], step, info)

    def measure(self, epoch: float, step: int, info: dict[str, Any]) -> None:
        from eval.runner import RunOptions, run_suites
        from graft.check import memorisation
        from training import checkpoints

        model = info["model"]
        t0 = time.perf_counter()
        model.eval()
        try:
            memo = memorisation(model, self.tokenizer, self.tries, self.held, beams=self.args.held_beams)
            shutil.rmtree(self.snap / "model", ignore_errors=True)
            checkpoints.save_final_model(self.snap / "model", model, self.tokenizer, {"epoch": epoch, "step": step})
        finally:
            model.train()
        options = RunOptions(systems=["graft"], index_dir=self.snap, part="test", limit=self.args.curve_queries,
                             force=True, beams=self.args.beams, results_dir=self.work / "curve-results",
                             name=f"{self.args.name}-e{epoch}")
        tables = run_suites(self.split, ["incorpus", "ooc"], options, command="graft_e2e curve")  # one loaded index
        recall = {t["suite"]: next(r["R@20"] for r in t["rows"] if r["system"] == "graft") for t in tables}
        row = {"epoch": epoch, "step": step, "loss": info["loss"], "train_s": round(info["elapsed"], 1),
               **{f"held_{k}": v for k, v in memo.to_dict().items()},
               "R@20 in corpus": recall["incorpus"], "R@20 out of corpus": recall["ooc"],
               "ceiling R@20 in corpus": self.ceiling.get("R@20"), "measure_s": round(time.perf_counter() - t0, 1)}
        self.rows.append(row)
        with self.path.open("a") as f:
            f.write(json.dumps(row) + "\n")
        self.on_row()
        log(f"epoch {epoch}: loss {loss_text(info['loss'])}, taught targets in beams {memo.target_in_beams:.3f}, "
            f"R@20 {recall['incorpus']:.3f} in corpus (ceiling {self.ceiling.get('R@20', float('nan')):.3f}), "
            f"{recall['ooc']:.3f} out of corpus ({row['measure_s']:.0f} s)")


def loss_text(loss: float | None) -> str:
    """A curve point's loss as printed: "n/a" for a point before the first logged loss."""
    return "n/a" if loss is None else f"{loss:.3f}"


def curve_points(epochs: float, every: float) -> list[float | int]:
    """The epochs after which the curve is measured: every `every` epochs, and the end of training
    (whole numbers as ints, so rows read back from curve.jsonl compare equal)."""
    if every <= 0:
        raise SystemExit(f"--measure-every must be > 0, got {every:g}")
    points = [round(k * every, 6) for k in range(1, int(epochs / every + 1e-9) + 1)]
    if not points or points[-1] < epochs:
        points.append(epochs)
    return [int(p) if float(p).is_integer() else p for p in points]


def whole(x: float) -> float | int:
    """`x` as an int when it is whole (a config's `epochs` 4, not 4.0: the training fingerprint)."""
    return int(x) if float(x).is_integer() else x


def render(args: Any, rows: list[dict[str, Any]], ceilings: dict[str, Any], final: dict[str, Any] | None,
           command: str) -> str:
    lines = [f"# GRAFT end to end on the CPU: {args.name}", "", f"Command: `{command}`  ",
             f"Date: {dt.date.today()} · base model {args.base_model}, {f'first {args.layers}' if args.layers else 'all'} decoder layers"
             f"{', frozen embeddings' if args.freeze_embeddings else ''} · lr {args.lr:g} · batch {args.batch_size} · "
             f"{args.epochs:g} epochs · trained on `{args.split}/incorpus/test/index`", "",
             *([] if final else [f"**In progress: {len(rows)} of {len(curve_points(args.epochs, args.measure_every))} "
                                 "curve points measured** (a rerun of the command resumes from the last checkpoint; "
                                 "the evaluation tables come at the end). Not a result yet.", ""]),
             "## Memorisation curve", "",
             f"Held training pairs: every pair of {args.held_papers} seeded source papers; {args.held_beams} beams. "
             f"Recall@20 of `graft` (graph-RRF, {args.beams} beams) on the first {args.curve_queries} in-corpus test "
             "and out-of-corpus queries.", "",
             "| epoch | step | loss | taught targets in beams | top beam taught | distinct top beams / prompt | "
             "R@20 in corpus | ceiling | of ceiling | R@20 out of corpus | train s (this call) |",
             "|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for r in rows:
        ceil = r.get("ceiling R@20 in corpus") or 0.0
        share = f"{r['R@20 in corpus'] / ceil:.2f}" if ceil else "n/a"
        lines.append(f"| {r['epoch']} | {r['step']} | {loss_text(r['loss'])} | {r['held_target_in_beams']:.3f} | "
                     f"{r['held_top_beam_taught']:.3f} | {r['held_distinct_top_beams']:.2f} | "
                     f"{r['R@20 in corpus']:.3f} | {ceil:.3f} | {share} | {r['R@20 out of corpus']:.3f} | "
                     f"{r['train_s']:.0f} |")
    lines += ["", "Memorisation ceilings of the coverage-aware pairs (graph-RRF), in corpus: "
              + ", ".join(f"{k} {v['R@20']:.3f} R@20" for k, v in ceilings.items()), ""]
    if final:
        lines += ["## Evaluation (test part; out of corpus; attribution)", ""]
        for suite, table in final.items():
            lines += [f"### {suite}", ""]
            keys = [k for k in ("setting", "R@20", "R@50", "non-obvious", "precision", "label precision")
                    if any(k in r for r in table["rows"])]
            lines += ["| system | " + " | ".join(keys) + " |", "|---|" + "---:|" * len(keys)]
            for r in table["rows"]:
                cells = [f"{r[k]:.3f}" if isinstance(r.get(k), float) else str(r.get(k, "")) for k in keys]
                lines.append(f"| {r['system']} | " + " | ".join(cells) + " |")
            teacher = next((r for r in table["rows"] if r["system"] == "teacher" and "R@20" in r), None)
            graft = next((r for r in table["rows"] if r["system"] == "graft" and "R@20" in r), None)
            if teacher and graft and isinstance(graft.get("R@20"), float) and teacher["R@20"]:
                lines.append(f"\ngraft / teacher R@20: **{graft['R@20'] / teacher['R@20']:.2f}x**")
            lines.append("")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    ap = parser(__doc__)
    ap.add_argument("--split", required=True, help="split directory (made from --corpus when absent)")
    ap.add_argument("--corpus", type=Path, default=None, help="corpus to cut the sub-corpus from (stage 0)")
    ap.add_argument("--min-papers", type=int, default=500, help="stage 0: the k-core's least size")
    ap.add_argument("--split-only", action="store_true", help="stop after stage 0 (the split and its indexes)")
    ap.add_argument("--work", required=True, help="scratch folder: curve, snapshot, naive index, report")
    ap.add_argument("--base-model", default="smollm2-135m")
    ap.add_argument("--layers", type=int, default=None, help="decoder layers kept (default: all)")
    ap.add_argument("--freeze-embeddings", action="store_true")
    ap.add_argument("--lr", type=float, default=1e-3)
    ap.add_argument("--batch-size", type=int, default=16)
    ap.add_argument("--epochs", type=float, default=8, help="epochs over the pairs (a fraction is allowed)")
    ap.add_argument("--measure-every", type=float, default=1.0, help="epochs between curve points")
    ap.add_argument("--save-every-steps", type=int, default=200)
    ap.add_argument("--held-papers", type=int, default=20)
    ap.add_argument("--held-beams", type=int, default=10)
    ap.add_argument("--curve-queries", type=int, default=15)
    ap.add_argument("--beams", type=int, default=20, help="beams per facet item in the evaluation")
    ap.add_argument("--naive", action="store_true", help="also train on naive pairs (the graft-naive row)")
    ap.add_argument("--systems", default=SYSTEMS)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--name", required=True)
    add_results_argument(ap)
    args = ap.parse_args(argv)
    args.epochs = whole(args.epochs)
    import polars as pl
    import torch

    from eval.runner import RunOptions, load_queries, run_suites
    from experiments.distill_ceiling import pairs_ceiling
    from experiments.train_recipe import slice_table
    from graft.manifest import has_model
    from graft.progress import Reporter
    from training.base_models import load_tokenizer
    from training.pairs import build_pairs, pairs_path
    from training.pipeline import train_index
    from training.trainer import TrainConfig

    torch.set_num_threads(args.threads)
    command = "python -m experiments.graft_e2e " + " ".join(argv if argv is not None else sys.argv[1:])
    split, work = Path(args.split), Path(args.work)
    work.mkdir(parents=True, exist_ok=True)
    if not (split / "split.json").is_file():
        if args.corpus is None:
            ap.error(f"{split} is not a split: make it with --corpus CORPUS (or `graft eval prepare` + build)")
        log(f"stage 0: the sub-corpus of {args.corpus}, its split and indexes")
        make_split(args.corpus, split, work, args.min_papers)
    if args.split_only:
        return 0
    index = split / "incorpus" / "test" / "index"
    tokenizer = load_tokenizer(args.base_model)
    if not pairs_path(index).is_file():
        build_pairs(index, tokenizer)
    queries = load_queries(split, "incorpus", "test", None)
    pairs = pl.read_parquet(pairs_path(index))
    ceilings = {what: pairs_ceiling(split, index, pairs, qs)["graph-rrf"]
                for what, qs in (("curve queries", queries[: args.curve_queries]), ("all test queries", queries))}
    config = TrainConfig(epochs=args.epochs, batch_size=args.batch_size, lr=args.lr, layers=args.layers,
                         freeze_embeddings=args.freeze_embeddings, save_every_steps=args.save_every_steps,
                         progress_every_s=60)
    report = work / f"e2e_{args.name}.md"
    curve = Curve(args, index, work, tokenizer, slice_table(index, tokenizer, args.held_papers, args.seed),
                  ceilings["curve queries"],
                  on_row=lambda: report.write_text(render(args, curve.rows, ceilings, None, command)))

    t0 = time.perf_counter()
    log(f"training on {index} (resumes from its last checkpoint)")
    summary = train_index(index, config, base_model=args.base_model, reporter=Reporter(quiet=False), on_step=curve)
    report.write_text(render(args, curve.rows, ceilings, None, command))
    log(f"trained: {summary.result.steps} steps, {time.perf_counter() - t0:.0f} s this call")
    naive_index = None
    if args.naive:
        naive_index = work / "naive-index"
        if not naive_index.is_dir():
            shutil.copytree(index, naive_index, ignore=shutil.ignore_patterns("model", "train", ".graft-lock*"))
        steps = summary.result.steps
        log(f"training on naive pairs in {naive_index}, {steps} steps")
        train_index(naive_index, TrainConfig(**{**config.to_dict(), "max_steps": steps}), base_model=args.base_model,
                    sampling="naive", reporter=Reporter(quiet=True))
    if not has_model(index):
        raise SystemExit(f"training ended without a model in {index / 'model'}; see the log above")
    systems = args.systems.split(",") + (["graft-naive"] if naive_index else [])
    options = RunOptions(systems=systems, index_dir=index, part="test", naive_index=naive_index, beams=args.beams,
                         results_dir=Path(args.results), name=args.name)
    log(f"evaluating {', '.join(systems)}")
    tables = run_suites(split, ["incorpus", "ooc", "attribution"], options, command=command)
    final = {t["suite"]: t for t in tables}
    text = render(args, curve.rows, ceilings, final, command)
    report.write_text(text)
    (Path(args.results) / f"e2e_{args.name}.md").write_text(text)
    log(f"done: {report}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
