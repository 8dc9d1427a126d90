"""Where a survey's references are lost before it is written: the share of a gold bibliography in
the survey writer's first stages, for its default settings and for changed ones.

For each query the writer's own first stages run (`graft.survey.pipeline.topic_pool`: query
expansion, retrieval over the descriptions, relevance filter and two-stage rerank), as of the
query's year, and three recalls are measured against the query's gold references:

- first N: the first `pool` papers of the fused retrieval (what the retrieval ranks highest);
- all candidates: every paper the descriptions retrieved (what the rerank chooses from);
- pool: the papers the outline and sections are drawn from (after the relevance filter and rerank).

A survey cites from its pool, so pool recall bounds reference recall, and it costs a fraction of a
whole survey (no outline, writing or verification), so it can be measured on many queries:

- `dev`: the split's survey dev hold-outs (review-like papers, their titles as topics);
- `ooc`: the out-of-corpus hold-outs with at least `--ooc-min-refs` references into the corpus,
  their titles as topics (not reviews, but a larger set of held-out bibliographies);
- `test`: the survey test hold-outs (the reported part: look at it once, after choosing on the others).

    python -m eval.benchmarks.survey_pool --split SPLITDIR [--queries dev,ooc] [--ooc-min-refs 10] \\
        [--set tie_support=2,4] [--combo "tie_support=2 retrieval_weight=1"] [--limit N] [--name cs768]

Writes eval/results/survey_pool_{name}.{md,json}.
"""

from __future__ import annotations

import argparse
import dataclasses
import datetime as dt
import os
import sys
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[2]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

from eval.benchmarks.split_queries import write_tables  # noqa: E402
from eval.benchmarks.survey_tuning import add_variant_options, parse_variants, variant_label  # noqa: E402

QUERY_SETS = ("dev", "ooc", "test")


def query_set(split_dir: Path, which: str, ooc_min_refs: int) -> list[tuple[str, str, int | None, set[str]]]:
    """(qid, title, year, gold) of one query set (see the module's docstring)."""
    from eval.splits import read_queries
    from eval.survey_suite import read_survey_split
    from eval.trec import read_qrels

    if which in ("dev", "test"):
        queries, gold = read_survey_split(split_dir, which)
    else:
        queries = read_queries(split_dir, "ooc")
        gold = read_qrels(split_dir / "ooc" / "qrels.txt")
        queries = [q for q in queries if len(gold.get(q["qid"], ())) >= ooc_min_refs]
    return [(q["qid"], q["title"], int(q["year"]) if q.get("year") else None, gold[q["qid"]])
            for q in queries if gold.get(q["qid"])]


