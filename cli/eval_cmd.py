"""`graft eval`: evaluation splits, suites and re-scoring (a sub-app registered by cli/app.py)."""

from __future__ import annotations

import json
import shlex
import sys
from pathlib import Path

import typer

from cli.common import console, err, fail
from cli.options import finite
from graft.jsonio import read_json_file

eval_app = typer.Typer(add_completion=False, no_args_is_help=True,
                       help="Evaluation: prepare splits, run suites (TREC runs + tables), re-score runs.")


def _command() -> str:
    return "graft " + " ".join(shlex.quote(a) for a in sys.argv[1:])


@eval_app.command()
def prepare(
    corpus: str = typer.Argument(..., help="Corpus file (JSONL / JSONL.gz / Parquet / JSON), JSON or S2ORC folder, or 'aclsum'."),
    out: Path = typer.Option(..., "--out", help="Split directory to write."),
    seed: int = typer.Option(0, min=0, help="Seed of tie-breaking, the survey draw and the dev/test split."),
    ooc: int = typer.Option(500, "--ooc", min=0, help="Out-of-corpus hold-outs (newest citing papers first)."),
    survey: int = typer.Option(30, "--survey", min=0,
                               help="Review-like hold-outs for the survey suite's test part."),
    survey_dev: int = typer.Option(30, "--survey-dev", min=0,
                                   help="Further review-like hold-outs, the survey dev part."),
    dev_share: float = typer.Option(0.5, "--dev-share", parser=finite(0, 1), metavar="FLOAT",
                                    help="Share of in-corpus queries in dev, in [0, 1]."),
    min_neighbours: int = typer.Option(5, "--min-neighbours", min=1,
                                       help="Citation neighbours of an in-corpus query."),
    incorpus: int = typer.Option(600, "--incorpus", min=0,
                                 help="In-corpus queries drawn (dev and test together; 0 = every eligible paper). "
                                      "Each part's index is built without its queries' citation links."),
    skip_bad: bool = typer.Option(False, "--skip-bad", help="Skip invalid corpus records (counted) instead of "
                                  "stopping."),
    as_json: bool = typer.Option(False, "--json", help="Print split.json."),
) -> None:
    """Hold out out-of-corpus and survey papers, choose in-corpus queries, write SPLITDIR."""
    from eval.splits import SplitConfig, prepare_split
    from graft.errors import GraftError

    try:
        config = SplitConfig(seed=seed, n_ooc=ooc, n_survey=survey, n_survey_dev=survey_dev, dev_share=dev_share,
                             incorpus_min_neighbours=min_neighbours, incorpus_queries=incorpus)
        earlier = _split_hash(out)
        meta = prepare_split(corpus, out, config, command=_command(), skip_bad=skip_bad)
    except GraftError as exc:
        fail(exc)
    if earlier is not None and earlier != meta["corpus_hash"]:  # what was made from the replaced split

        stale = [p for p in ("index", "runs", "results") if (out / p).exists()]
        if stale:
            err.print(f"note: {', '.join(f'{out / p}' for p in stale)} belong to the split this one replaced (another "
                      "corpus): `graft eval run` refuses that index and never reuses those runs; rebuild the index "
                      "and delete the rest", highlight=False, soft_wrap=True)
    if as_json:
        typer.echo(json.dumps(meta, indent=2))
        return
    from rich.table import Table

    t = Table(title=f"graft eval prepare → {out}", show_header=False)
    t.add_column("")
    t.add_column("", justify="right")
    for k, v in meta["counts"].items():
        t.add_row(k, f"{v:,}")
    t.add_row("corpus hash", meta["corpus_hash"][:16])
    console.print(t)
    for key, asked, what in (("ooc", ooc, "out-of-corpus hold-outs"), ("survey", survey, "survey test hold-outs"),
                             ("survey_dev", survey_dev, "survey dev hold-outs")):
        if meta["counts"][key] < asked:
            console.print(f"note: {meta['counts'][key]} {what} of the {asked} asked for: the corpus has no more "
                          "papers that keep enough references into the rest", style="yellow", highlight=False)
    console.print(f"next: graft eval build {shlex.quote(str(out))} (with --cache-from INDEX, an index of the whole "
                  "corpus lends its facets and vectors)", highlight=False, markup=False, soft_wrap=True)  # one line


