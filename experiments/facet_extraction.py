"""Facet extraction against ACLSum's gold summaries (challenge / approach / outcome).

    python -m experiments.facet_extraction [--split test|val|train|all] [--json OUT]

Runs the heuristic extractor over the ACLSum corpus (`graphbuild.corpus.load_aclsum`), once with
full text and once from title + abstract only, and scores the Problem / Method / Result items of the
papers with gold summaries against challenge / approach / outcome. In the same run:

- `lead`: the first abstract sentence for every facet; `abstract`: the whole abstract for every facet
  (if the heuristic's facets were not facet-specific, they would score like these);
- `oracle`: per facet, the candidate sentence with the highest ROUGE-L against the gold summary (an
  upper bound for one extracted sentence, not a system).

Metrics, averaged over papers: ROUGE-L F1 of the facet's items joined and of its best single item
(`eval.textmetrics`), the cosine between the items joined and the gold summary (MiniLM), and
specificity: the share of papers whose facet items are closer (cosine) to the facet's own gold summary
than to both other gold summaries. Results go to docs/results/facet_extraction.{md,json}. The
heuristic's weights were tuned on the train split only; val and test are held out.
"""

from __future__ import annotations

import argparse
import dataclasses
import datetime as dt
import importlib.metadata
import importlib.util
import json
import os
import shlex
import sys
import time
from pathlib import Path

import numpy as np
import polars as pl

from eval.textmetrics import best_item_rouge_l, joined_rouge_l
from graft.encoder import Encoder
from graft.extract import HeuristicFacetExtractor, candidate_sentences
from graft.facets import FACETS, FacetItems
from graft.text import split_sentences
from graphbuild.corpus import load_aclsum

#: Our facet -> ACLSum gold aspect.
GOLD_ASPECT = {"problem": "challenge", "method": "approach", "result": "outcome"}
SPLITS = ("train", "val", "test")
SYSTEMS = ("heuristic", "heuristic-abstract", "lead", "abstract", "oracle")
RESULTS_DIR = Path(__file__).resolve().parents[1] / "results"


def load_gold(split: str) -> dict[str, dict[str, str]]:
    """paper id -> {challenge, approach, outcome} summaries of one ACLSum split."""
    spec = importlib.util.find_spec("aclsum")
    if spec is None or not spec.submodule_search_locations:
        raise SystemExit("this benchmark needs the `aclsum` package: pip install aclsum")
    path = Path(next(iter(spec.submodule_search_locations))) / "dataset" / f"{split}.jsonl"
    with path.open(encoding="utf-8") as fh:
        rows = [json.loads(line) for line in fh if line.strip()]
    return {r["id"]: r["summary"] for r in rows}


def _lead(abstract: str | None) -> list[str]:
    sents = split_sentences(abstract or "")
    return sents[:1] or [" ".join((abstract or "").split()) or "(empty)"]


def _oracle(papers: pl.DataFrame, gold: dict[str, dict[str, str]]) -> list[FacetItems]:
    """Per facet, the heuristic's candidate sentence closest (ROUGE-L) to the gold summary."""
    out = []
    for row in papers.iter_rows(named=True):
        texts = candidate_sentences(row) or [row["title"]]
        out.append({
            f: [max(texts, key=lambda t, a=a: joined_rouge_l([t], gold[row["paper_id"]][a]))]
            for f, a in GOLD_ASPECT.items()
        })
    return out


def score(
    outputs: dict[str, list[FacetItems]], ids: list[str], gold: dict[str, dict[str, str]], encoder: Encoder
) -> dict[str, dict[str, dict[str, float]]]:
    """system -> facet -> metric, averaged over `ids` (outputs are aligned with `ids`)."""
    aspects = list(GOLD_ASPECT.values())
    gold_vecs = encoder.encode([gold[i][a] for i in ids for a in aspects]).reshape(len(ids), 3, -1)
    result: dict[str, dict[str, dict[str, float]]] = {}
    for system, items in outputs.items():
        joined = [" ".join(it[f]) for it in items for f in GOLD_ASPECT]
        vecs = encoder.encode(joined).reshape(len(ids), 3, -1)
        cos = np.einsum("pfd,pgd->pfg", vecs, gold_vecs)  # items of facet f vs gold aspect g
        result[system] = {}
        for k, (facet, aspect) in enumerate(GOLD_ASPECT.items()):
            others = [g for g in range(3) if g != k]
            result[system][facet] = {
                "rouge_l_joined": float(np.mean([joined_rouge_l(it[facet], gold[i][aspect])
                                                 for it, i in zip(items, ids)])),
                "rouge_l_best_item": float(np.mean([best_item_rouge_l(it[facet], gold[i][aspect])
                                                    for it, i in zip(items, ids)])),
                "cosine": float(cos[:, k, k].mean()),
                "specificity": float((cos[:, k, k] > cos[:, k, others].max(axis=1)).mean()),
                "items_per_paper": float(np.mean([len(it[facet]) for it in items])),
                "words_per_item": float(np.mean([len(x.split()) for it in items for x in it[facet]])),
            }
    return result


