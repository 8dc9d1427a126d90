"""Train the facet sentence classifier (`graft/facet_classifier.json`) on ACLSum's gold highlights.

    python -m experiments.train_facet_classifier [--out PATH] [--dry-run]

Every candidate sentence the offline extractor reads from an ACLSum paper (abstract, introduction,
conclusion: `graft.extract.candidate_sentences`) is labelled 1 for challenge / approach / outcome when
it is one of the sentences ACLSum's annotators highlighted for that aspect (`eval.facet_gold`). One
L2-regularised logistic regression per aspect (scikit-learn, lbfgs) is fitted on the **train** split
over `graft.facet_classifier.features`; its regularisation C is the one of `C_GRID` with the best
average precision on the **val** split. The test split is never read. The shipped weights are those
fitted on train with the chosen C, written as plain JSON; the script prints per-aspect val figures.
"""

from __future__ import annotations

import argparse
import datetime as dt
import importlib.metadata
import sys
from pathlib import Path

import numpy as np

from eval.facet_gold import GOLD_ASPECT, candidate_labels, load_gold_papers
from graft.encoder import Encoder
from graft.extract import HeuristicConfig, _prepare
from graft.facet_classifier import LABELS, WEIGHTS, FacetClassifier, features
from graphbuild.corpus import load_aclsum

C_GRID = (0.03, 0.1, 0.3, 1.0, 3.0, 10.0)


def dataset(split: str, encoder: Encoder, rows: dict[str, dict]) -> tuple[np.ndarray, np.ndarray]:
    """Feature rows and (n, 3) labels of every candidate sentence of one ACLSum split (one encoder call)."""
    cfg = HeuristicConfig(scorer="rules")
    papers = [(gold, _prepare(rows[gold.paper_id], cfg)) for gold in load_gold_papers(split)]
    papers = [(g, c) for g, c in papers if c.texts]
    texts = [t for _, c in papers for t in c.texts]
    done = [0]

    def tick(k: int) -> None:
        done[0] += k
        if done[0] % 2048 < k:
            print(f"  {split}: {done[0]} of {len(texts)} sentences embedded", file=sys.stderr, flush=True)

    emb = encoder.encode(texts, progress=tick)
    xs, ys, start = [], [], 0
    for gold, cand in papers:
        k = len(cand.texts)
        xs.append(features(emb[start : start + k], cand.sources, cand.cue))
        ys.append(candidate_labels(cand.texts, cand.sources, gold))
        start += k
    return np.vstack(xs), np.vstack(ys)


def main(argv: list[str] | None = None) -> int:
    from sklearn.linear_model import LogisticRegression
    from sklearn.metrics import average_precision_score

    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, default=WEIGHTS, help=f"weights file (default: {WEIGHTS})")
    parser.add_argument("--dry-run", action="store_true", help="fit and report, write nothing")
    args = parser.parse_args(argv)

    encoder = Encoder()
    rows = {r["paper_id"]: r for r in load_aclsum().papers.iter_rows(named=True)}
    x_tr, y_tr = dataset("train", encoder, rows)
    x_va, y_va = dataset("val", encoder, rows)
    print(f"train: {len(x_tr)} sentences, positives {y_tr.sum(axis=0).astype(int).tolist()}; "
          f"val: {len(x_va)}, positives {y_va.sum(axis=0).astype(int).tolist()}", file=sys.stderr)
    coef, intercept, chosen = [], [], {}
    print("| aspect | C | val average precision |\n|---|---:|---:|")
    for j, (facet, aspect) in enumerate(GOLD_ASPECT.items()):
        assert LABELS[j] == facet
        scores = {}
        for c in C_GRID:
            model = LogisticRegression(C=c, max_iter=2000).fit(x_tr, y_tr[:, j])
            scores[c] = average_precision_score(y_va[:, j], model.predict_proba(x_va)[:, 1])
            print(f"| {aspect} | {c:g} | {scores[c]:.3f} |")
        best = max(C_GRID, key=lambda c: (scores[c], -c))
        model = LogisticRegression(C=best, max_iter=2000).fit(x_tr, y_tr[:, j])
        coef.append(model.coef_[0])
        intercept.append(model.intercept_[0])
        chosen[facet] = {"C": best, "val_average_precision": round(scores[best], 4)}
    meta = {"trained_on": "ACLSum train split (aclsum " + importlib.metadata.version("aclsum") + ")",
            "selected_on": "ACLSum val split, average precision", "chosen": chosen,
            "train_sentences": len(x_tr), "date": dt.date.today().isoformat(),
            "script": "python -m experiments.train_facet_classifier"}
    clf = FacetClassifier(np.asarray(coef), np.asarray(intercept), encoder.name, encoder.dim, meta)
    print(f"chosen: {chosen}", file=sys.stderr)
    if not args.dry_run:
        clf.save(args.out)
        print(f"wrote {args.out}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
