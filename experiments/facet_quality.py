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

With `--llm-url URL --llm-model NAME` (any OpenAI-compatible server) or `--llm-local MODEL` (a local
Hugging Face chat-model folder run in process through transformers; `smollm2-135m` = the packaged
SmolLM2-135M-Instruct) a system `llm MODEL` joins: `graft build --extractor llm`'s extractor itself
(same prompt, same strict answer check), with the learned heuristic for the papers whose answer is
discarded, as in a build; the share of valid answers is reported beside it. Answers are cached in
`--llm-cache` (SQLite) so a rerun asks nothing again.

Results: docs/results/facet_quality_aclsum[_NAME].{md,json}.
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
from typing import Any

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
    "learned spans": {"spans": True},  # candidates are sentences' facet-bearing spans (`graft.extract.facet_spans`)
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
        # other candidates than the learned system's need their own pass over the papers
        prepared = HeuristicFacetExtractor(encoder, cfg).prepare(papers) if cfg.spans else learned
        out[name] = [select_items_learned(p, cfg) for p in prepared]
    return out, seconds


class LocalChatClient:
    """`ChatClient`'s batch interface over `graft.survey.backends.LocalChat` (a transformers chat
    model in this process, greedy, answers cached): what `LLMFacetExtractor` calls."""

    def __init__(self, chat: Any) -> None:
        self.chat = chat
        self._stats = {"calls": 0, "requests": 0, "cache_hits": 0, "retries": 0, "failures": 0}

    def complete_many(self, requests: Any, progress: Any = None) -> list[str | Exception]:
        out: list[str | Exception] = []
        for r in requests:
            self._stats["calls"] += 1
            self._stats["requests"] += 1
            out.append(self.chat.complete(r.messages, response_format=r.response_format))
            if progress is not None:
                progress(1)
        return out

    def stats(self) -> dict[str, int]:
        return dict(self._stats)


def llm_client(args: argparse.Namespace) -> tuple[str, Any] | None:
    """(system name, chat client) for `--llm-url`/`--llm-model` or `--llm-local`; None without them."""
    from graft.llm import LLMCache

    cache = LLMCache(args.llm_cache) if args.llm_cache else None
    if args.llm_local:
        from graft.survey.backends import LocalChat

        path = args.llm_local
        if path == "smollm2-135m":
            from training.base_models import ensure_smollm2

            path = str(ensure_smollm2(quiet=True))
        return f"llm {args.llm_local}", LocalChatClient(LocalChat(path, cache, max_new_tokens=args.llm_max_tokens))
    if args.llm_url:
        from graft.llm import ChatClient, LLMConfig

        config = LLMConfig(model=args.llm_model, base_url=args.llm_url, max_tokens=args.llm_max_tokens)
        return f"llm {args.llm_model}", ChatClient(config, cache=cache)
    return None


def llm_items(papers: pl.DataFrame, encoder: Encoder, client: Any) -> tuple[list[FacetItems], dict[str, Any]]:
    """The LLM extractor's items per paper (the learned heuristic for discarded answers) and its
    counters, with a few of the discarded answers' reasons."""
    from graphbuild.facets_llm import LLMFacetExtractor

    extractor = LLMFacetExtractor(client, fallback=HeuristicFacetExtractor(encoder, HeuristicConfig()))
    t0 = time.perf_counter()
    items = extractor.extract(papers, progress=lambda _: print(".", end="", file=sys.stderr, flush=True))
    print(file=sys.stderr)
    stats = {**extractor.stats(), "seconds": round(time.perf_counter() - t0, 1),
             "issues": [why[:200] for _, why in extractor.issues[:5]]}
    return items, stats


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
    for scope, stats in report.get("llm", {}).items():
        lines += [f"`{stats['system']}`, {scope} scope: {stats['llm_ok']} of {stats['papers']} answers passed the "
                  f"extractor's check, {stats['discarded']} discarded and {stats['failed']} failed (those papers "
                  f"take the learned heuristic's items, as in a build); {stats['seconds']:.0f} s.", ""]
        lines += [f"- {why}" for why in stats["issues"]] + [""]
    if "timing" in report:
        sec = report["timing"]["seconds"]
        lines += [f"Extraction time, {report['timing']['papers']} abstracts, fresh encoder each, best of 2 "
                  f"alternating runs: rules {sec['rules']:.1f} s, learned {sec['learned']:.1f} s "
                  f"({sec['learned'] / sec['rules']:.2f}x).", ""]
    return "\n".join(lines)


def run(splits: list[str], *, command: str, limit: int | None = None, cache: Path | None = None,
        scopes: tuple[str, ...] = tuple(SCOPES), timed: bool = False, llm: tuple[str, Any] | None = None) -> dict:
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
        if llm is not None:
            name, client = llm
            print(f"{scope}: {name} on {frame.height} papers ", end="", file=sys.stderr, flush=True)
            systems[name], stats = llm_items(frame, encoder, client)
            report.setdefault("llm", {})[scope] = {"system": name, **stats}
            seconds[name] = stats["seconds"]
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
    parser.add_argument("--llm-url", help="an OpenAI-compatible server (http://host:port/v1) for the `llm` system")
    parser.add_argument("--llm-model", help="with --llm-url: the model name the server knows")
    parser.add_argument("--llm-local", metavar="MODEL",
                        help="a local Hugging Face chat-model folder, or smollm2-135m (the packaged SmolLM2-135M-Instruct)")
    parser.add_argument("--llm-max-tokens", type=int, default=512, help="tokens per answer (default 512)")
    parser.add_argument("--llm-cache", type=Path, metavar="SQLITE", help="answers kept between runs")
    parser.add_argument("--name", help="write facet_quality_aclsum_NAME.{md,json} (default: facet_quality_aclsum)")
    args = parser.parse_args(argv)
    if args.llm_url and not args.llm_model:
        parser.error("--llm-url needs --llm-model")
    argv = sys.argv[1:] if argv is None else argv
    command = " ".join(["python -m experiments.facet_quality", shlex.join(argv)]).strip()
    report = run(args.splits.split(","), command=command, limit=args.limit, cache=args.embedding_cache,
                 scopes=tuple(args.scopes.split(",")), timed=args.timing, llm=llm_client(args))
    md = markdown(report)
    args.results_dir.mkdir(parents=True, exist_ok=True)
    stem = "facet_quality_aclsum" + (f"_{args.name}" if args.name else "")
    (args.results_dir / f"{stem}.md").write_text(md, encoding="utf-8")
    (args.results_dir / f"{stem}.json").write_text(json.dumps(report, indent=2) + "\n", encoding="utf-8")
    print(md)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
