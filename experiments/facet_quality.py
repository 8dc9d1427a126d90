"""Facet quality where gold exists: extracted items against ACLSum's highlighted sentences and summaries.

    python -m experiments.facet_quality [--splits val,test] [--limit N]

For ACLSum's papers (`graphbuild.corpus.load_aclsum`) every system's Problem / Method / Result items
are scored against the gold of challenge / approach / outcome (`eval.facet_gold`):

- sentence level: precision = chosen items that are gold-highlighted sentences / chosen items,
  recall = highlighted sentences chosen / highlighted sentences, F1 (micro over the split's papers);
- ROUGE-1 / ROUGE-2 / ROUGE-L F1 of the facet's items joined against the gold summary (mean over papers);
- shared: the share of papers in which one sentence is an item of two facets (all four facets).

Two scopes: `abstract` (the extractor reads title + abstract, as on cs768; gold = the abstract's
highlights) and `full` (it also reads the introduction and conclusion; gold = all highlights).
Systems: `lead` (the first abstract sentence for every facet), `position` (first abstract sentence =
Problem, second = Method, last = Result), `rules` (the hand-weighted scorer, the default before the
classifier), `learned` (the classifier, `graft.facet_classifier`, with the default settings) and the
learned variants of `VARIANTS`. Variants are chosen on **val**; test is reported, never tuned on.
Results: docs/results/facet_quality_aclsum.{md,json}.
"""

from __future__ import annotations

import argparse
import dataclasses
import datetime as dt
import json
import os
import shlex
import sys
import time
from pathlib import Path

import numpy as np
import polars as pl

from eval.facet_gold import GOLD_ASPECT, FacetCounts, GoldPaper, load_gold_papers, shared_sentence_rate
from experiments.common import load_embedding_cache, save_embedding_cache
from graft.encoder import Encoder
from graft.extract import (
    HeuristicConfig,
    HeuristicFacetExtractor,
    candidate_sentences,
    select_items,
    select_items_learned,
)
from graft.facets import FACETS, FacetItems
from graft.text import split_sentences
from graphbuild.corpus import load_aclsum

RESULTS_DIR = Path(__file__).resolve().parents[1] / "docs" / "results"
SCOPES = {"abstract": ("abstract",), "full": ("abstract", "introduction", "conclusion")}

#: Learned-scorer variants (name -> settings changed from the default `HeuristicConfig`).
VARIANTS: dict[str, dict] = {
    "learned p>=0.3": {"min_probability": 0.3},
    "learned p>=0.5": {"min_probability": 0.5},
    "learned p>=0.6": {"min_probability": 0.6},
    "learned 1 item": {"max_items": 1},
    "learned 2 items": {"max_items": 2},
    "learned body -0.2": {"body_penalty": 0.2},
}


def _baselines(row: dict) -> dict[str, FacetItems]:
    sents = split_sentences(row["abstract"] or "") or [row["title"]]
    lead = dict.fromkeys(FACETS, sents[:1])
    position = {"problem": sents[:1], "method": sents[1:2] or sents[:1], "result": sents[-1:],
                "contribution": sents[1:2] or sents[:1]}
    return {"lead": lead, "position": position}


def systems_for(papers: pl.DataFrame, encoder: Encoder) -> tuple[dict[str, list[FacetItems]], dict[str, float]]:
    """system -> items per paper (row order) for one scope's input, and extraction seconds per system."""
    out: dict[str, list[FacetItems]] = {"lead": [], "position": []}
    for row in papers.iter_rows(named=True):
        for name, items in _baselines(row).items():
            out[name].append(items)
    seconds = {}
    t0 = time.perf_counter()
    rules_cfg = HeuristicConfig(scorer="rules")
    rules = HeuristicFacetExtractor(encoder, rules_cfg).prepare(papers)
    out["rules"] = [select_items(p, rules_cfg) for p in rules]
    seconds["rules"] = time.perf_counter() - t0
    t0 = time.perf_counter()
    learned_cfg = HeuristicConfig()
    learned = HeuristicFacetExtractor(encoder, learned_cfg).prepare(papers)
    out["learned"] = [select_items_learned(p, learned_cfg) for p in learned]
    seconds["learned"] = time.perf_counter() - t0
    for name, change in VARIANTS.items():
        cfg = dataclasses.replace(learned_cfg, **change)
        out[name] = [select_items_learned(p, cfg) for p in learned]
    return out, seconds


