"""Where the citation channel puts the facet fusion's own first results, and precision / recall at
the first ranks, from the TREC runs of `graft eval run --systems teacher,teacher-cite` (one split
folder per setting: its `runs/` holds the in-corpus dev runs).

For each split folder: per query, the `teacher` run's first 3 (the facet fusion alone) looked up in
the `teacher-cite` run (the same fusion with the citation channel); and P@k, R@k of both runs
against the part's qrels.

    python -m experiments.citation_keep --qrels SPLIT/incorpus/qrels.dev.txt BEFORE_DIR AFTER_DIR

Prints one block per folder (docs/results/citation_keep_cs768.md holds the cs768 numbers).
"""

from __future__ import annotations

import argparse
import sys
from collections import defaultdict
from pathlib import Path
from statistics import mean, median

KS = (1, 3, 5, 10, 20)


def read_run(path: Path) -> dict[str, list[str]]:
    """qid -> paper ids in rank order."""
    runs: dict[str, list[tuple[int, str]]] = defaultdict(list)
    for line in path.read_text().splitlines():
        qid, _, doc, rank, _, _ = line.split()
        runs[qid].append((int(rank), doc))
    return {q: [d for _, d in sorted(v)] for q, v in runs.items()}


def read_qrels(path: Path) -> dict[str, set[str]]:
    gold: dict[str, set[str]] = defaultdict(set)
    for line in path.read_text().splitlines():
        qid, _, doc, rel = line.split()
        if int(rel) > 0:
            gold[qid].add(doc)
    return gold


def placement(base: dict[str, list[str]], cited: dict[str, list[str]], first: int = 3) -> dict[str, float]:
    """Where the base run's first `first` results land in the run with the channel."""
    kept, rank_one, out20 = [], [], 0
    for qid, ranked in base.items():
        top, got = ranked[:first], cited.get(qid, [])
        kept.append(sum(d in got[:first] for d in top))
        rank_one.append(got.index(top[0]) + 1 if top and top[0] in got else len(got) + 1)
        out20 += sum(d not in got[:20] for d in top)
    return {"queries": len(base), "kept_mean": mean(kept), "all_kept": sum(k == first for k in kept),
            "first_below": sum(r > first for r in rank_one), "first_median_rank": median(rank_one),
            "first_worst_rank": max(rank_one), "pushed_out_of_20": out20}


def at_k(run: dict[str, list[str]], gold: dict[str, set[str]]) -> dict[str, float]:
    """Mean P@k and R@k over the qrels' queries."""
    out = {}
    for k in KS:
        hits = [len(set(run.get(q, [])[:k]) & g) for q, g in gold.items()]
        out[f"P@{k}"] = sum(h / k for h in hits) / len(gold)
        out[f"R@{k}"] = sum(h / len(g) for h, g in zip(hits, gold.values())) / len(gold)
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--qrels", type=Path, required=True, help="the part's qrels (SPLIT/incorpus/qrels.dev.txt)")
    ap.add_argument("splits", type=Path, nargs="+", help="split folders whose runs/ hold the dev runs")
    args = ap.parse_args(argv)
    gold = read_qrels(args.qrels)
    for split in args.splits:
        runs = {s: read_run(split / "runs" / f"incorpus-dev.{s}.trec") for s in ("teacher", "teacher-cite")}
        print(f"{split}: {placement(runs['teacher'], runs['teacher-cite'])}")
        for system, run in runs.items():
            print(f"  {system}: " + " ".join(f"{k} {v:.3f}" for k, v in at_k(run, gold).items()))
    return 0


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
