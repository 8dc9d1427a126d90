"""The generative retriever end to end on the CPU, on a slice of a split's in-corpus queries: a
pipeline check with a real base model, not the evaluation protocol (which trains on every pair, on a
GPU: experiments/gpu/gpu_eval.py).

1. copy SPLIT/index to WORK/index; make its DocIDs and the coverage-aware pairs of the whole graph
   (as `graft train` does), then keep only the pairs whose source is one of the first Q in-corpus
   queries by qid, so that a CPU can learn them in minutes;
2. train the base model on those pairs into WORK/index/model (`training.pipeline.train_index`);
3. run `graft`, `graft-rrf` and `teacher` on those Q queries (`eval.runner.run_suites`, runs kept in
   a copy of the split under WORK, tables in --results labelled *pipeline check*);
4. beside them, the memorisation ceiling of the same pairs on the same queries
   (`experiments.distill_ceiling`): how much of its pairs' reach the model recovered.

    python -m experiments.slice_check --split SPLITDIR [--queries 20] [--base-model smollm2-135m] \\
        [--epochs 5] [--lr 3e-4] [--work /tmp/graft-slice-check] [--name cs768_slice20]

Writes docs/results/slice_check_{name}.{md,json} and eval_incorpus-firstN_{name}.{md,json}. SmolLM2-135M on
two CPU cores trains ~120-140 tokens/s: 20 queries' 866 pairs x 5 epochs take ~30 min, decoding ~13 s a query.
"""

from __future__ import annotations

import datetime as dt
import json
import shutil
import sys
from pathlib import Path
from typing import Any

from experiments.common import add_results_argument, copy_split_queries, parser


def slice_pairs(index_dir: Path, tokenizer: Any, sources: set[str]) -> tuple[Any, dict[str, Any]]:
    """Make the coverage-aware pairs of the whole graph and keep (and record) those from `sources`.

    Returns:
        (the kept pairs, the distillation settings as recorded in the manifest).
    """
    import polars as pl

    from graft.config import config_to_dict
    from graft.docids import load_or_build_docids
    from graft.index import Index
    from training.pairs import DistillConfig, coverage_report, make_pairs, write_pairs

    config = DistillConfig()
    index = Index.open(index_dir)
    docids = load_or_build_docids(index_dir, tokenizer, max_tokens=config.max_tokens)
    pairs = make_pairs(index, docids, config)  # only the kept ones are written
    kept = pairs.filter(pl.col("source_paper").is_in(sorted(sources)))
    report = coverage_report(kept, docids, index.n)
    write_pairs(index_dir, kept, config, {**report, "sliced_from": pairs.height, "sources": len(sources)})
    return kept, config_to_dict(config)