def stage_recalls(index: Any, tools: Any, vectors: Any, config: Any,
                  queries: list[tuple[str, str, int | None, set[str]]]) -> list[dict[str, Any]]:
    """Per query: the recall of the first `config.pool` candidates, of all candidates and of the pool."""
    from graft.survey.backends import SurveyContext, make_backend
    from graft.survey.config import SurveyError
    from graft.survey.pipeline import topic_pool
    from graft.survey.retrieve import TopicRetriever

    out = []
    for qid, title, year, gold in queries:
        cfg = dataclasses.replace(config, until_year=year)
        retriever = TopicRetriever(index, tools, cfg.retriever, seeds=cfg.graph_seeds, until_year=year,
                                   citation_weight=cfg.citation_weight, vectors=vectors)
        ctx = SurveyContext(index=index, vectors=vectors, encode=tools.encoder.encode, config=cfg)
        try:
            found = topic_pool(title, retriever, ctx, make_backend(ctx, "cpu"), cfg)
        except SurveyError:  # off-topic: nothing retrieved counts
            out.append({"qid": qid, "first": 0.0, "candidates": 0.0, "pool": 0.0, "pool_size": 0})
            continue
        ids = [c.paper_id for c in found.candidates]
        pool = {c.paper_id for c in found.pool}
        out.append({"qid": qid, "first": len(set(ids[: cfg.pool]) & gold) / len(gold),
                    "candidates": len(set(ids) & gold) / len(gold), "pool": len(pool & gold) / len(gold),
                    "pool_size": len(pool)})
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--split", required=True, help="split directory (graft eval prepare + graft build)")
    ap.add_argument("--index", default=None, help="index directory (default SPLITDIR/index)")
    ap.add_argument("--queries", default="dev,ooc", help=f"query sets, comma-separated: {', '.join(QUERY_SETS)}")
    ap.add_argument("--ooc-min-refs", type=int, default=10, help="ooc: hold-outs with at least N gold references")
    add_variant_options(ap)
    ap.add_argument("--limit", type=int, default=None, help="only the first N queries of each set")
    ap.add_argument("--name", default=None, help="table name: survey_pool_{name}.md (default: the corpus)")
    ap.add_argument("--results", default=str(REPO / "eval" / "results"))
    args = ap.parse_args(argv)
    os.environ.setdefault("HF_HUB_OFFLINE", "1")

    from eval.runner import build_settings, corpus_name
    from eval.splits import read_split
    from eval.survey_suite import recall_ratio
    from graft.encoder import Encoder
    from graft.index import Index
    from graft.manifest import library_versions
    from graft.survey.config import SurveyConfig
    from graft.survey.retrieve import PaperVectors, QueryTools
    from graphbuild.build import BuildConfig

    sets = [s.strip() for s in args.queries.split(",") if s.strip()]
    if not sets or any(s not in QUERY_SETS for s in sets):
        ap.error(f"--queries {args.queries!r}: choose from {', '.join(QUERY_SETS)}")
    base = SurveyConfig()
    variants = parse_variants(ap, args, base)
    split_dir = Path(args.split)
    split = read_split(split_dir)
    index_dir = Path(args.index) if args.index else split_dir / "index"
    idx = Index.open(index_dir)
    build = BuildConfig.from_manifest(idx.manifest)
    encoder = Encoder(build.embedding_model, batch_size=build.embedding_batch_size)
    vectors = PaperVectors(idx)
    queries = {s: query_set(split_dir, s, args.ooc_min_refs)[: args.limit] for s in sets}
    empty = [s for s in sets if not queries[s]]
    if empty:
        ap.error(f"{split_dir} has no query in {', '.join(empty)} (ooc: none with >= {args.ooc_min_refs} "
                 "references into the corpus; dev/test: no survey hold-out of that part)")
    name = args.name or corpus_name(split)

    rows: list[dict[str, Any]] = []
    defaults: dict[str, list[float]] = {}
    for changes in [{}, *variants]:
        config = dataclasses.replace(base, **changes)
        tools = QueryTools(encoder=encoder, text_neighbours=config.text_neighbours, feedback=config.feedback)
        setting, value = variant_label(changes)
        for s in sets:
            t0 = time.perf_counter()
            per = stage_recalls(idx, tools, vectors, config, queries[s])
            n = len(per)
            pool = [r["pool"] for r in per]
            defaults.setdefault(s, pool)
            cmp = recall_ratio(pool, defaults[s])
            rows.append({"setting": setting, "value": value, "queries": s, "n": n,
                         "first": sum(r["first"] for r in per) / n,
                         "candidates": sum(r["candidates"] for r in per) / n,
                         "pool": sum(pool) / n, "pool_size": sum(r["pool_size"] for r in per) / n,
                         "ratio": cmp["ratio"], "low": cmp["low"], "high": cmp["high"],
                         "wins": cmp["wins"], "ties": cmp["ties"], "losses": cmp["losses"],
                         "seconds": (time.perf_counter() - t0) / n, "per_query": per})
            print(f"{setting}={value} {s}: pool recall {rows[-1]['pool']:.3f} ({cmp['ratio']:.2f}x default)",
                  flush=True)

    command = "python -m eval.benchmarks.survey_pool " + " ".join(argv if argv is not None else sys.argv[1:])
    meta = {"command": command, "date": dt.date.today().isoformat(), "split": str(split_dir),
            "corpus_hash": split["corpus_hash"], "index": str(index_dir), "build": build_settings(idx),
            "ooc_min_refs": args.ooc_min_refs, "pool": base.pool,
            "defaults": {k: getattr(base, k) for changes in variants for k in changes},
            "versions": library_versions()}
    lines = [
        f"# Survey pool recall — {name}", "",
        f"Command: `{command}`  ",
        f"Date: {meta['date']} · corpus hash `{split['corpus_hash'][:16]}` · "
        f"title weight {meta['build']['title_weight']}", "",
        f"| setting | value | queries | n | first {base.pool} | all candidates | pool | pool size "
        "| pool vs default | 95% interval | higher / equal / lower | s per query |",
        "|---|---|---|---:|---:|---:|---:|---:|---:|---|---|---:|",
    ]
    for r in rows:
        value = "—" if r["value"] is None else str(r["value"])
        lines.append(f"| {r['setting']} | {value} | {r['queries']} | {r['n']} | {r['first']:.3f} "
                     f"| {r['candidates']:.3f} | {r['pool']:.3f} | {r['pool_size']:.1f} | {r['ratio']:.2f} "
                     f"| {r['low']:.2f}–{r['high']:.2f} | {r['wins']} / {r['ties']} / {r['losses']} "
                     f"| {r['seconds']:.2f} |")
    lines += ["", "- recall of each query's gold references (its bibliography in the corpus) among: the first "
              f"{base.pool} papers of the fused retrieval; all the papers retrieved; the pool after the relevance "
              "filter and the two-stage rerank (offline backend), which the survey's outline and sections draw on",
              "- queries: dev = survey dev hold-outs; ooc = out-of-corpus hold-outs with at least "
              f"{args.ooc_min_refs} references into the corpus; test = survey test hold-outs; titles as topics, "
              "each as of its year",
              "- pool vs default: the row's mean pool recall over the default row's on the same queries, with a "
              "paired bootstrap interval (2000 resamples of the queries)"]
    write_tables(args.results, f"survey_pool_{name}", meta, rows, lines)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
