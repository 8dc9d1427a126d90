"""Train the facet sentence classifier (`graft/facet_classifier.json`) on ACLSum's gold highlights.

    python -m experiments.train_facet_classifier [--out PATH] [--dry-run]
    python -m experiments.train_facet_classifier --self-train CORPUS [--threshold 0.8] [--pseudo-weight 0.5]

Every candidate sentence the offline extractor reads from an ACLSum paper (abstract, introduction,
conclusion: `graft.extract.candidate_sentences`) is labelled 1 for challenge / approach / outcome when
it is one of the sentences ACLSum's annotators highlighted for that aspect (`eval.facet_gold`). One
L2-regularised logistic regression per aspect (scikit-learn, lbfgs) is fitted on the **train** split
over `graft.facet_classifier.features`; its regularisation C is the one of `C_GRID` with the best
average precision on the **val** split. The test split is never read. The shipped weights are those
fitted on train with the chosen C, written as plain JSON; the script prints per-aspect val figures.

With `--self-train CORPUS` (a corpus file `graft build` reads; its abstracts only) the classifier is
fitted once more on train plus the corpus's own sentences labelled by the first fit (self-training):
for each aspect a corpus sentence is a positive where the first fit gives it probability >= T
(`--threshold`) and a negative where <= 1 - T, the sentences in between are left out, and each pseudo
label weighs `--pseudo-weight` of a gold one. C is chosen again on val; the script prints both fits'
val average precision and writes the second.
"""

from __future__ import annotations

import argparse
import datetime as dt
import importlib.metadata
import sys
from pathlib import Path
from typing import Any

import numpy as np

from eval.facet_gold import GOLD_ASPECT, candidate_labels, load_gold_papers
from graft.encoder import Encoder
from graft.extract import HeuristicConfig, _prepare
from graft.facet_classifier import LABELS, WEIGHTS, FacetClassifier, features
from graphbuild.corpus import load_aclsum

C_GRID = (0.03, 0.1, 0.3, 1.0, 3.0, 10.0)


def feature_rows(papers: list, encoder: Encoder, name: str) -> np.ndarray:
    """The classifier's feature rows of every candidate sentence of `papers` (`_prepare`'s, in order;
    one encoder call, its progress printed under `name`)."""
    texts = [t for c in papers for t in c.texts]
    done = [0]

    def tick(k: int) -> None:
        done[0] += k
        if done[0] % 2048 < k:
            print(f"  {name}: {done[0]} of {len(texts)} sentences embedded", file=sys.stderr, flush=True)

    emb = encoder.encode(texts, progress=tick)
    xs, start = [], 0
    for cand in papers:
        k = len(cand.texts)
        xs.append(features(emb[start : start + k], cand.sources, cand.cue))
        start += k
    return np.vstack(xs)


def dataset(split: str, encoder: Encoder, rows: dict[str, dict]) -> tuple[np.ndarray, np.ndarray]:
    """Feature rows and (n, 3) labels of every candidate sentence of one ACLSum split (one encoder call)."""
    cfg = HeuristicConfig(scorer="rules")
    papers = [(gold, _prepare(rows[gold.paper_id], cfg)) for gold in load_gold_papers(split)]
    papers = [(g, c) for g, c in papers if c.texts]
    ys = [candidate_labels(c.texts, c.sources, g) for g, c in papers]
    return feature_rows([c for _, c in papers], encoder, split), np.vstack(ys)


def corpus_dataset(path: Path, encoder: Encoder, limit: int | None) -> np.ndarray:
    """Feature rows of every abstract sentence of a corpus file's papers (the first `limit`)."""
    from graphbuild.corpus import load_corpus

    cfg = HeuristicConfig(scorer="rules")
    rows = load_corpus(path, limit=limit).papers.select("paper_id", "title", "abstract").iter_rows(named=True)
    papers = [c for c in (_prepare(r, cfg) for r in rows) if c.texts]
    x = feature_rows(papers, encoder, path.name)
    print(f"self-training corpus: {len(papers)} papers, {len(x)} sentences", file=sys.stderr)
    return x


def pseudo_labels(probs: np.ndarray, threshold: float) -> tuple[np.ndarray, np.ndarray]:
    """(labels, kept) of corpus sentences for one aspect from the first fit's probabilities: 1 at
    >= threshold, 0 at <= 1 - threshold, the rest not kept."""
    pos, neg = probs >= threshold, 1.0 - probs >= threshold
    return pos.astype(np.float64), pos | neg


