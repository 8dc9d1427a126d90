"""Survey evaluation: generate a survey on each held-out review-like paper's title and compare its
citations with that paper's bibliography; judge its citation claims (AutoSurvey's protocol).

Two systems are compared on the same index and hold-outs:

- `graft-survey`: the survey writer of `graft.survey` (facet-graph retrieval, two-stage fusion
  rerank, adaptive citation verification);
- `baseline-survey`: an AutoSurvey-like writer — dense MiniLM retrieval over title + abstract, no
  rerank and no verification, the same writer and outline otherwise.

The split directory follows the evaluation contract (`SPLITDIR/split.json`, `corpus.jsonl`,
`survey/queries.jsonl`, `survey/qrels.txt`); `prepare_survey_split` writes the survey part of it
from a corpus for runs made before `graft eval prepare` exists.
"""

from __future__ import annotations

import datetime as _dt
import gzip
import json
import random
import sys
from pathlib import Path
from typing import Any

from eval.splits import write_qrels
from eval.trec import read_qrels, write_run
from graft.errors import InputValidationError
from graft.progress import Reporter
from graft.store import atomic_path, write_json, write_lines

SYSTEMS = ("graft-survey", "baseline-survey")

#: Metric names of one row of the suite's table, in display order.
METRICS = ("reference_recall", "reference_precision", "fabricated_references", "claim_recall",
           "claim_precision", "cited_papers", "sentences", "seconds")


# ---- split (until `graft eval prepare` writes it) ---------------------------------------------
def _read_records(path: Path) -> list[dict[str, Any]]:
    opener = gzip.open if path.suffix == ".gz" else open
    with opener(path, "rt", encoding="utf-8") as fh:
        return [json.loads(line) for line in fh if line.strip()]


def prepare_survey_split(
    corpus: str | Path, out: str | Path, *, n_survey: int = 25, min_references: int = 20, seed: int = 0,
    limit: int | None = None, max_papers: int | None = None,
) -> dict[str, Any]:
    """Hold out review-like papers (>= `min_references` references) of a corpus for survey evaluation.

    Writes the survey part of the evaluation split layout: `split.json`, `corpus.jsonl` (the corpus
    without the hold-outs, references restricted to the remaining ids), `survey/queries.jsonl` and
    `survey/qrels.txt` (gold = each hold-out's references into the reduced corpus). Build the index
    afterwards with `graft build SPLITDIR/corpus.jsonl --out SPLITDIR/index`.

    Args:
        corpus: a JSONL / JSONL.gz file in the cs768 schema (id, title, abstract, year, references).
        out: the split directory.
        n_survey: hold-outs drawn (seeded) among the papers with enough references.
        min_references: references a paper needs to count as review-like.
        seed: sampling seed.
        limit: use only the first N records of the corpus (a smaller, faster split).
        max_papers: keep at most this many papers in the reduced corpus: every reference of the
            hold-outs, then a seeded sample of the rest (a smaller index on a small machine; the
            bibliographies stay complete, with fewer distractors than the full corpus).
    Returns:
        the `split.json` content.
    Raises:
        InputValidationError: the corpus has fewer eligible papers than requested.
    """
    from graphbuild.corpus import load_corpus

    corpus = Path(corpus)
    records = _read_records(corpus)
    if limit is not None:
        records = records[:limit]
    ids = {str(r["id"]) for r in records}
    eligible = sorted(str(r["id"]) for r in records
                      if len([x for x in r.get("references") or [] if x in ids]) >= min_references)
    if len(eligible) < n_survey:
        raise InputValidationError(
            f"{corpus}: only {len(eligible)} papers have >= {min_references} references into the corpus; "
            f"ask for fewer hold-outs (n_survey={n_survey}) or lower min_references"
        )
    rng = random.Random(seed)
    held = set(rng.sample(eligible, n_survey))
    allowed = None
    if max_papers is not None:
        allowed = {x for r in records if str(r["id"]) in held for x in r.get("references") or [] if x in ids}
        rest = sorted(ids - allowed - held)
        allowed |= set(rng.sample(rest, max(0, min(len(rest), max_papers - len(allowed)))))
    out = Path(out)
    kept = []
    for r in records:
        if str(r["id"]) in held or (allowed is not None and str(r["id"]) not in allowed):
            continue
        r = dict(r)
        r["references"] = [x for x in r.get("references") or []
                           if x in ids and x not in held and (allowed is None or x in allowed)]
        kept.append(r)
    write_lines(out / "corpus.jsonl", [json.dumps(r, ensure_ascii=False) for r in kept])
    kept_ids = {str(r["id"]) for r in kept}
    queries: list[str] = []
    qrels: dict[str, list[str]] = {}
    for r in records:
        pid = str(r["id"])
        if pid not in held:
            continue
        gold = sorted({x for x in r.get("references") or [] if x in kept_ids})
        queries.append(json.dumps({"qid": f"s{len(queries):03d}", "paper_id": pid, "title": r.get("title", ""),
                                   "abstract": r.get("abstract", ""), "year": r.get("year"),
                                   "n_references": len(gold)}, ensure_ascii=False))
        qrels[f"s{len(queries) - 1:03d}"] = gold
    write_lines(out / "survey" / "queries.jsonl", queries)
    write_qrels(out / "survey" / "qrels.txt", qrels)
    split = {
        "seed": seed,
        "source": str(corpus),
        "source_hash": load_corpus(corpus).content_hash(),
        "corpus_hash": load_corpus(out / "corpus.jsonl").content_hash(),
        "counts": {"source": len(records), "corpus": len(kept), "survey": len(queries), "ooc": 0, "incorpus": 0},
        "params": {"n_survey": n_survey, "min_references": min_references, "limit": limit,
                   "max_papers": max_papers},
        "command": "eval.survey_suite.prepare_survey_split",
        "created": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
        "versions": {"python": sys.version.split()[0]},
    }
    write_json(out / "split.json", split)
    return split


