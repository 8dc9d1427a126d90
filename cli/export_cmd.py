"""`graft export`: the facet graph and citation links through networkx, or a bibliography (BibTeX,
RIS, CSL-JSON) of a view, a multi-seed query, a query's results, a survey's references or the corpus."""

from __future__ import annotations

from pathlib import Path

import typer

from cli.common import console, err, fail
from graft.errors import GraftError

#: Default file names under the index, per format.
_DEFAULT_NAMES = {"graphml": "graph.graphml", "gexf": "graph.gexf", "json": "graph.json", "bibtex": "papers.bib",
                  "ris": "papers.ris", "csljson": "papers.csl.json"}


def export(
    index: Path = typer.Argument(..., help="Index directory."),
    format: str = typer.Option("graphml", "--format", "-f", help="graphml, gexf or json (the graph); bibtex, ris "
                               "or csljson (a bibliography)."),
    out: Path | None = typer.Option(None, "--out", "-o", help="Output file (default: INDEX/graph.FORMAT for the "
                                    "graph, INDEX/papers.bib, papers.ris or papers.csl.json)."),
    paper: str | None = typer.Option(None, "--paper", help="Bibliography of a view: this paper and its --k "
                                     "related papers."),
    seeds: Path | None = typer.Option(None, "--seeds", help="Bibliography of a multi-seed query: a library's "
                                      "papers in the index and their --k fused related papers."),
    results: Path | None = typer.Option(None, "--results", help="Bibliography of a query's results: a file "
                                        "`graft query --json` wrote."),
    survey: Path | None = typer.Option(None, "--survey", help="Bibliography of a survey's references: the "
                                       "folder `graft survey` wrote."),
    k: int = typer.Option(20, "--k", min=1, help="Related papers with --paper or --seeds."),
) -> None:
    """Export the facet graph (GraphML, GEXF, JSON), or a bibliography of corpus papers (BibTeX, RIS,
    CSL-JSON) with their DOI, arXiv id and URL where known: every paper, or a selection."""
    from graft.export import ALL_FORMATS, EXPORT_FORMATS, export_bibliography, export_graph, selected_papers
    from graft.index import Index

    try:
        if format not in ALL_FORMATS:
            raise GraftError(f"export format '{format}' is unknown; allowed: {', '.join(ALL_FORMATS)}")
        selection = [x for x in (paper, seeds, results, survey) if x is not None]
        if format in EXPORT_FORMATS and selection:
            raise GraftError(f"--format {format} exports the whole graph; --paper, --seeds, --results and --survey "
                             "select the papers of a bibliography (--format bibtex, ris or csljson)")
        idx = Index.open(index)
        target = out or index / _DEFAULT_NAMES[format]
        if format in EXPORT_FORMATS:
            path = export_graph(idx, target, format)
            what = "the graph"
        else:
            ids = selected_papers(idx, paper=paper, seeds=seeds, results=results, survey=survey, k=k,
                                  on_note=lambda note: err.print(note, highlight=False))
            path = export_bibliography(idx, target, format, ids)
            what = f"{len(ids)} papers"
    except GraftError as exc:
        fail(exc)
    console.print(f"wrote {path} ({what})", highlight=False)
