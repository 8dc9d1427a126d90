"""`graft survey`: write a survey of a topic from an index (registered by cli/app.py)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import typer

from cli.common import console, fail
from cli.options import finite
from graft.survey.config import SurveyConfig

#: The CLI's defaults for the rerank's settings are the library's.
_DEFAULTS = SurveyConfig()

#: Topic of the short survey `graft demo` writes over the ACLSum corpus.
DEMO_TOPIC = "summarization of scientific documents"


def survey_tools(index: Any, encoder: Any = None, text_neighbours: int | None = None,
                 feedback: int | None = None) -> Any:
    """`QueryTools` for an index: its encoder (loaded when None), text coupling with
    `text_neighbours` papers and a second pass with the links of the first `feedback` (`SurveyConfig`'s
    defaults when None)."""
    from graft.encoder import index_encoder
    from graft.survey.retrieve import QueryTools

    if text_neighbours is None:
        text_neighbours = SurveyConfig().text_neighbours
    if feedback is None:
        feedback = SurveyConfig().feedback
    return QueryTools(encoder=encoder if encoder is not None else index_encoder(index),
                      text_neighbours=text_neighbours, feedback=feedback)


def resolve_local_model(model: str | None) -> str:
    """`--llm local`: None / smollm2-135m -> the converted SmolLM2-135M-Instruct folder; a path as is."""
    from training.base_models import SMOLLM2, ensure_smollm2

    if model in (None, "", SMOLLM2):
        return str(ensure_smollm2(quiet=True))
    return model


def run_survey(index_dir: str | Path, topic: str, out: str | Path, config: Any = None, reporter: Any = None,
               *, encoder: Any = None, device: str = "cpu") -> Any:
    """Open the index, build the text-query tools and write the survey (`graft.survey.pipeline`).

    `graft demo` calls `run_survey(out, DEMO_TOPIC, out / "survey", SurveyConfig(sections=2), reporter)`.
    """
    from dataclasses import replace

    from graft.index import Index
    from graft.survey.pipeline import write_survey

    config = config or SurveyConfig()
    if config.llm == "local":
        config = replace(config, model=resolve_local_model(config.model))
    idx = Index.open(index_dir)
    return write_survey(idx, topic, out, config, reporter, device=device,
                        tools=survey_tools(idx, encoder, config.text_neighbours, config.feedback))


def demo_survey(index_dir: str | Path, reporter: Any = None, console: Any = None, *,
                topic: str = DEMO_TOPIC, encoder: Any = None) -> Path | None:
    """The short survey `graft demo` ends with: two sections on `topic`, offline backend, written to
    INDEX/survey. A corpus that does not cover the topic (e.g. `graft demo --limit 20`) gets a
    message instead of a survey.

    Returns:
        the survey.md path, or None when the topic is not covered.
    """
    from rich.console import Console

    from graft.survey.config import SurveyConfig, SurveyError

    console = console or Console()
    try:
        result = run_survey(index_dir, topic, Path(index_dir) / "survey",
                            SurveyConfig(sections=2, pool=24, section_pool=8), reporter,
                            encoder=encoder)
    except SurveyError as exc:
        console.print(f"survey skipped: {exc}", highlight=False)
        return None
    print_survey_summary(result, console)
    return result.paths["markdown"]


def print_survey_summary(result: Any, console: Any) -> None:
    """The end-of-run table: outline size, sentences, citations by outcome, files."""
    from rich.table import Table

    v = result.verification
    t = Table(title=f"graft survey → {result.out_dir}", show_header=False)
    t.add_column("")
    t.add_column("", justify="right")
    t.add_row("descriptions", str(len(result.descriptions)))
    t.add_row("sections", str(len(result.sections)))
    t.add_row("sentences", f"{v['sentences'] - v['sentences_dropped']} kept · {v['sentences_dropped']} dropped")
    t.add_row("clauses", f"{v['clauses']} · {v.get('first_check_passed', 0)} passed their first check · "
                         f"{v.get('clauses_repaired', 0)} rewritten")
    t.add_row("citations, kept sentences", " · ".join(f"{n} {k}" for k, n in v["citations_kept"].items()))
    t.add_row("citations, all checked", " · ".join(f"{n} {k}" for k, n in v["citations"].items()))
    t.add_row("references", str(len(result.cited)))
    if result.backend_stats:
        t.add_row("LLM", " · ".join(f"{k} {n}" for k, n in sorted(result.backend_stats.items())))
    t.add_row("wall time", f"{result.timings.get('total', 0.0):.1f} s")
    for name, path in result.paths.items():
        t.add_row(name, str(path))
    console.print(t)


def survey(
    index: Path = typer.Argument(..., help="Index directory (from `graft build`)."),
    topic: str = typer.Argument(..., help="The survey topic, e.g. \"neural machine translation\"."),
    out: Path = typer.Option(..., "--out", "-o", help="Output folder: survey.md, references.bib, survey.json."),
    llm: str = typer.Option("offline", "--llm", help="offline (extractive, no LLM), local (transformers) or openai."),
    model: str | None = typer.Option(None, "--model",
                                     help="local: model folder (default SmolLM2-135M-Instruct); openai: model name."),
    base_url: str | None = typer.Option(None, "--base-url", help="openai: server URL up to /v1."),
    api_key_env: str = typer.Option("OPENAI_API_KEY", "--api-key-env", help="Environment variable with the API key."),
    sections: int = typer.Option(4, "--sections", min=1, help="Level-1 sections."),
    papers_per_section: int = typer.Option(_DEFAULTS.papers_per_section, "--papers-per-section", min=1,
                                           help="Papers a section discusses (its comparison table's rows)."),
    verify_rounds: int = typer.Option(3, "--verify-rounds", min=1, max=10,
                                      help="Check-and-rewrite rounds per clause whose citation fails."),
    retriever: str = typer.Option("teacher", "--retriever", help="teacher (graph walks), graft (trained model) or dense (MiniLM over title + abstract, no graph: the baseline)."),
    graph_seeds: int = typer.Option(20, "--graph-seeds", min=0,
                                    help="Widen graph retrievals through the citation ties of their best N papers "
                                         "(0 = off)."),
    text_neighbours: int = typer.Option(0, "--text-neighbours", min=0,
                                        help="Teacher: the N papers nearest a description by title + abstract "
                                             "stand in for its citations (0 = off, the default: on cs768's dev "
                                             "hold-outs 10 lowered reference recall)."),
    recency_weight: float = typer.Option(
        _DEFAULTS.recency_weight, "--recency-weight", parser=finite(0), metavar="FLOAT",
        help="Weight of the recency ranking in the rerank's first stage, beside citation count, similarity and "
             "links into the topic's literature (0 = off, the default)."),
    retrieval_weight: float = typer.Option(
        _DEFAULTS.retrieval_weight, "--retrieval-weight", parser=finite(0), metavar="FLOAT",
        help="Weight of the retrieval order in the rerank's first stage (0 = off, the default)."),
    link_weight: float = typer.Option(
        _DEFAULTS.link_weight, "--link-weight", parser=finite(0), metavar="FLOAT",
        help="Weight of the ranking by links into the topic's literature (the papers retrieved for the topic) "
             "in the rerank's first stage (0 = off)."),
    tie_links: int = typer.Option(
        _DEFAULTS.tie_links, "--tie-links", min=0,
        help="Keep a paper of the topic's literature below the topic-relevance floor when it has at least N "
             "links to the literature's papers above the floor, making at least 5% of all its links (0 = off)."),
    topic_words: float = typer.Option(
        _DEFAULTS.topic_word_share, "--topic-words", parser=finite(0, 1), metavar="SHARE",
        help="Write a section only when more than half of its papers name one of the topic's words that fewer "
             "than SHARE of the corpus's papers use, e.g. 0.1 for a focused survey (0 = off, the default)."),
    until_year: int | None = typer.Option(None, "--until-year", help="Write as of this year: cite no later paper."),
    concurrency: int = typer.Option(4, "--concurrency", min=1, help="Sections written / LLM requests at once."),
    device: str = typer.Option("cpu", "--device", help="Where the graft retriever and a local LLM run: cpu, cuda, "
                               "cuda:N, mps or auto."),
    quiet: bool = typer.Option(False, "--quiet", "-q", help="No progress bars and no summary."),
    as_json: bool = typer.Option(False, "--json", help="Print the summary as JSON."),
) -> None:
    """Write a survey of TOPIC from the index's papers: every clause cites one paper and is checked against it."""
    from graft.errors import GraftError
    from graft.progress import Reporter

    try:
        config = SurveyConfig(llm=llm, model=model, base_url=base_url, api_key_env=api_key_env, sections=sections,
                              papers_per_section=papers_per_section, verify_rounds=verify_rounds, retriever=retriever,
                              graph_seeds=graph_seeds, text_neighbours=text_neighbours, until_year=until_year,
                              max_concurrency=concurrency, recency_weight=recency_weight,
                              retrieval_weight=retrieval_weight, link_weight=link_weight,
                              tie_links=tie_links, topic_word_share=topic_words)
        from graft.devices import resolve_device

        result = run_survey(index, topic, out, config, Reporter(quiet=quiet or as_json), device=resolve_device(device))
    except GraftError as exc:
        fail(exc)
    if as_json:
        typer.echo(json.dumps({"out": str(result.out_dir), "files": {k: str(p) for k, p in result.paths.items()},
                               "title": result.title, "descriptions": result.descriptions,
                               "outline": [{"title": s.title, "papers": s.papers} for s in result.sections],
                               "references": result.cited, "verification": result.verification,
                               "timings_s": result.timings}, indent=2))
    elif not quiet:
        print_survey_summary(result, console)
