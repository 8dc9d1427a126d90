"""How far a few new papers reach into the citation scores of the others: what an incremental build
would have to recompute.

The corpus's newest `--added` papers (by year, then id) are taken out; the citation signals
(`graft.citations.citation_signals`, the build's default partners) of the rest and of the whole
corpus are compared on the papers both hold: the share of those papers whose score row changes at
all, and whose row loses score on some pair (per-pair rescaling divides by a row's largest count, so
one new citation to a paper rescales every pair of it).

    python -m experiments.citation_churn --corpus /tmp/scale/synth-1e4.jsonl.gz --added 100,1000

Prints a table (nothing is written).
"""

from __future__ import annotations

import sys

import numpy as np


def main(argv: list[str] | None = None) -> int:
    from experiments.common import int_list, parser
    from experiments.incremental_build import newest, read_records
    from graft.citations import CITATION_PARTNERS, citation_matrix, citation_signals

    ap = parser(__doc__)
    ap.add_argument("--corpus", required=True, help="a JSONL(.gz) corpus with references")
    ap.add_argument("--added", default="100", help="newest papers taken out and added back (comma-separated)")
    ap.add_argument("--partners", type=int, default=CITATION_PARTNERS, help="citation partners a paper")
    args = ap.parse_args(argv)
    records = read_records(args.corpus)
    row = {r["id"]: i for i, r in enumerate(records)}
    n = len(records)
    citing = np.array([i for i, r in enumerate(records) for x in r.get("references") or []], dtype=np.int64)
    cited = np.array([row[x] for r in records for x in r.get("references") or []], dtype=np.int64)
    whole = citation_signals(citation_matrix(citing, cited, n), partners=args.partners).score
    print(f"| papers | added | rows changed | rows with a lower score | (partners {args.partners or 'all'}) |")
    print("|---:|---:|---:|---:|---|")
    for added in int_list(ap, args.added, "--added"):
        new = np.zeros(n, dtype=bool)
        new[[row[i] for i in newest(records, added)]] = True
        keep = ~new[citing] & ~new[cited]
        base = citation_signals(citation_matrix(citing[keep], cited[keep], n), partners=args.partners).score
        old = np.flatnonzero(~new)
        diff = (whole - base)[old].tocoo()
        changed = np.unique(diff.row[diff.data != 0])
        lower = np.unique(diff.row[diff.data < 0])
        print(f"| {n:,} | {added:,} | {len(changed) / len(old):.3f} | {len(lower) / len(old):.3f} | |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