def timing(papers: pl.DataFrame, repeats: int = 2) -> dict[str, float]:
    """Seconds per extraction of `papers`, rules vs learned, alternating, each run on a fresh encoder
    (no vectors of an earlier run; warmed up on other texts so the ONNX export is not timed): the best of
    `repeats` runs per scorer."""
    best: dict[str, float] = {}
    warm = [f"Warm-up sentence number {i} about graphs and parsing." for i in range(300)]
    for _ in range(repeats):
        for scorer in ("rules", "learned"):
            encoder = Encoder()
            encoder.encode(warm)
            extractor = HeuristicFacetExtractor(encoder, HeuristicConfig(scorer=scorer))
            t0 = time.perf_counter()
            extractor.extract(papers)
            best[scorer] = min(best.get(scorer, float("inf")), time.perf_counter() - t0)
    return best


def score(items: list[FacetItems], gold: list[GoldPaper], sections: tuple[str, ...]) -> dict:
    """facet -> metrics, the mean over Problem / Method / Result, and the shared-sentence rate."""
    res: dict = {}
    for facet, aspect in GOLD_ASPECT.items():
        counts = FacetCounts()
        for it, paper in zip(items, gold):
            counts.add(it[facet], paper, aspect, sections)
        res[facet] = counts.metrics()
    res["mean"] = {k: float(np.mean([res[f][k] for f in GOLD_ASPECT])) for k in res["problem"]}
    res["shared"] = shared_sentence_rate(items, gold)
    return res


def markdown(report: dict) -> str:
    lines = ["# Facet quality on ACLSum", "",
             f"- command: `{report['command']}`",
             f"- date: {report['date']}; encoder {report['encoder']}; classifier "
             f"`graft/facet_classifier.json` ({report['classifier']['trained_on']}; C chosen on val)",
             "- sentence-level precision / recall / F1 of the chosen items against the gold highlighted "
             "sentences (micro over papers; an item counts as the gold sentence holding >= 70% of its words); "
             "ROUGE-1/2/L F1 of the facet's items joined against the gold summary (mean over papers, "
             "no stemming); shared: papers in which one sentence is an item of two facets (all four facets)",
             "- `abstract` scope: the extractor reads title + abstract (as on cs768), gold = the abstract's "
             "highlights; `full`: it also reads introduction + conclusion, gold = all highlights",
             "- variants are chosen on **val**; **test** is held out", ""]
    for split, block in report["splits"].items():
        for scope, systems in block["scopes"].items():
            lines += [f"## {split}, {scope} scope ({block['papers']} papers)", "",
                      "| system | facet | P | R | F1 | ROUGE-1 | ROUGE-2 | ROUGE-L | items | shared |",
                      "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|"]
            for system, res in systems.items():
                for facet in [*GOLD_ASPECT, "mean"]:
                    m = res[facet]
                    shared = f"{res['shared']:.2f}" if facet == "mean" else ""
                    name = f"**{system}**" if facet == "mean" else system
                    lines.append(f"| {name} | {facet} | {m['precision']:.3f} | {m['recall']:.3f} | "
                                 f"{m['f1']:.3f} | {m['rouge1']:.3f} | {m['rouge2']:.3f} | {m['rougeL']:.3f} | "
                                 f"{m['items_per_paper']:.2f} | {shared} |")
            lines.append("")
    if "timing" in report:
        sec = report["timing"]["seconds"]
        lines += [f"Extraction time, {report['timing']['papers']} abstracts, fresh encoder each, best of 2 "
                  f"alternating runs: rules {sec['rules']:.1f} s, learned {sec['learned']:.1f} s "
                  f"({sec['learned'] / sec['rules']:.2f}x).", ""]
    return "\n".join(lines)