@eval_app.command("build")
def build_split(
    split_dir: Path = typer.Argument(..., help="Split directory from `graft eval prepare`."),
    cache_from: Path | None = typer.Option(None, "--cache-from",
                                           help="An index (same model and extractor) whose stored facets and "
                                                "embeddings are copied first, e.g. one of the whole corpus."),
    direct_links: bool = typer.Option(False, "--direct-links/--no-direct-links",
                                      help="Build the graphs with direct citation links as candidates."),
    facet_scorer: str = typer.Option("learned", "--facet-scorer",
                                     help="Offline extractor's sentence scorer: learned or rules (the old one)."),
    embedding_model: str | None = typer.Option(None, "--embedding-model",
                                               help="Local sentence-transformers model folder that embeds the "
                                                    "items and papers (e.g. one adapted to the corpus: "
                                                    "docs/facets.md); the learned facet scorer still reads the "
                                                    "packaged encoder."),
    item_context: str = typer.Option("late", "--item-context", metavar="title|late",
                                     help="What a facet item's vector reads besides its own text: title or late "
                                          "(as graft build's --item-context)."),
    title_weight: float = typer.Option(0.35, "--title-weight", parser=finite(0, 100),
                                       metavar="FLOAT",
                                       help="In [0, 100]: weight of the paper's title vector added to each facet "
                                            "item's vector (as graft build's --title-weight; 0.7 with --item-context "
                                            "title)."),
    lexical_weight: float = typer.Option(0.5, "--lexical-weight", parser=finite(0, 1), metavar="FLOAT",
                                         help="In [0, 1]: share of word overlap in facet similarity (as graft "
                                              "build's --lexical-weight; 0: embeddings alone)."),
    text_lexical_weight: float = typer.Option(0.5, "--text-lexical-weight", parser=finite(0, 1), metavar="FLOAT",
                                              help="In [0, 1]: share of word overlap in text coupling (as graft "
                                                   "build's --text-lexical-weight)."),
    force: bool = typer.Option(False, "--force", help="Rebuild indexes that are up to date."),
    quiet: bool = typer.Option(False, "--quiet", "-q", help="No progress bars."),
) -> None:
    """Build every index a split is evaluated on: SPLITDIR/index (out-of-corpus, survey and coverage
    suites) and each in-corpus part's leak-free index SPLITDIR/incorpus/{dev,test}/index, which
    take their facets and vectors from the first (only the graph is made again). An index already
    built from its corpus with the same settings is kept unless --force."""
    from eval.splits import build_split_indexes
    from graft.errors import GraftError
    from graft.progress import Reporter
    from graphbuild.build import BuildConfig

    def say(name: str, index: Path, built: bool) -> None:
        console.print(f"{name}: {index} {'built' if built else 'is up to date'}", highlight=False, markup=False)

    try:
        build_split_indexes(split_dir, BuildConfig(direct_links=direct_links, facet_scorer=facet_scorer,
                                                        embedding_model=embedding_model,
                                                        item_context=item_context, title_weight=title_weight,
                                                        lexical_weight=lexical_weight,
                                                        text_lexical_weight=text_lexical_weight),
                            cache_from=cache_from, force=force,
                            reporter=Reporter(quiet=quiet), on_index=say)
    except GraftError as exc:
        fail(exc)
    console.print(f"next: graft eval run {shlex.quote(str(split_dir))} --suite incorpus,ooc", highlight=False,
                  markup=False, soft_wrap=True)


def _split_hash(folder: Path) -> str | None:
    """The corpus hash of the split already in `folder`, if any."""
    try:
        return read_json_file(folder / "split.json").get("corpus_hash")
    except (OSError, ValueError, AttributeError):
        return None