# ---- the suite -------------------------------------------------------------------------------
def read_survey_split(split_dir: str | Path) -> tuple[list[dict[str, Any]], dict[str, set[str]]]:
    """`survey/queries.jsonl` and `survey/qrels.txt` of a split directory.

    Raises:
        InputValidationError: the files are missing or malformed (the message names the command).
    """
    split_dir = Path(split_dir)
    qpath, rpath = split_dir / "survey" / "queries.jsonl", split_dir / "survey" / "qrels.txt"
    if not qpath.is_file() or not rpath.is_file():
        raise InputValidationError(
            f"{split_dir} has no survey hold-out ({qpath.name}, {rpath.name}); write it with "
            f"`graft eval prepare CORPUS --out {split_dir}`")
    queries = [json.loads(line) for line in qpath.read_text(encoding="utf-8").splitlines() if line.strip()]
    gold: dict[str, set[str]] = {q["qid"]: set() for q in queries}
    gold.update(read_qrels(rpath))
    return queries, gold


def system_config(system: str, base: Any) -> Any:
    """The survey settings of one evaluated system.

    Raises:
        InputValidationError: an unknown system name.
    """
    from dataclasses import replace

    if system == "graft-survey":
        return base
    if system == "baseline-survey":
        return replace(base, retriever="dense", rerank=False, verify=False)
    raise InputValidationError(f"unknown survey system {system!r}; allowed: {', '.join(SYSTEMS)}")


def judge_claims(survey: dict[str, Any], judge: Any) -> tuple[int, int, int, int]:
    """AutoSurvey's claim protocol over one survey.json: (supported pairs, pairs, sentences whose
    citations jointly support them, sentences). Only printed sentences and citations count."""
    from graft.survey.verify import SUPPORTED

    pairs_ok = pairs = sent_ok = sents = 0
    for sec in survey["sections"]:
        for sub in sec["subsections"]:
            for s in sub["sentences"]:
                if s["dropped"]:
                    continue
                cites = [c["paper_id"] for c in s["citations"] if c["status"] in (*SUPPORTED, "unverified")]
                if not cites:
                    continue
                sents += 1
                verdicts = [judge.check(s["text"], s["facet"], pid).supported for pid in cites]
                pairs += len(verdicts)
                pairs_ok += sum(verdicts)
                sent_ok += any(verdicts)
    return pairs_ok, pairs, sent_ok, sents