def run(splits: list[str], *, command: str, limit: int | None = None, cache: Path | None = None,
        scopes: tuple[str, ...] = tuple(SCOPES), timed: bool = False) -> dict:
    from graft.facet_classifier import packaged

    load = os.getloadavg()[0]
    encoder = Encoder()
    cached = load_embedding_cache(encoder, cache)
    if cached:
        print(f"{cached} sentence vectors from {cache}", file=sys.stderr)
    corpus = load_aclsum().papers
    golds = {s: load_gold_papers(s)[:limit] for s in splits}
    wanted = [g.paper_id for s in splits for g in golds[s]]
    papers = corpus.filter(pl.col("paper_id").is_in(wanted))
    inputs = {"abstract": papers.with_columns(pl.lit(None, dtype=pl.Utf8).alias("full_text")), "full": papers}
    inputs = {k: v for k, v in inputs.items() if k in scopes}
    report: dict = {"benchmark": "facet_quality_aclsum", "command": command, "date": dt.date.today().isoformat(),
                    "encoder": encoder.name, "classifier": packaged().meta,
                    "config": dataclasses.asdict(HeuristicConfig()), "variants": VARIANTS,
                    "load_average_1min": round(load, 2), "seconds": {}, "splits": {}}
    by_scope = {}
    for scope, frame in inputs.items():
        print(f"{scope}: extracting {frame.height} papers ...", file=sys.stderr, flush=True)
        systems, seconds = systems_for(frame, encoder)
        report["seconds"][scope] = seconds
        index = {pid: k for k, pid in enumerate(frame["paper_id"])}
        by_scope[scope] = (systems, index)
    if timed:
        print("timing ...", file=sys.stderr, flush=True)
        report["timing"] = {"papers": inputs["abstract"].height, "seconds": timing(inputs["abstract"])}
    save_embedding_cache(encoder, cache, [t for row in papers.iter_rows(named=True) for t in candidate_sentences(row)])
    for split in splits:
        gold = golds[split]
        block = {"papers": len(gold), "scopes": {}}
        for scope, (systems, index) in by_scope.items():
            rows = [index[g.paper_id] for g in gold]
            block["scopes"][scope] = {name: score([items[r] for r in rows], gold, SCOPES[scope])
                                      for name, items in systems.items()}
        report["splits"][split] = block
    return report


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--splits", default="val,test", help="comma-separated ACLSum splits (default: val,test)")
    parser.add_argument("--scopes", default="abstract,full", help="abstract, full or both (default)")
    parser.add_argument("--timing", action="store_true",
                        help="also time rules vs learned extraction of the abstracts on fresh encoders")
    parser.add_argument("--limit", type=int, help="first N papers of each split (smoke runs)")
    parser.add_argument("--results-dir", type=Path, default=RESULTS_DIR)
    parser.add_argument("--embedding-cache", type=Path, metavar="NPZ",
                        help="sentence vectors kept between runs (read if present, written after)")
    args = parser.parse_args(argv)
    argv = sys.argv[1:] if argv is None else argv
    command = " ".join(["python -m experiments.facet_quality", shlex.join(argv)]).strip()
    report = run(args.splits.split(","), command=command, limit=args.limit, cache=args.embedding_cache,
                 scopes=tuple(args.scopes.split(",")), timed=args.timing)
    md = markdown(report)
    args.results_dir.mkdir(parents=True, exist_ok=True)
    (args.results_dir / "facet_quality_aclsum.md").write_text(md, encoding="utf-8")
    (args.results_dir / "facet_quality_aclsum.json").write_text(json.dumps(report, indent=2) + "\n", encoding="utf-8")
    print(md)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
