"""`graft demo`: the ACLSum demo index, a facet-labelled query and a short survey."""

from __future__ import annotations

from pathlib import Path

import typer

from cli.build_cmd import print_build_summary
from cli.common import console, err, fail
from cli.query_cmd import print_hits
from cli.survey_cmd import demo_survey
from graft.errors import GraftError


def demo(
    out: Path = typer.Option(Path("demo-index"), "--out", help="Where to build the demo index."),
    paper: str | None = typer.Option(None, "--paper", help="Query paper (default: the best-connected one)."),
    limit: int | None = typer.Option(None, min=1, help="Use only the first N ACLSum papers (a quick look)."),
    quiet: bool = typer.Option(False, "--quiet", "-q", help="No progress bars."),
) -> None:
    """Build the ACLSum demo graph, show a facet-labelled query and write a short survey."""
    import numpy as np

    from graft.index import Index
    from graft.progress import Reporter
    from graphbuild.build import BuildConfig, build_index

    try:
        if paper is not None:  # checked before the build, not after it
            from graphbuild.corpus import load_corpus

            ids = load_corpus(None, limit=limit).papers["paper_id"].to_list()
            if paper not in set(ids):
                close = [p for p in ids if p.startswith(paper[:8])][:5] if paper.strip() else []
                raise GraftError(f"--paper {paper!r} is not among the {len(ids)} ACLSum papers of the demo"
                                 + (f"; similar ids: {', '.join(close)}" if close else f", such as {ids[0]}"))
        summary = build_index(None, out, BuildConfig(limit=limit), reporter=Reporter(quiet=quiet),
                              on_note=lambda note: err.print(f"note: {note}", highlight=False, soft_wrap=True))
        print_build_summary(summary)
        idx = Index.open(out)
        if paper is None:
            degree = sum(np.asarray((g > 0).sum(axis=0)).ravel() for g in idx.graphs.values())
            paper = idx.paper_ids[int(np.argmax(degree))]
        result = idx.searcher(k=10).paper(paper)  # as `graft query --paper` answers
        print_hits(result, f"related to {paper}: {idx.papers['title'][idx.row(paper)]}\n{result.answered_by()}")
        survey_md = demo_survey(out, Reporter(quiet=quiet), console)
    except GraftError as exc:
        fail(exc)
    console.print(f"index: {out}  ·  try: graft query {out} --paper {paper} --explain  ·  "
                  f"graft info {out} --paper {paper}  ·  graft serve {out} (in the browser)")
    if survey_md is not None:
        console.print(f"survey: {survey_md}  ·  try: graft survey {out} \"your topic\" --out my-survey")