def survey_suite(split_dir: Path, index_dir: Path, *, systems: list[str], limit: int | None,
                 reporter: Any = None, config: Any = None, out_dir: Path | None = None,
                 judge_llm: Any = None, encoder: Any = None) -> dict[str, Any]:
    """Generate a survey on each held-out review-like paper's title with each system and score it.

    Args:
        split_dir: the evaluation split (survey/queries.jsonl, survey/qrels.txt, split.json).
        index_dir: the index built from `split_dir/corpus.jsonl`.
        systems: any of "graft-survey", "baseline-survey".
        limit: evaluate only the first N hold-outs.
        reporter: progress (graft.progress.Reporter); quiet by default.
        config: base `SurveyConfig` (offline backend by default).
        out_dir: where the surveys and run files go (default `split_dir/runs/survey`).
        judge_llm: an `LLMConfig` for an LLM claim judge; None = the offline facet-aware checker (a proxy).
        encoder: a loaded sentence encoder to reuse.
    Returns:
        {"rows": [{"system", metric: value}], "notes": [...], "runs": {system: TREC run file},
         "per_query": {system: [...]}}.
    Raises:
        InputValidationError: missing split files, an unknown system, or an index of another corpus.
    """
    import time

    import numpy as np

    from graft.index import Index
    from graft.llm import ChatClient, LLMCache
    from graft.survey.backends import LLMBackend, OfflineBackend, SurveyContext
    from graft.survey.config import SurveyConfig, SurveyError
    from graft.survey.pipeline import write_survey
    from graft.survey.retrieve import DenseIndex, PaperVectors, QueryTools
    from graphbuild.external import ExternalScorer

    reporter = reporter or Reporter(quiet=True)
    split_dir, index_dir = Path(split_dir), Path(index_dir)
    for s in systems:
        system_config(s, SurveyConfig())
    queries, gold = read_survey_split(split_dir)
    queries = queries[:limit] if limit is not None else queries
    idx = Index.open(index_dir)
    split_file = split_dir / "split.json"
    if split_file.is_file():
        expected = json.loads(split_file.read_text()).get("corpus_hash")
        if expected and idx.manifest.get("corpus_hash") != expected:
            raise InputValidationError(
                f"index {index_dir} was not built from {split_dir / 'corpus.jsonl'} (corpus hash differs); "
                f"build it with `graft build {split_dir / 'corpus.jsonl'} --out {split_dir / 'index'}`")
    base = config or SurveyConfig()
    scorer = ExternalScorer(idx, encoder=encoder)
    tools = QueryTools.from_scorer(scorer)
    dense = None
    if "baseline-survey" in systems:
        with reporter.stage("dense index", total=idx.n, unit="papers") as adv:
            dense = DenseIndex(idx, scorer.encoder)
            adv(idx.n)
    ctx = SurveyContext(index=idx, vectors=PaperVectors(idx), encode=scorer.encoder.encode, config=SurveyConfig())
    if judge_llm is not None:
        judge = LLMBackend(ChatClient(judge_llm, cache=LLMCache.for_index(index_dir)), OfflineBackend(ctx),
                           name=f"judge:{judge_llm.model}")
        judge_label = f"LLM judge ({judge_llm.model})"
    else:
        judge = OfflineBackend(ctx)
        judge_label = "proxy: offline facet-aware checker"
    out_dir = Path(out_dir) if out_dir is not None else split_dir / "runs" / "survey"
    corpus_ids = set(idx.paper_ids)
    rows, runs, per_query = [], {}, {}
    for system in systems:
        cfg = system_config(system, base)
        run: dict[str, list[tuple[str, float]]] = {}
        results: list[dict[str, Any]] = []
        with reporter.stage(system, total=len(queries), unit="surveys") as adv:
            for q in queries:
                t0 = time.perf_counter()
                target = out_dir / system / q["qid"]
                try:
                    res = write_survey(idx, q["title"], target, cfg, tools=tools, dense=dense)
                    survey = json.loads(res.paths["json"].read_text(encoding="utf-8"))
                    error = None
                except SurveyError as exc:
                    survey, error = None, str(exc)
                seconds = time.perf_counter() - t0
                cited = [r["paper_id"] for r in survey["references"]] if survey else []
                shown = {c["paper_id"] for sec in (survey or {}).get("sections", []) for sub in sec["subsections"]
                         for s in sub["sentences"] if not s["dropped"] for c in s["citations"]
                         if c["status"] not in ("removed",)}
                fabricated = len((set(cited) | shown) - corpus_ids)
                g = gold.get(q["qid"], set())
                hit = len(set(cited) & g)
                pairs_ok, pairs, sent_ok, sents = judge_claims(survey, judge) if survey else (0, 0, 0, 0)
                results.append({
                    "qid": q["qid"], "paper_id": q["paper_id"], "title": q["title"], "error": error,
                    "reference_recall": hit / len(g) if g else 0.0,
                    "reference_precision": hit / len(cited) if cited else 0.0,
                    "fabricated_references": fabricated,
                    "claim_recall": sent_ok / sents if sents else 0.0,
                    "claim_precision": pairs_ok / pairs if pairs else 0.0,
                    "cited_papers": len(cited), "gold": len(g), "sentences": sents, "seconds": seconds,
                })
                run[q["qid"]] = [(pid, 1.0 / rank) for rank, pid in enumerate(cited, 1)]
                adv(1)
        run_path = out_dir / f"{system}.run"
        write_run(run_path, run, system)
        runs[system] = str(run_path)
        per_query[system] = results
        row: dict[str, Any] = {"system": system, "queries": len(results),
                               "failed": sum(r["error"] is not None for r in results)}
        for m in METRICS:
            vals = [r[m] for r in results]
            row[m] = float(np.sum(vals)) if m == "fabricated_references" else float(np.mean(vals)) if vals else 0.0
        rows.append(row)
    notes = [
        f"claim recall / precision judge: {judge_label}",
        "reference recall / precision: cited papers against the hold-out's references into the reduced corpus, "
        "macro-averaged over hold-outs; fabricated_references: citations (summed) that are not corpus papers",
        f"writer backend: {base.llm}; graft-survey retriever: {base.retriever}; baseline-survey: dense MiniLM "
        "over title + abstract, no rerank, no verification",
    ]
    if judge_llm is None:
        notes.append("the offline judge is the same facet-aware checker graft-survey verifies with, so "
                     "graft-survey's claim scores are high by construction; the baseline's are the informative ones")
    return {"rows": rows, "notes": notes, "runs": runs, "per_query": per_query}


