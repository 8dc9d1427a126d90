"""Survey evaluation: generate a survey on each held-out review-like paper's title and compare its
citations with that paper's bibliography; judge its citation claims (AutoSurvey's protocol).

Two systems are compared on the same index and hold-outs:

- `graft-survey`: the survey writer of `graft.survey` (facet-graph retrieval, two-stage fusion
  rerank, adaptive citation verification);
- `baseline-survey`: an AutoSurvey-like writer — dense MiniLM retrieval over title + abstract, no
  rerank and no verification, the same writer and outline otherwise.

The split directory is `graft eval prepare`'s (`eval.splits.prepare_split`): `split.json`,
`corpus.jsonl`, `survey/queries.jsonl`, `survey/qrels.txt`; the suite runs as
`graft eval run SPLITDIR --suite survey --systems graft-survey,baseline-survey`.
"""

from __future__ import annotations

import shlex
from pathlib import Path
from typing import Any

from eval.splits import read_queries
from eval.systems import SURVEY_SYSTEMS
from eval.trec import read_qrels, write_run
from graft.errors import ConfigError, InputValidationError
from graft.jsonio import read_json_file
from graft.progress import Reporter

SYSTEMS = SURVEY_SYSTEMS

#: Metric names of one row of the suite's table, in display order.
METRICS = ("reference_recall", "pool_recall", "reference_precision", "fabricated_references", "citation_support",
           "first_check_support", "claim_recall", "claim_precision", "cited_papers", "sentences", "seconds")


# ---- the suite -------------------------------------------------------------------------------
def read_survey_split(split_dir: str | Path, part: str | None = "test"
                      ) -> tuple[list[dict[str, Any]], dict[str, set[str]]]:
    """`survey/queries.jsonl` and `survey/qrels.txt` of a split directory: the hold-outs of one
    part ("test", "dev"; None = all), in the order they were drawn.

    Raises:
        InputValidationError: the files are missing or malformed (the message names the command).
    """
    split_dir = Path(split_dir)
    qpath, rpath = split_dir / "survey" / "queries.jsonl", split_dir / "survey" / "qrels.txt"
    if not qpath.is_file() or not rpath.is_file():
        raise InputValidationError(
            f"{split_dir} has no survey hold-out ({qpath.name}, {rpath.name}); write it with "
            f"`graft eval prepare CORPUS --out {split_dir}`")
    queries = read_queries(split_dir, "survey", part=part)
    gold: dict[str, set[str]] = {q["qid"]: set() for q in queries}
    gold.update({q: g for q, g in read_qrels(rpath).items() if q in gold})
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


def printed_clauses(survey: dict[str, Any]) -> list[tuple[list[tuple[str, str]], str]]:
    """The printed sentences of a survey.json: ([(clause text, cited paper)], sentence text)."""
    from graft.survey.verify import SUPPORTED

    out = []
    for sec in survey["sections"]:
        for para in sec["paragraphs"]:
            for s in para["sentences"]:
                if s["dropped"]:
                    continue
                pairs = [(c["text"], c["citation"]["paper_id"]) for c in s["clauses"]
                         if c["citation"]["status"] in (*SUPPORTED, "unverified")]
                if pairs:
                    out.append((pairs, " ".join(t for t, _ in pairs)))
    return out


def judge_claims(survey: dict[str, Any], judge: Any, support: Any, names: Any) -> dict[str, int]:
    """Every printed (clause, citation) pair of one survey.json through the support test and the claim
    judge (AutoSurvey's protocol, one claim per clause): counts of pairs the support test accepts,
    pairs the judge accepts, sentences all of whose pairs the judge accepts, pairs and sentences.

    Args:
        judge: None (the support test judges) or an LLM backend (`judge(text, paper_id)`).
        support: the index's `SupportTest`; names: paper id -> words naming it.
    """
    counts = {"supported": 0, "judged": 0, "sentences_ok": 0, "pairs": 0, "sentences": 0}
    for pairs, _ in printed_clauses(survey):
        counts["sentences"] += 1
        ok_all = True
        for text, pid in pairs:
            counts["pairs"] += 1
            ok = support.check(text, pid, rivals=[p for _, p in pairs if p != pid], ignore=names(pid)).supported
            counts["supported"] += ok
            if judge is not None:
                opinion = judge.judge(text, pid)
                ok = bool(opinion) if opinion is not None else ok
            counts["judged"] += ok
            ok_all &= ok
        counts["sentences_ok"] += ok_all
    return counts