def main(argv: list[str] | None = None) -> int:
    ap = parser(__doc__)
    ap.add_argument("--split", required=True, help="split directory with a built index (graft eval prepare + build)")
    ap.add_argument("--index", default=None, help="index directory (default SPLITDIR/index); only read")
    ap.add_argument("--queries", type=int, default=20, help="the first Q in-corpus test queries by qid")
    ap.add_argument("--base-model", default="smollm2-135m")
    ap.add_argument("--epochs", type=float, default=5.0)
    ap.add_argument("--max-steps", type=int, default=None, help="optimizer steps (overrides --epochs)")
    ap.add_argument("--batch-size", type=int, default=16)
    ap.add_argument("--lr", type=float, default=3e-4)
    ap.add_argument("--beams", type=int, default=20)
    ap.add_argument("--work", default="/tmp/graft-slice-check", help="scratch folder (index copy, model, runs)")
    ap.add_argument("--name", default=None, help="table names (default: {corpus}_slice{Q})")
    add_results_argument(ap)
    ap.add_argument("--quiet", action="store_true")
    args = ap.parse_args(argv)

    from eval.runner import RunOptions, corpus_name, load_queries, run_suites
    from eval.splits import read_split
    from experiments.distill_ceiling import pairs_ceiling
    from graft.check import PromptCheck
    from graft.progress import Reporter
    from training.base_models import load_tokenizer
    from training.pipeline import train_index
    from training.trainer import TrainConfig

    split_dir = Path(args.split)
    meta = read_split(split_dir)
    source_index = Path(args.index) if args.index else split_dir / "index"
    work = Path(args.work)
    shutil.rmtree(work, ignore_errors=True)
    index_dir, split_copy = work / "index", work / "split"
    shutil.copytree(source_index, index_dir, ignore=shutil.ignore_patterns("docids", "train", "model", "cache"))
    copy_split_queries(split_dir, split_copy)
    queries = load_queries(split_dir, "incorpus", "test", args.queries)
    sources = {q.paper_id for q in queries}
    reporter = Reporter(quiet=args.quiet)

    tokenizer = load_tokenizer(args.base_model)
    pairs, distill = slice_pairs(index_dir, tokenizer, sources)
    print(f"pairs: {pairs.height:,} from the {len(sources)} query papers", file=sys.stderr, flush=True)
    config = TrainConfig(epochs=args.epochs, max_steps=args.max_steps, batch_size=args.batch_size, lr=args.lr,
                         save_every_steps=0)
    summary = train_index(index_dir, config, base_model=args.base_model, reporter=reporter)
    from dataclasses import asdict

    result = asdict(summary.result) if summary.result is not None else {}
    name = args.name or f"{corpus_name(meta)}_slice{len(queries)}"
    epochs = (result.get("steps", 0) * args.batch_size) / max(1, pairs.height)
    label = (f"pipeline check on a slice, not the protocol: {args.base_model} trained on the CPU on the "
             f"coverage-aware pairs of these {len(queries)} queries only ({pairs.height:,} pairs, "
             f"{result.get('steps', 0)} steps of {args.batch_size}, {epochs:.1f} epochs, lr {args.lr:g}, "
             f"final loss {result.get('final_loss') or float('nan'):.3f})")
    command = "python -m experiments.slice_check " + " ".join(argv if argv is not None else sys.argv[1:])
    options = RunOptions(systems=["graft", "graft-rrf", "teacher"], index_dir=index_dir, part="test",
                         limit=args.queries, beams=args.beams, results_dir=Path(args.results), name=name,
                         label=label)
    table = run_suites(split_copy, ["incorpus"], options, reporter=reporter, command=command)[0]

    ceiling = pairs_ceiling(split_dir, index_dir, pairs, queries, ("graph-rrf", "rrf"))  # same pairs, same queries
    rows = {r["system"]: r for r in table["rows"]}
    teacher = rows["teacher"]["R@20"]
    out_rows = []
    for system, fusion in (("graft", "graph-rrf"), ("graft-rrf", "rrf")):
        r20 = rows[system]["R@20"]
        ceil = ceiling[fusion]["R@20"]
        out_rows.append({"system": system, "R@20": r20, "R@50": rows[system]["R@50"],
                         "ceiling R@20": ceil, "ceiling R@50": ceiling[fusion]["R@50"],
                         "of ceiling": r20 / ceil if ceil else None, "of teacher": r20 / teacher if teacher else None})
    out_rows.append({"system": "teacher", "R@20": teacher, "R@50": rows["teacher"]["R@50"], "ceiling R@20": None,
                     "ceiling R@50": None, "of ceiling": None, "of teacher": 1.0})
    record = {"meta": {"command": command, "date": dt.date.today().isoformat(), "label": label,
                       "corpus_hash": meta.get("corpus_hash"), "queries": len(queries), "pairs": pairs.height,
                       "distill": distill, "train": result, "base_model": args.base_model,
                       "check": summary.check},
              "rows": out_rows}
    results = Path(args.results)
    (results / f"slice_check_{name}.json").write_text(json.dumps(record, indent=2, default=str) + "\n")

    def cell(v: Any) -> str:
        return "" if v is None else f"{v:.3f}"

    lines = [f"# Generative retriever on a slice — {name}", "", f"**{label}**", "",
             f"Command: `{command}`  ",
             f"Date: {record['meta']['date']} · corpus hash `{str(meta.get('corpus_hash'))[:16]}` · "
             f"{len(queries)} in-corpus test queries (the first by qid)", "",
             "| system | R@20 | R@50 | ceiling R@20 | ceiling R@50 | R@20 / ceiling | R@20 / teacher |",
             "|---|---:|---:|---:|---:|---:|---:|"]
    for r in out_rows:
        lines.append(f"| {r['system']} | {cell(r['R@20'])} | {cell(r['R@50'])} | {cell(r['ceiling R@20'])} | "
                     f"{cell(r['ceiling R@50'])} | {cell(r['of ceiling'])} | {cell(r['of teacher'])} |")
    lines += ["", "- ceiling: a model that decoded exactly the DocIDs its pairs taught it, fused the same way "
              "(experiments/distill_ceiling.py)", f"- runs and the full table: {table['files'][0]}"]
    check = PromptCheck.from_dict(summary.check)
    if check is not None:
        lines.append(f"- prompt check (`graft train`'s, graft/check.py): {check.summary()}; {check.verdict()}")
    (results / f"slice_check_{name}.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    sys.exit(main())