def markdown_table(result: dict[str, Any]) -> str:
    """The suite's rows as a Markdown table with its notes."""
    head = ["system", "queries", "failed", *METRICS]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for r in result["rows"]:
        cells = []
        for h in head:
            v = r.get(h, "")
            cells.append(f"{v:.3f}" if isinstance(v, float) and h not in ("fabricated_references", "cited_papers",
                                                                           "sentences", "seconds")
                         else f"{v:.1f}" if isinstance(v, float) else str(v))
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n\n" + "\n".join(f"- {n}" for n in result["notes"]) + "\n"


def main(argv: list[str] | None = None) -> None:
    """`python -m eval.survey_suite`: prepare a survey split (if asked), build its index (if absent),
    run both systems and write the tables to eval/results/."""
    import argparse

    from graft.survey.config import SurveyConfig

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--split", type=Path, required=True, help="split directory")
    ap.add_argument("--prepare", type=Path, help="corpus to hold review-like papers out of (writes --split)")
    ap.add_argument("--n-survey", type=int, default=25)
    ap.add_argument("--max-papers", type=int, help="reduced corpus size (all hold-out references kept)")
    ap.add_argument("--index", type=Path, help="index of the reduced corpus (default SPLIT/index; built if absent)")
    ap.add_argument("--limit", type=int)
    ap.add_argument("--sections", type=int, default=4)
    ap.add_argument("--out", type=Path, default=Path("eval/results"))
    ap.add_argument("--tag", default="survey_cs768")
    args = ap.parse_args(argv)
    reporter = Reporter()
    if args.prepare:
        prepare_survey_split(args.prepare, args.split, n_survey=args.n_survey, max_papers=args.max_papers)
    index = args.index or args.split / "index"
    if not (index / "manifest.json").is_file():
        from graphbuild.build import build_index

        build_index(args.split / "corpus.jsonl", index, reporter=reporter)
    result = survey_suite(args.split, index, systems=list(SYSTEMS), limit=args.limit, reporter=reporter,
                          config=SurveyConfig(sections=args.sections))
    split = json.loads((args.split / "split.json").read_text())
    header = (f"# Survey evaluation ({args.tag})\n\n`python -m eval.survey_suite {' '.join(argv or sys.argv[1:])}`"
              f" — corpus hash {split.get('corpus_hash')}, {split['counts']}\n\n")
    with atomic_path(args.out / f"{args.tag}.md") as tmp:
        tmp.write_text(header + markdown_table(result), encoding="utf-8")
    write_json(args.out / f"{args.tag}.json", {"split": split, **result})
    print(markdown_table(result))


if __name__ == "__main__":  # pragma: no cover
    main()