def labelled_support(index: Any, support: Any, encode: Any, papers: int, seed: int = 0) -> dict[str, Any]:
    """The support test as the survey runs it, on `eval.support_set`'s labelled (clause, paper) pairs
    of this index: precision, recall and counts."""
    import numpy as np

    from eval.support_set import precision_recall, support_cases

    cases, counts = support_cases(index, papers=papers, seed=seed)
    labels = np.array([c.label for c in cases])
    pred = np.array([support.check(c.clause, c.paper_id, ignore=c.name.split()).supported for c in cases])
    return {**precision_recall(labels, pred), "sources": counts["sources"]}


def survey_suite(split_dir: Path, index_dir: Path, *, systems: list[str], limit: int | None,
                 part: str = "test", reporter: Any = None, config: Any = None, out_dir: Path | None = None,
                 judge_llm: Any = None, encoder: Any = None, as_of_year: bool = True,
                 support_set: int = 100) -> dict[str, Any]:
    """Generate a survey on each held-out review-like paper's title with each system and score it.

    Args:
        split_dir: the evaluation split (survey/queries.jsonl, survey/qrels.txt, split.json).
        index_dir: the index built from `split_dir/corpus.jsonl`.
        systems: any of "graft-survey", "baseline-survey".
        limit: evaluate only the first N hold-outs.
        part: the hold-outs of the split's "test" part (reported) or "dev" part (for tuning).
        reporter: progress (graft.progress.Reporter); quiet by default.
        config: base `SurveyConfig` (offline backend by default).
        out_dir: where the surveys and run files go (default `split_dir/runs/survey`, `survey-dev` for dev).
        judge_llm: an `LLMConfig` for an LLM claim judge; None = the offline facet-aware checker (a proxy).
        encoder: a loaded sentence encoder to reuse.
        as_of_year: write each survey as of its hold-out's year (`until_year`), for both systems:
            a paper cannot cite later work, so later papers are never fair candidates.
        support_set: source papers of the labelled (clause, paper) set the support test is also
            measured on (`eval.support_set`; 0 = skip).
    Returns:
        {"rows": [{"system", metric: value}], "notes": [...], "runs": {system: TREC run file},
         "per_query": {system: [...]}}.
    Raises:
        InputValidationError: missing split files, an unknown system, or an index of another corpus.
    """
    import time
    from dataclasses import replace

    import numpy as np

    from graft.encoder import index_encoder
    from graft.index import Index
    from graft.llm import ChatClient, LLMCache
    from graft.survey.backends import LLMBackend, OfflineBackend, SurveyContext
    from graft.survey.config import SurveyConfig, SurveyError
    from graft.survey.pipeline import write_survey
    from graft.survey.retrieve import DenseIndex, PaperVectors, QueryTools

    reporter = reporter or Reporter(quiet=True)
    split_dir, index_dir = Path(split_dir), Path(index_dir)
    for s in systems:
        system_config(s, SurveyConfig())
    queries, gold = read_survey_split(split_dir, part)
    if not queries:
        raise InputValidationError(
            f"{split_dir} has no survey hold-out in part {part!r}; write one with `graft eval prepare CORPUS "
            f"--out {split_dir} --survey N --survey-dev N`")
    queries = queries[:limit] if limit is not None else queries
    idx = Index.open(index_dir)
    split_file = split_dir / "split.json"
    if split_file.is_file():
        expected = read_json_file(split_file).get("corpus_hash")
        if expected and idx.manifest.get("corpus_hash") != expected:
            raise InputValidationError(
                f"index {index_dir} was not built from {split_dir / 'corpus.jsonl'} (corpus hash differs); "
                f"build it with `graft build {shlex.quote(str(split_dir / 'corpus.jsonl'))} --out "
                f"{shlex.quote(str(split_dir / 'index'))}`")
    base = config or SurveyConfig()
    if encoder is None:
        encoder = index_encoder(idx)
    tools = QueryTools(encoder=encoder, text_neighbours=base.text_neighbours, feedback=base.feedback)
    dense = None
    if "baseline-survey" in systems:
        with reporter.stage("dense index", total=idx.n, unit="papers") as adv:
            dense = DenseIndex(idx, encoder)
            adv(idx.n)
    ctx = SurveyContext(index=idx, vectors=PaperVectors(idx), encode=encoder.encode, config=base)
    if judge_llm is not None:
        judge = LLMBackend(ChatClient(judge_llm, cache=LLMCache.for_index(index_dir)), OfflineBackend(ctx),
                           name=f"judge:{judge_llm.model}")
        judge_label = f"LLM judge ({judge_llm.model})"
    else:
        judge = None
        judge_label = "the support test (the same test graft-survey verifies with)"
    default_dir = "survey" if part == "test" else f"survey-{part}"
    out_dir = Path(out_dir) if out_dir is not None else split_dir / "runs" / default_dir
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
                qcfg = replace(cfg, until_year=int(q["year"])) if as_of_year and q.get("year") else cfg
                try:
                    res = write_survey(idx, q["title"], target, qcfg, tools=tools, dense=dense)
                    survey = read_json_file(res.paths["json"])
                    error = None
                except SurveyError as exc:
                    survey, error = None, str(exc)
                seconds = time.perf_counter() - t0
                cited = [r["paper_id"] for r in survey["references"]] if survey else []
                pool = {c["paper_id"] for c in survey["pool"]} if survey else set()
                shown = {pid for pairs, _ in (printed_clauses(survey) if survey else []) for _, pid in pairs}
                fabricated = len((set(cited) | shown) - corpus_ids)
                g = gold.get(q["qid"], set())
                hit = len(set(cited) & g)
                j = judge_claims(survey, judge, ctx.support, ctx.name_words) if survey else {
                    "supported": 0, "judged": 0, "sentences_ok": 0, "pairs": 0, "sentences": 0}
                v = (survey or {}).get("verification", {})
                first = v.get("first_check", 0)
                results.append({
                    "qid": q["qid"], "paper_id": q["paper_id"], "title": q["title"], "error": error,
                    "reference_recall": hit / len(g) if g else 0.0,
                    # the same against the survey's whole pool (the papers its outline was drawn from):
                    # what the writer could have cited, so the two show where references are lost
                    "pool_recall": len(pool & g) / len(g) if g else 0.0,
                    "reference_precision": hit / len(cited) if cited else 0.0,
                    "fabricated_references": fabricated,
                    # the share of printed (clause, citation) pairs the support test accepts, and (verified
                    # surveys) the share that passed at their first check, before any rewrite
                    "citation_support": j["supported"] / j["pairs"] if j["pairs"] else 0.0,
                    "first_check_support": v.get("first_check_passed", 0) / first if first else float("nan"),
                    "claim_recall": j["sentences_ok"] / j["sentences"] if j["sentences"] else 0.0,
                    "claim_precision": j["judged"] / j["pairs"] if j["pairs"] else 0.0,
                    "cited_papers": len(cited), "gold": len(g), "sentences": j["sentences"], "seconds": seconds,
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
            vals = [r[m] for r in results if not (isinstance(r[m], float) and np.isnan(r[m]))]
            row[m] = (float(np.sum(vals)) if m == "fabricated_references" else float(np.mean(vals)) if vals
                      else float("nan"))
        rows.append(row)
    notes = [
        f"claim recall / precision judge: {judge_label}",
        "reference recall / precision: cited papers against the hold-out's references into the reduced corpus, "
        "macro-averaged over hold-outs; pool_recall: the same for the survey's pool (the papers after the topic "
        "rerank that its outline is drawn from); fabricated_references: citations (summed) that are not corpus papers",
        f"writer backend: {base.llm}; graft-survey retriever: {base.retriever} with graph expansion from "
        f"{base.graph_seeds} seeds; baseline-survey: dense MiniLM over title + abstract, no rerank, no verification",
        "both systems write as of the hold-out's year (no paper published after it is cited)" if as_of_year
        else "no year cut-off: papers published after a hold-out may be cited",
    ]
    comparison = None
    if {"graft-survey", "baseline-survey"} <= set(per_query):
        comparison = recall_ratio([r["reference_recall"] for r in per_query["graft-survey"]],
                                  [r["reference_recall"] for r in per_query["baseline-survey"]])
        spread = (f"95% paired bootstrap interval {comparison['low']:.2f}-{comparison['high']:.2f}, "
                  f"{comparison['resamples']} resamples of the hold-outs" if len(queries) > 1
                  else "one hold-out: no interval")
        notes.append(
            f"reference recall graft-survey / baseline-survey = {comparison['ratio']:.2f} ({spread}); per hold-out "
            f"{comparison['wins']} higher, {comparison['ties']} equal, {comparison['losses']} lower")
    notes.append("citation_support: share of printed (clause, citation) pairs the support test accepts (each clause "
                 "against its cited paper, rivals: the paper's nearest graph neighbours and the sentence's other "
                 "papers); first_check_support: the share of graft-survey's clauses that passed their first check, "
                 "before any rewrite (nan: no verification)")
    if judge_llm is None:
        notes.append("graft-survey prints only pairs the support test accepted, so its citation_support and claim "
                     "scores are 1 by construction; the baseline's and first_check_support are the informative ones")
    labelled = None
    if support_set > 0:
        with reporter.stage("labelled support set", total=1, unit="sets") as adv:
            labelled = labelled_support(idx, ctx.support, encoder.encode, support_set)
            adv(1)
        notes.append(
            f"support test on {labelled['n']} labelled (clause, paper) pairs of this index ({labelled['sources']} "
            f"source papers; eval.support_set): precision {labelled['precision']:.3f}, recall {labelled['recall']:.3f}")
    return {"rows": rows, "notes": notes, "runs": runs, "per_query": per_query, "comparison": comparison,
            "queries": len(queries), "labelled_support": labelled}


def recall_ratio(system: list[float], baseline: list[float], *, resamples: int = 2000,
                 seed: int = 0) -> dict[str, Any]:
    """Ratio of mean reference recalls of two systems on the same hold-outs, with a paired
    bootstrap interval (hold-outs resampled with replacement, the ratio of means recomputed).

    Args:
        system, baseline: per hold-out recalls, aligned.
        resamples: bootstrap resamples; seed: their seed.
    Returns:
        {"ratio", "low", "high" (2.5th / 97.5th percentiles), "resamples", "wins", "ties", "losses"}.
    Raises:
        ValueError: lists of different lengths, or empty.
    """
    import numpy as np

    a, b = np.asarray(system, dtype=np.float64), np.asarray(baseline, dtype=np.float64)
    if a.shape != b.shape or a.size == 0:
        raise ConfigError(f"recall_ratio needs two aligned, non-empty lists (got {a.size} and {b.size})")
    rng = np.random.default_rng(seed)
    picks = rng.integers(0, a.size, size=(resamples, a.size))
    num, den = a[picks].mean(axis=1), b[picks].mean(axis=1)
    ratios = num[den > 0] / den[den > 0]
    ratio = float(a.mean() / b.mean()) if b.mean() > 0 else float("inf")
    low, high = (np.percentile(ratios, [2.5, 97.5]).tolist() if ratios.size else [float("nan")] * 2)
    return {"ratio": ratio, "low": float(low), "high": float(high), "resamples": resamples,
            "wins": int((a > b).sum()), "ties": int((a == b).sum()), "losses": int((a < b).sum())}


def markdown_table(result: dict[str, Any]) -> str:
    """The suite's rows as a Markdown table with its notes."""
    head = ["system", "queries", "failed", *METRICS]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for r in result["rows"]:
        cells = []
        for h in head:
            v = r.get(h, "")
            cells.append("–" if isinstance(v, float) and v != v else
                         f"{v:.3f}" if isinstance(v, float) and h not in ("fabricated_references", "cited_papers",
                                                                           "sentences", "seconds")
                         else f"{v:.1f}" if isinstance(v, float) else str(v))
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n\n" + "\n".join(f"- {n}" for n in result["notes"]) + "\n"