def markdown(report: dict) -> str:
    """The report as Markdown: provenance, one table per split, notes."""
    lines = [
        "# Facet extraction on ACLSum", "",
        f"- command: `{report['command']}`",
        f"- date: {report['date']}; aclsum {report['aclsum_version']}; encoder {report['encoder']}",
        f"- extraction time, {report['runtime']['papers']} papers: full text "
        f"{report['runtime']['full_text_s']:.1f} s, abstract only {report['runtime']['abstract_only_s']:.1f} s "
        f"({report['runtime']['cpu_count']} CPU cores, 1-min load average "
        f"{report['runtime']['load_average_1min']} at the start)",
        f"- heuristic config: `{json.dumps(report['config'])}`",
        "- weights tuned on the **train** split only; val and test are held out", "",
        "ROUGE-L F1 over lower-cased word tokens without stemming (joined: the facet's items as one "
        "text; best: its best single item). Cosine: MiniLM, items joined vs gold. Specificity: share of "
        "papers whose items are closer to their own gold aspect than to both others. `lead` / "
        "`abstract` give the same text for every facet; `oracle` picks, with the gold in hand, the "
        "candidate sentence with the best ROUGE-L (an upper bound, not a system).", "",
    ]
    for split, block in report["splits"].items():
        lines += [f"## {split} ({block['papers']} papers)", "",
                  "| system | facet | ROUGE-L joined | ROUGE-L best item | cosine | specificity | items | words/item |",
                  "|---|---|---:|---:|---:|---:|---:|---:|"]
        for system, facets in block["systems"].items():
            for facet, m in facets.items():
                lines.append(
                    f"| {system} | {facet} | {m['rouge_l_joined']:.3f} | {m['rouge_l_best_item']:.3f} | "
                    f"{m['cosine']:.3f} | {m['specificity']:.2f} | {m['items_per_paper']:.2f} | "
                    f"{m['words_per_item']:.1f} |"
                )
        lines.append("")
    stats = report["extractor_stats"]
    lines += [f"Extractor counters (full-text run, all {report['runtime']['papers']} papers): "
              + ", ".join(f"{k} {v}" for k, v in stats.items()) + ".", ""]
    return "\n".join(lines)


def run(splits: list[str], *, command: str, limit: int | None = None, quiet: bool = False) -> dict:
    """Extract facets for the ACLSum corpus and score them on `splits`; returns the report dict."""
    def say(msg: str) -> None:
        if not quiet:
            print(msg, file=sys.stderr, flush=True)

    load = os.getloadavg()[0]  # the timings below are wall-clock, shared machines inflate them
    encoder = Encoder()
    corpus = load_aclsum().papers
    say(f"ACLSum: {corpus.height} papers; extracting facets (full text) ...")
    extractor = HeuristicFacetExtractor(encoder)
    t0 = time.perf_counter()
    full = dict(zip(corpus["paper_id"], extractor.extract(corpus)))
    t_full = time.perf_counter() - t0
    say(f"  {t_full:.1f} s; abstract only ...")
    abstract_only = corpus.with_columns(pl.lit(None, dtype=pl.Utf8).alias("full_text"))
    # A fresh encoder, so the timing does not profit from the sentences embedded above.
    fresh = Encoder()
    t0 = time.perf_counter()
    abstract = dict(zip(corpus["paper_id"], HeuristicFacetExtractor(fresh).extract(abstract_only)))
    t_abs = time.perf_counter() - t0
    say(f"  {t_abs:.1f} s; scoring ...")

    report: dict = {
        "benchmark": "facet_extraction",
        "command": command,
        "date": dt.date.today().isoformat(),
        "aclsum_version": importlib.metadata.version("aclsum"),
        "encoder": encoder.name,
        "encoder_backend": encoder.backend,  # auto: torch until a bulk call, then ONNX Runtime on the CPU
        "config": dataclasses.asdict(extractor.config),
        "runtime": {"papers": corpus.height, "full_text_s": round(t_full, 2),
                    "abstract_only_s": round(t_abs, 2), "cpu_count": os.cpu_count(),
                    "load_average_1min": round(load, 2)},
        "extractor_stats": extractor.stats(),
        "splits": {},
    }
    for split in splits:
        gold = load_gold(split)
        papers = corpus.filter(pl.col("paper_id").is_in(list(gold))).sort("paper_id")
        if limit is not None:
            papers = papers.head(limit)
        ids = papers["paper_id"].to_list()
        outputs = {
            "heuristic": [full[i] for i in ids],
            "heuristic-abstract": [abstract[i] for i in ids],
            "lead": [dict.fromkeys(FACETS, _lead(a)) for a in papers["abstract"]],
            "abstract": [dict.fromkeys(FACETS, [" ".join((a or "").split())]) for a in papers["abstract"]],
            "oracle": _oracle(papers, gold),
        }
        report["splits"][split] = {"papers": len(ids), "systems": score(outputs, ids, gold, encoder)}
    return report


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--split", choices=[*SPLITS, "all"], default="test",
                        help="ACLSum split to score; 'all' scores train, val and test separately")
    parser.add_argument("--json", metavar="OUT", help="also write the JSON report to OUT ('-': stdout)")
    parser.add_argument("--results-dir", type=Path, default=RESULTS_DIR,
                        help="where facet_extraction.md/.json are written (default: docs/results)")
    parser.add_argument("--limit", type=int, help="score only the first N papers of each split (smoke runs)")
    parser.add_argument("--quiet", action="store_true", help="no progress messages and no table on stdout")
    args = parser.parse_args(argv)

    argv = sys.argv[1:] if argv is None else argv
    command = " ".join(["python -m experiments.facet_extraction", shlex.join(argv)]).strip()
    splits = list(SPLITS) if args.split == "all" else [args.split]
    report = run(splits, command=command, limit=args.limit, quiet=args.quiet)
    md = markdown(report)
    args.results_dir.mkdir(parents=True, exist_ok=True)
    (args.results_dir / "facet_extraction.md").write_text(md, encoding="utf-8")
    text = json.dumps(report, indent=2)
    (args.results_dir / "facet_extraction.json").write_text(text + "\n", encoding="utf-8")
    if args.json == "-":
        print(text)
    elif args.json:
        Path(args.json).write_text(text + "\n", encoding="utf-8")
    if not args.quiet and args.json != "-":
        print(md)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