def fit_aspect(x_tr: np.ndarray, y_tr: np.ndarray, x_va: np.ndarray, y_va: np.ndarray,
               weight: np.ndarray | None = None) -> tuple[float, dict[float, float], Any]:
    """The C of `C_GRID` with the best val average precision, every C's, and the model fitted at it."""
    from sklearn.linear_model import LogisticRegression
    from sklearn.metrics import average_precision_score

    scores, models = {}, {}
    for c in C_GRID:
        models[c] = LogisticRegression(C=c, max_iter=2000).fit(x_tr, y_tr, sample_weight=weight)
        scores[c] = average_precision_score(y_va, models[c].predict_proba(x_va)[:, 1])
    best = max(C_GRID, key=lambda c: (scores[c], -c))
    return best, scores, models[best]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, default=WEIGHTS, help=f"weights file (default: {WEIGHTS})")
    parser.add_argument("--dry-run", action="store_true", help="fit and report, write nothing")
    parser.add_argument("--self-train", type=Path, metavar="CORPUS",
                        help="fit again with the first fit's confident labels of this corpus's abstract sentences")
    parser.add_argument("--threshold", type=float, default=0.8, help="pseudo-label confidence T (default 0.8)")
    parser.add_argument("--pseudo-weight", type=float, default=0.5, help="weight of a pseudo label (default 0.5)")
    parser.add_argument("--corpus-limit", type=int, help="the corpus's first N papers only")
    args = parser.parse_args(argv)
    if not 0.5 < args.threshold < 1.0 or args.pseudo_weight <= 0:
        parser.error("--threshold must lie in (0.5, 1) and --pseudo-weight be > 0")

    encoder = Encoder()
    rows = {r["paper_id"]: r for r in load_aclsum().papers.iter_rows(named=True)}
    x_tr, y_tr = dataset("train", encoder, rows)
    x_va, y_va = dataset("val", encoder, rows)
    print(f"train: {len(x_tr)} sentences, positives {y_tr.sum(axis=0).astype(int).tolist()}; "
          f"val: {len(x_va)}, positives {y_va.sum(axis=0).astype(int).tolist()}", file=sys.stderr)
    x_co = corpus_dataset(args.self_train, encoder, args.corpus_limit) if args.self_train else None
    coef, intercept, chosen = [], [], {}
    print("| aspect | C | val average precision |" + (" self-trained | pseudo + / − |" if x_co is not None else "")
          + "\n|---|---:|---:|" + ("---:|---:|" if x_co is not None else ""))
    for j, (facet, aspect) in enumerate(GOLD_ASPECT.items()):
        assert LABELS[j] == facet
        best, scores, model = fit_aspect(x_tr, y_tr[:, j], x_va, y_va[:, j])
        row = {"C": best, "val_average_precision": round(scores[best], 4)}
        if x_co is not None:
            y_co, kept = pseudo_labels(model.predict_proba(x_co)[:, 1], args.threshold)
            x_all = np.vstack([x_tr, x_co[kept]])
            y_all = np.concatenate([y_tr[:, j], y_co[kept]])
            weight = np.concatenate([np.ones(len(x_tr)), np.full(int(kept.sum()), args.pseudo_weight)])
            best2, scores2, model = fit_aspect(x_all, y_all, x_va, y_va[:, j], weight)
            for c in C_GRID:
                print(f"| {aspect} | {c:g} | {scores[c]:.3f} | {scores2[c]:.3f} | "
                      f"{int(y_co[kept].sum())} / {int(kept.sum() - y_co[kept].sum())} |")
            row = {"C": best2, "val_average_precision": round(scores2[best2], 4),
                   "first_fit": {"C": best, "val_average_precision": round(scores[best], 4)},
                   "pseudo_positive": int(y_co[kept].sum()), "pseudo_negative": int(kept.sum() - y_co[kept].sum())}
        else:
            for c in C_GRID:
                print(f"| {aspect} | {c:g} | {scores[c]:.3f} |")
        coef.append(model.coef_[0])
        intercept.append(model.intercept_[0])
        chosen[facet] = row
    trained_on = "ACLSum train split (aclsum " + importlib.metadata.version("aclsum") + ")"
    if args.self_train:
        trained_on += (f" and self-training on {args.self_train.name}'s abstract sentences (threshold "
                       f"{args.threshold:g}, pseudo-label weight {args.pseudo_weight:g})")
    meta = {"trained_on": trained_on,
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