@eval_app.command()
def run(
    split_dir: Path = typer.Argument(..., help="Split directory from `graft eval prepare`."),
    systems: str | None = typer.Option(None, help="Comma-separated: bm25, dense, hybrid, citation, facet, "
                                       "teacher, teacher-fb, teacher-cite, graft, graft-rrf, graft-walk, graft-naive, "
                                       "graft-cite, graft-text; survey suite: graft-survey, baseline-survey. Default: "
                                       "bm25,dense,teacher, and the two survey writers for --suite survey."),
    suite: str = typer.Option("incorpus", help="incorpus, ooc, attribution, coverage or survey; several "
                              "comma-separated suites share one loaded index."),
    index: Path | None = typer.Option(None, "--index", help="Index directory (default SPLITDIR/index)."),
    part: str = typer.Option("test", help="In-corpus queries and survey hold-outs: dev or test."),
    limit: int | None = typer.Option(None, "--limit", min=1,
                                     help="Only the first N queries (by qid) of each suite."),
    force: bool = typer.Option(False, "--force", help="Recompute runs even where matching run files exist."),
    naive_index: Path | None = typer.Option(None, "--naive-index",
                                            help="Index with a model trained on naive pairs (graft-naive)."),
    base_model: str | None = typer.Option(None, "--base-model",
                                          help="Tokenizer of the coverage suite (default smollm2-135m)."),
    beams: int = typer.Option(20, min=1, help="Beams per facet item (generative systems)."),
    device: str = typer.Option("cpu", help="Device of the generative models (cpu, cuda)."),
    judge_model: str | None = typer.Option(None, "--judge-model",
                                           help="Survey suite: claim judge served by an OpenAI-compatible server "
                                                "(default: the offline facet-aware checker, a proxy)."),
    judge_base_url: str | None = typer.Option(None, "--judge-base-url", help="The judge server's URL up to /v1."),
    judge_api_key_env: str = typer.Option("OPENAI_API_KEY", "--judge-api-key-env",
                                          help="Environment variable with the judge server's key."),
    results: Path | None = typer.Option(None, "--results", help="Folder of the tables (default SPLITDIR/results; the repository's are in docs/results)."),
    name: str | None = typer.Option(None, "--name", help="Corpus name in table file names."),
    label: str | None = typer.Option(None, "--label", help="Label printed on the tables."),
    quiet: bool = typer.Option(False, "--quiet", "-q", help="No progress bars."),
    as_json: bool = typer.Option(False, "--json", help="Print the table as JSON."),
) -> None:
    """Run systems on a split's queries, keep their TREC runs and write Markdown + JSON tables."""
    from eval.runner import RunOptions, markdown_table, run_suites
    from graft.errors import GraftError
    from graft.progress import Reporter

    try:
        judge = None
        if judge_model or judge_base_url:
            from graft.llm import LLMConfig

            if not (judge_model and judge_base_url):
                raise GraftError("an LLM judge needs both --judge-model and --judge-base-url")
            judge = LLMConfig(model=judge_model, base_url=judge_base_url, api_key_env=judge_api_key_env)
        suites = [s.strip() for s in suite.split(",") if s.strip()]
        if base_model is not None and "coverage" not in suites:
            raise GraftError("--base-model is the coverage suite's tokenizer; add --suite coverage")
        if systems is None:
            systems = ",".join((["bm25", "dense", "teacher"] if set(suites) - {"survey"} else [])
                               + (["graft-survey", "baseline-survey"] if "survey" in suites else []))
        options = RunOptions(systems=[s.strip() for s in systems.split(",") if s.strip()], index_dir=index,
                             part=part, limit=limit, force=force, naive_index=naive_index,
                             base_model=base_model or RunOptions.base_model,
                             beams=beams, device=device, results_dir=results, name=name,
                             label=label, judge=judge)
        tables = run_suites(split_dir, suites, options,
                            reporter=Reporter(quiet=quiet or as_json), command=_command())
    except GraftError as exc:
        fail(exc)
    if as_json:
        out = [{k: v for k, v in t.items() if k != "detail"} for t in tables]
        typer.echo(json.dumps(out[0] if len(out) == 1 else out, indent=2, default=str))
        return
    for table in tables:
        console.print(f"\n{table['suite']}", style="bold")
        # whole lines, never wrapped at the terminal's width: the printed table stays Markdown
        console.print("\n".join(markdown_table(table["rows"])), highlight=False, markup=False, soft_wrap=True)
        for note in table["notes"]:
            console.print(f"- {note}", highlight=False, markup=False, soft_wrap=True)
        console.print(f"tables: {', '.join(table['files'])}", highlight=False, markup=False, soft_wrap=True)


@eval_app.command()
def score(
    run_file: Path = typer.Argument(..., help="TREC run file."),
    qrels: Path = typer.Argument(..., help="TREC qrels file (e.g. SPLITDIR/incorpus/qrels.test.txt: an in-corpus run is of one part)."),
    limit: int | None = typer.Option(None, "--limit", min=1,
                                     help="The first N queries by qid, as `graft eval run --limit N` takes them."),
    ties: str = typer.Option("docid", "--ties", help="Equal scores ordered by docid ascending (docid: as the "
                             "tables are scored) or descending (trec_eval: as trec_eval orders them)."),
    as_json: bool = typer.Option(False, "--json", help="Print JSON."),
) -> None:
    """Re-score a TREC run: Recall@20 and @50 over the qrels' queries (every query the qrels judge: a
    query the run does not answer counts 0)."""
    from eval.runner import score_run
    from graft.errors import GraftError

    try:
        out = score_run(run_file, qrels, limit=limit, ties=ties)
    except GraftError as exc:
        fail(exc)
    if as_json:
        typer.echo(json.dumps(out))
        return
    typer.echo(" ".join(f"{k} {v:.4f}" if isinstance(v, float) else f"{k} {v}" for k, v in out.items()))
