"""Whether one system's R@k differs from another's beyond chance: a paired bootstrap over queries.

    python -m experiments.paired_bootstrap --split SPLITDIR --suite incorpus --systems facet,dense [--part dev]

Reads two runs that `graft eval run` wrote for the same queries (SPLITDIR/runs) and the suite's
qrels, and prints the mean R@k of each, their difference, a 95% interval of the difference from
resampling the queries with replacement (10,000 draws, seeded), and on how many queries each is
ahead. An interval that holds 0 says the two are not told apart on these queries.
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np

from eval.metrics import recall_at
from eval.runner import run_paths
from eval.trec import read_qrels, read_run
from experiments.common import parser


def paired_bootstrap(a: np.ndarray, b: np.ndarray, draws: int = 10_000, seed: int = 0) -> dict[str, float]:
    """Mean of a - b (per-query values, paired) and its 2.5% / 97.5% bootstrap quantiles."""
    if a.shape != b.shape or not len(a):
        raise ValueError("two non-empty arrays of the same queries are needed")
    d = a - b
    rng = np.random.default_rng(seed)
    means = d[rng.integers(0, len(d), size=(draws, len(d)))].mean(axis=1)
    return {"a": float(a.mean()), "b": float(b.mean()), "difference": float(d.mean()),
            "low": float(np.quantile(means, 0.025)), "high": float(np.quantile(means, 0.975)),
            "a_ahead": int((d > 0).sum()), "b_ahead": int((d < 0).sum()), "queries": len(d)}


def per_query_recall(split: Path, suite: str, system: str, part: str, k: int) -> dict[str, float]:
    """R@k of each query of a system's run (queries with gold only)."""
    qrels = read_qrels(split / suite / "qrels.txt")
    run = read_run(run_paths(split, suite, system, part)[0])
    return {q: recall_at([doc for doc, _ in hits], qrels[q], k) for q, hits in run.items() if qrels.get(q)}


def main(argv: list[str] | None = None) -> int:
    ap = parser(__doc__)
    ap.add_argument("--split", type=Path, required=True, help="a split of `graft eval prepare`, with runs")
    ap.add_argument("--suite", choices=("incorpus", "ooc"), default="incorpus")
    ap.add_argument("--part", choices=("dev", "test"), default="test", help="in-corpus part (default test)")
    ap.add_argument("--systems", required=True, help="A,B: the difference is A - B")
    ap.add_argument("--k", type=int, default=20)
    args = ap.parse_args(argv)
    names = args.systems.split(",")
    if len(names) != 2:
        ap.error("--systems takes two names, A,B")
    a, b = (per_query_recall(args.split, args.suite, s, args.part, args.k) for s in names)
    qids = sorted(set(a) & set(b))
    if not qids:
        print("the two runs share no query with gold", file=sys.stderr)
        return 1
    r = paired_bootstrap(np.array([a[q] for q in qids]), np.array([b[q] for q in qids]))
    print(f"{args.suite}{'-' + args.part if args.suite == 'incorpus' else ''}: R@{args.k} {names[0]} {r['a']:.3f} - "
          f"{names[1]} {r['b']:.3f} = {r['difference']:+.3f}, 95% interval [{r['low']:+.3f}, {r['high']:+.3f}] "
          f"over {r['queries']} queries; {names[0]} ahead on {r['a_ahead']}, {names[1]} on {r['b_ahead']}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
